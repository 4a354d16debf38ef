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

// Reshape maps groups of adjacent axes whose sizes multiply to the same value independently, so
// a split or merge costs one division at most and unrelated axes never enter a linear index.
// Falls back to the whole linear offset when the sizes cannot be grouped symbolically.
static std::vector<Expr> ReshapeIndex(const std::vector<Expr>& in, const std::vector<Expr>& out,
                                      const std::vector<Expr>& idx) {
  std::vector<Expr> src(in.size(), Expr(0));
  size_t i = 0, j = 0;
  auto exact = [](const Expr& a, const Expr& b) {  // a / b divides without remainder, symbolically
    Expr q = a / b;
    return q.kind() != Expr::Kind::Div && (a % b).IsConst(0);
  };
  while (true) {
    while (i < in.size() && in[i].IsConst(1)) ++i;
    while (j < out.size() && out[j].IsConst(1)) ++j;
    if (i == in.size() || j == out.size()) {
      if (i != in.size() || j != out.size()) return UnravelIndex(in, LinearIndex(out, idx));
      return src;
    }
    size_t i0 = i, j0 = j;
    Expr pi = in[i++], po = out[j++];
    while (pi != po) {
      if (exact(po, pi) && i < in.size()) pi = pi * in[i++];
      else if (exact(pi, po) && j < out.size()) po = po * out[j++];
      else return UnravelIndex(in, LinearIndex(out, idx));
    }
    std::vector<Expr> og(out.begin() + j0, out.begin() + j), oi(idx.begin() + j0, idx.begin() + j);
    std::vector<Expr> ig(in.begin() + i0, in.begin() + i);
    std::vector<Expr> part = UnravelIndex(ig, LinearIndex(og, oi));
    for (size_t a = 0; a < part.size(); ++a) src[i0 + a] = part[a];
  }
}

SourceIndex MapThroughMovement(const Node& n, const std::vector<Expr>& in_shape, const std::vector<Expr>& idx) {
  SourceIndex s{{}, Expr(1)};
  size_t rank = in_shape.size();
  switch (n.op) {
    case Op::Reshape:
      s.index = ReshapeIndex(in_shape, n.shape, idx);
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
