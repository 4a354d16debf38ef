// Seeded random DAGs of primitives and views over a symbolic size "n", for fuzzing every backend
// against the reference interpreter (shared by fuzz_test.cpp and the GPU backends' tests).
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "frontend/nn.h"

namespace prism::testing {

class RandomGraphBuilder {
 public:
  explicit RandomGraphBuilder(uint64_t seed) : rng_(seed) {}

  void Build(Graph* g) {
    g_ = g;
    int inputs = Pick(1, 3);
    for (int i = 0; i < inputs; ++i) pool_.push_back(NewInput(RandomShape()));
    int ops = Pick(3, 14);
    for (int i = 0; i < ops; ++i) pool_.push_back(RandomOp());
    int outs = Pick(1, 3);
    for (int i = 0; i < outs; ++i) {
      const Tensor& t = pool_[pool_.size() - 1 - Pick(0, std::min<int>(3, (int)pool_.size() - 1))];
      g->MarkOutput(t.id(), "out" + std::to_string(i));
    }
  }

 private:
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  Expr RandomDim() {
    static const int64_t dims[] = {1, 2, 3, 5, 17};
    return Pick(0, 5) == 0 ? Expr::Sym("n") : Expr(dims[Pick(0, 4)]);
  }
  std::vector<Expr> RandomShape() {
    std::vector<Expr> s(Pick(1, 3));
    for (auto& d : s) d = RandomDim();
    return s;
  }
  Tensor NewInput(std::vector<Expr> shape, DType t = DType::F32) {
    return {g_, g_->Input("x" + std::to_string(inputs_++), t, std::move(shape))};
  }
  Tensor Any() { return pool_[Pick(0, (int)pool_.size() - 1)]; }
  Tensor Recent() { return pool_[pool_.size() - 1 - Pick(0, std::min<int>(2, (int)pool_.size() - 1))]; }

  // A second operand broadcast-compatible with a: same shape, or a fresh input with some axes 1.
  Tensor Partner(const Tensor& a) {
    for (int tries = 0; tries < 4; ++tries) {
      Tensor b = Any();
      if (b.id() != a.id() && b.shape().size() == a.shape().size()) {
        bool same = true;
        for (int64_t i = 0; i < a.rank(); ++i) same = same && b.shape()[i] == a.shape()[i];
        if (same) return b;
      }
    }
    std::vector<Expr> s = a.shape();
    for (auto& d : s)
      if (Pick(0, 3) == 0) d = Expr(1);
    return NewInput(s);
  }

  Tensor RandomOp() {
    Tensor a = Recent();
    switch (Pick(0, 13)) {
      case 0: return a.sin();
      case 1: return a.sin().exp2();
      case 2: return (a.abs() + 0.5).sqrt();
      case 3: return (a.abs() + 0.5).recip();
      case 4: return (a.abs() + 0.5).log2();
      case 5: return a + Partner(a);
      case 6: return a * Partner(a);
      case 7: return Maximum(a, Partner(a));
      case 8: {
        Tensor b = Partner(a);
        return Where(Less(a, b), a, b * 0.5);
      }
      case 9: {
        int64_t axis = Pick(0, (int)a.rank() - 1);
        Tensor r = Pick(0, 1) ? a.sum({axis}) : a.max({axis});
        return Pick(0, 1) ? r : BroadcastTo(r, a.shape()) + a;  // reduce epilogue or broadcast
      }
      case 10: {  // permute or reshape
        if (a.rank() > 1 && Pick(0, 1)) {
          std::vector<int64_t> perm(a.rank());
          for (int64_t i = 0; i < a.rank(); ++i) perm[i] = i;
          std::shuffle(perm.begin(), perm.end(), rng_);
          return a.permute(perm);
        }
        Expr total = Product(a.shape());
        const Expr& last = a.shape().back();
        if (last.IsConst() && last.value() % 2 == 0 && last.value() > 2) {
          std::vector<Expr> s = a.shape();
          s.back() = Expr(last.value() / 2);
          s.push_back(Expr(2));
          return a.reshape(s);
        }
        return a.reshape({total});
      }
      case 11: {  // slice or pad
        int64_t axis = Pick(0, (int)a.rank() - 1);
        const Expr& d = a.shape()[axis];
        if (d.IsConst() && d.value() > 2) {
          return Pick(0, 1) ? a.slice(axis, 1, d - Expr(1)) : a.slice(axis, 0, Expr((d.value() + 1) / 2), 2);
        }
        return a.pad(axis, Pick(0, 2), Pick(0, 2));
      }
      case 12: {  // expand a size-1 axis
        std::vector<Expr> s = a.shape();
        for (auto& d : s)
          if (d.IsConst(1)) {
            d = Expr(Pick(2, 4));
            return a.expand(s);
          }
        return a.unsqueeze(0).expand([&] {
          auto t = a.shape();
          t.insert(t.begin(), Expr(3));
          return t;
        }());
      }
      default: {  // gather along an axis with a random index tensor
        int64_t axis = Pick(0, (int)a.rank() - 1);
        std::vector<Expr> s = a.shape();
        s[axis] = RandomDim();
        Tensor idx = NewInput(s, DType::I32);
        return {g_, g_->Gather(a.id(), idx.id(), axis)};
      }
    }
  }

  std::mt19937_64 rng_;
  Graph* g_ = nullptr;
  std::vector<Tensor> pool_;
  int inputs_ = 0;
};

}  // namespace prism::testing
