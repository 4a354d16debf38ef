// The frontend tensor API: broadcasting arithmetic, elementwise math and views over primitives.
#include "frontend/tensor.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ir/error.h"

namespace prism {

int64_t Tensor::NormAxis(int64_t axis) const {
  int64_t r = rank();
  if (axis < -r || axis >= r)
    throw Error("axis " + std::to_string(axis) + " out of range for " + g_->Describe(id_));
  return axis < 0 ? axis + r : axis;
}

Expr Tensor::dim(int64_t axis) const { return shape()[NormAxis(axis)]; }

Tensor Tensor::reshape(std::vector<Expr> shape) const { return {g_, g_->Reshape(id_, std::move(shape))}; }
Tensor Tensor::permute(std::vector<int64_t> perm) const {
  for (auto& p : perm) p = NormAxis(p);
  return {g_, g_->Permute(id_, std::move(perm))};
}
Tensor Tensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> perm(rank());
  for (int64_t i = 0; i < rank(); ++i) perm[i] = i;
  std::swap(perm[NormAxis(a)], perm[NormAxis(b)]);
  return permute(perm);
}
Tensor Tensor::expand(std::vector<Expr> shape) const { return {g_, g_->Expand(id_, std::move(shape))}; }

Tensor Tensor::slice(int64_t axis, Expr start, Expr size, int64_t step) const {
  axis = NormAxis(axis);
  std::vector<Expr> starts(rank(), Expr(0)), sizes = shape(), steps(rank(), Expr(1));
  starts[axis] = start;
  sizes[axis] = size;
  steps[axis] = Expr(step);
  return {g_, g_->Slice(id_, starts, sizes, steps)};
}

Tensor Tensor::pad(int64_t axis, Expr before, Expr after) const {
  axis = NormAxis(axis);
  std::vector<Expr> b(rank(), Expr(0)), a(rank(), Expr(0));
  b[axis] = before;
  a[axis] = after;
  return {g_, g_->Pad(id_, b, a)};
}

Tensor Tensor::unsqueeze(int64_t axis) const {
  if (axis < 0) axis += rank() + 1;
  std::vector<Expr> s = shape();
  if (axis < 0 || axis > rank()) throw Error("unsqueeze: axis out of range for " + g_->Describe(id_));
  s.insert(s.begin() + axis, Expr(1));
  return reshape(s);
}

Tensor Tensor::squeeze(int64_t axis) const {
  axis = NormAxis(axis);
  if (!shape()[axis].IsConst(1)) throw Error("squeeze: axis " + std::to_string(axis) + " of " + g_->Describe(id_) + " is not 1");
  std::vector<Expr> s = shape();
  s.erase(s.begin() + axis);
  return reshape(s);
}

Tensor Tensor::cast(DType t) const { return dtype() == t ? *this : Tensor{g_, g_->Cast(id_, t)}; }

static DType FloatType(DType t) { return IsFloat(t) && !IsQuantized(t) ? t : DType::F32; }
static Tensor Unary(const Tensor& x, Op op) { return {x.graph(), x.graph()->Unary(op, x.cast(FloatType(x.dtype())).id())}; }

Tensor Tensor::exp2() const { return Unary(*this, Op::Exp2); }
Tensor Tensor::log2() const { return Unary(*this, Op::Log2); }
Tensor Tensor::exp() const { return (*this * std::numbers::log2e).exp2(); }
Tensor Tensor::log() const { return log2() * std::numbers::ln2; }
Tensor Tensor::sin() const { return Unary(*this, Op::Sin); }
Tensor Tensor::cos() const { return (*this + std::numbers::pi / 2).sin(); }
Tensor Tensor::sqrt() const { return Unary(*this, Op::Sqrt); }
Tensor Tensor::recip() const { return Unary(*this, Op::Recip); }
Tensor Tensor::rsqrt() const { return sqrt().recip(); }
Tensor Tensor::sigmoid() const { return (1.0 + (-*this).exp()).recip(); }
Tensor Tensor::tanh() const { return 2.0 * (*this * 2.0).sigmoid() - 1.0; }
Tensor Tensor::abs() const { return Maximum(*this, -*this); }
Tensor Tensor::square() const { return *this * *this; }
Tensor Tensor::pow(double p) const { return (log2() * p).exp2(); }

static std::vector<int64_t> NormAxes(const Tensor& t, std::vector<int64_t> axes) {
  for (auto& a : axes) a = t.NormAxis(a);
  return axes;
}

static Tensor DropAxes(const Tensor& t, const std::vector<int64_t>& axes) {
  std::vector<Expr> s;
  for (int64_t i = 0; i < t.rank(); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) s.push_back(t.shape()[i]);
  return t.reshape(s);
}

Tensor Tensor::sum(std::vector<int64_t> axes, bool keepdim) const {
  axes = NormAxes(*this, axes);
  Tensor r{g_, g_->Reduce(Op::SumReduce, id_, axes)};
  return keepdim ? r : DropAxes(r, axes);
}

Tensor Tensor::max(std::vector<int64_t> axes, bool keepdim) const {
  axes = NormAxes(*this, axes);
  Tensor r{g_, g_->Reduce(Op::MaxReduce, id_, axes)};
  return keepdim ? r : DropAxes(r, axes);
}

