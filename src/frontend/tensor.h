// The frontend tensor API: a handle on a graph node with broadcasting arithmetic and views.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace prism {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* g, NodeId id) : g_(g), id_(id) {}

  Graph* graph() const { return g_; }
  NodeId id() const { return id_; }
  const Node& node() const { return g_->node(id_); }
  const std::vector<Expr>& shape() const { return node().shape; }
  Expr dim(int64_t axis) const;  // negative axes count from the end
  int64_t rank() const { return (int64_t)shape().size(); }
  DType dtype() const { return node().dtype; }

  // Views (no copies)
  Tensor reshape(std::vector<Expr> shape) const;
  Tensor permute(std::vector<int64_t> perm) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor expand(std::vector<Expr> shape) const;
  Tensor slice(int64_t axis, Expr start, Expr size, int64_t step = 1) const;
  Tensor pad(int64_t axis, Expr before, Expr after) const;
  Tensor unsqueeze(int64_t axis) const;
  Tensor squeeze(int64_t axis) const;

  // Elementwise math
  Tensor cast(DType t) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor exp2() const;
  Tensor log2() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor recip() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor abs() const;
  Tensor square() const;
  Tensor pow(double p) const;  // via exp2(p * log2 x): for positive x

  // Reductions; negative axes count from the end
  Tensor sum(std::vector<int64_t> axes, bool keepdim = true) const;
  Tensor max(std::vector<int64_t> axes, bool keepdim = true) const;
  Tensor mean(std::vector<int64_t> axes, bool keepdim = true) const;
  Tensor var(std::vector<int64_t> axes, bool keepdim = true, bool unbiased = false) const;

  int64_t NormAxis(int64_t axis) const;

 private:
  Graph* g_ = nullptr;
  NodeId id_ = -1;
};

// Numpy-style broadcasting of two shapes (right-aligned; equal or 1); throws naming both.
std::vector<Expr> BroadcastShapes(const std::vector<Expr>& a, const std::vector<Expr>& b, const char* op);
Tensor BroadcastTo(const Tensor& t, const std::vector<Expr>& shape);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor Maximum(const Tensor& a, const Tensor& b);
Tensor Minimum(const Tensor& a, const Tensor& b);
Tensor Mod(const Tensor& a, const Tensor& b);
Tensor Less(const Tensor& a, const Tensor& b);  // bool
Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor Full(Graph* g, double value, std::vector<Expr> shape, DType dtype = DType::F32);
Tensor Arange(Graph* g, Expr n, DType dtype = DType::I32);  // [n]: 0, 1, ..., n-1
// The run-time value of a symbolic expression as a 0-d tensor (an Iota read at that index).
Tensor ExprValue(Graph* g, const Expr& value, DType dtype = DType::I32);

}  // namespace prism
