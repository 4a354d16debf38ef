// Index arithmetic of movement ops: maps an output index to the source index and its validity.
#include "ir/movement.h"

#include "ir/error.h"

namespace prism {

Expr LinearIndex(const std::vector<Expr>& shape, const std::vector<Expr>& idx) {
  Expr lin(0);
  for (size_t i = 0; i < shape.size(); ++i) lin = lin * shape[i] + idx[i];
  return lin;
}

std::vector<Expr> UnravelIndex(const std::vector<Expr>& shape, const Expr& linear) {
  std::vector<Expr> idx(shape.size());
  Expr stride(1);
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = shape[i].IsConst(1) ? Expr(0) : (linear / stride) % shape[i];
    stride = stride * shape[i];
  }
  return idx;
}

SourceIndex MapThroughMovement(const Node& n, const std::vector<Expr>& in_shape, const std::vector<Expr>& idx) {
  SourceIndex s{{}, Expr(1)};
  size_t rank = in_shape.size();
  switch (n.op) {
    case Op::Reshape:
      s.index = UnravelIndex(in_shape, LinearIndex(n.shape, idx));
      break;
    case Op::Permute:
      s.index.resize(rank);
      for (size_t i = 0; i < rank; ++i) s.index[n.axes[i]] = idx[i];
      break;
    case Op::Expand:
      for (size_t i = 0; i < rank; ++i) s.index.push_back(in_shape[i] == n.shape[i] ? idx[i] : Expr(0));
      break;
    case Op::Slice:
      for (size_t i = 0; i < rank; ++i) s.index.push_back(n.args[i] + n.args[rank + i] * idx[i]);
      break;
    case Op::Pad:
      for (size_t i = 0; i < rank; ++i) {
        Expr before = n.args[i], src = idx[i] - before;
        s.index.push_back(src);
        if (!before.IsConst(0)) s.valid = And(s.valid, Lt(Expr(-1), src));
        if (!n.args[rank + i].IsConst(0)) s.valid = And(s.valid, Lt(src, in_shape[i]));
      }
      break;
    default:
      throw Error("MapThroughMovement: " + std::string(OpName(n.op)) + " is not a movement op");
  }
  return s;
}

}  // namespace prism