Tensor Tensor::mean(std::vector<int64_t> axes, bool keepdim) const {
  axes = NormAxes(*this, axes);
  Expr n(1);
  for (auto a : axes) n = n * shape()[a];
  Tensor s = cast(FloatType(dtype())).sum(axes, keepdim);
  if (n.IsConst()) return s * (1.0 / (double)n.value());
  return s / BroadcastTo(ExprValue(g_, n, DType::F32), s.shape());
}

Tensor Tensor::var(std::vector<int64_t> axes, bool keepdim, bool unbiased) const {
  axes = NormAxes(*this, axes);
  Tensor x = cast(FloatType(dtype()));
  Tensor d = x - x.mean(axes, true);
  Tensor v = d.square().mean(axes, keepdim);
  if (!unbiased) return v;
  Expr n(1);
  for (auto a : axes) n = n * shape()[a];
  if (!n.IsConst()) throw Error("var: unbiased variance needs constant reduced sizes");
  return v * ((double)n.value() / (double)(n.value() - 1));
}

std::vector<Expr> BroadcastShapes(const std::vector<Expr>& a, const std::vector<Expr>& b, const char* op) {
  size_t r = std::max(a.size(), b.size());
  std::vector<Expr> out(r);
  for (size_t i = 0; i < r; ++i) {
    Expr x = i < r - a.size() ? Expr(1) : a[i - (r - a.size())];
    Expr y = i < r - b.size() ? Expr(1) : b[i - (r - b.size())];
    if (x == y || y.IsConst(1)) out[i] = x;
    else if (x.IsConst(1)) out[i] = y;
    else throw Error(std::string(op) + ": cannot broadcast " + ShapeStr(a) + " with " + ShapeStr(b));
  }
  return out;
}

Tensor BroadcastTo(const Tensor& t, const std::vector<Expr>& shape) {
  if (t.rank() > (int64_t)shape.size())
    throw Error("broadcast: " + t.graph()->Describe(t.id()) + " has more axes than " + ShapeStr(shape));
  Tensor x = t;
  if (x.rank() < (int64_t)shape.size()) {
    std::vector<Expr> s(shape.size() - x.rank(), Expr(1));
    s.insert(s.end(), x.shape().begin(), x.shape().end());
    x = x.reshape(s);
  }
  bool same = true;
  for (size_t i = 0; i < shape.size(); ++i) same = same && x.shape()[i] == shape[i];
  return same ? x : x.expand(shape);
}

static Tensor BinaryOp(Op op, const Tensor& a, const Tensor& b, const char* name) {
  if (a.graph() != b.graph()) throw Error(std::string(name) + ": tensors belong to different graphs");
  auto shape = BroadcastShapes(a.shape(), b.shape(), name);
  DType t = PromoteTypes(a.dtype(), b.dtype());
  Tensor x = BroadcastTo(a.cast(t), shape), y = BroadcastTo(b.cast(t), shape);
  return {a.graph(), a.graph()->Binary(op, x.id(), y.id())};
}

static Tensor Scalar(const Tensor& like, double v) {
  DType t = IsInteger(like.dtype()) && v != std::floor(v) ? DType::F32 : FloatType(like.dtype());
  if (IsInteger(like.dtype()) && v == std::floor(v)) t = like.dtype();
  return Full(like.graph(), v, like.shape(), t);
}

Tensor operator+(const Tensor& a, const Tensor& b) { return BinaryOp(Op::Add, a, b, "add"); }
Tensor operator*(const Tensor& a, const Tensor& b) { return BinaryOp(Op::Mul, a, b, "mul"); }
Tensor operator-(const Tensor& a) { return a * Scalar(a, -1.0); }
Tensor operator-(const Tensor& a, const Tensor& b) { return a + (-b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return a * b.recip(); }
Tensor operator+(const Tensor& a, double b) { return a + Scalar(a, b); }
Tensor operator-(const Tensor& a, double b) { return a + Scalar(a, -b); }
Tensor operator*(const Tensor& a, double b) { return a * Scalar(a, b); }
Tensor operator/(const Tensor& a, double b) { return a * Scalar(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return b + a; }
Tensor operator-(double a, const Tensor& b) { return Scalar(b, a) - b; }
Tensor operator*(double a, const Tensor& b) { return b * a; }
Tensor Maximum(const Tensor& a, const Tensor& b) { return BinaryOp(Op::Max, a, b, "max"); }
Tensor Minimum(const Tensor& a, const Tensor& b) { return -Maximum(-a, -b); }
Tensor Mod(const Tensor& a, const Tensor& b) { return BinaryOp(Op::Mod, a, b, "mod"); }
Tensor Less(const Tensor& a, const Tensor& b) { return BinaryOp(Op::LessThan, a, b, "less"); }

Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto shape = BroadcastShapes(BroadcastShapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  DType t = PromoteTypes(a.dtype(), b.dtype());
  Tensor c = BroadcastTo(cond, shape), x = BroadcastTo(a.cast(t), shape), y = BroadcastTo(b.cast(t), shape);
  return {a.graph(), a.graph()->Where(c.id(), x.id(), y.id())};
}

Tensor Full(Graph* g, double value, std::vector<Expr> shape, DType dtype) {
  return {g, g->Constant(value, dtype, std::move(shape))};
}

Tensor Arange(Graph* g, Expr n, DType dtype) { return {g, g->Iota({n}, 0, dtype)}; }

Tensor ExprValue(Graph* g, const Expr& value, DType dtype) {
  if (value.IsConst()) return Full(g, (double)value.value(), {}, dtype);
  return Arange(g, value + Expr(1), dtype).slice(0, value, Expr(1)).reshape({});
}

}  // namespace prism
