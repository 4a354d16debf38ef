// Fusion: decides which graph nodes get their own buffer; everything else is fused into consumers.
#include "compiler/fusion.h"

#include <algorithm>

#include "compiler/attention_match.h"

namespace prism {

namespace {

// Relative cost of recomputing a node inside a consumer (transcendentals cost more).
int OwnCost(Op op) {
  switch (op) {
    case Op::Exp2:
    case Op::Log2:
    case Op::Sin:
    case Op::Sqrt:
    case Op::Recip: return 4;
    case Op::Add:
    case Op::Mul:
    case Op::Mod:
    case Op::LessThan:
    case Op::Max:
    case Op::Where:
    case Op::Cast:
    case Op::Gather: return 1;
    default: return 0;
  }
}

bool IsLeafBuffer(Op op) { return op == Op::Input || op == Op::Weight || op == Op::State; }

// Follows views (and a dtype cast) down to their source.
NodeId SourceThroughViews(const Graph& g, NodeId n, bool allow_cast) {
  while (true) {
    const Node& nd = g.node(n);
    if (nd.op == Op::Reshape || nd.op == Op::Expand || (allow_cast && nd.op == Op::Cast))
      n = nd.inputs[0];
    else
      return n;
  }
}

}  // namespace

std::optional<LinearMatch> MatchLinear(const Graph& g, NodeId reduce) {
  const Node& r = g.node(reduce);
  if (r.op != Op::SumReduce || r.axes.size() != 1 || r.axes[0] != (int64_t)r.shape.size() - 1)
    return std::nullopt;
  const Node& mul = g.node(r.inputs[0]);
  if (mul.op != Op::Mul || mul.shape.size() < 2 || r.dtype != DType::F32) return std::nullopt;
  const Expr& k = mul.shape.back();
  const Expr& n = mul.shape[mul.shape.size() - 2];
  if (!k.IsConst() || !n.IsConst()) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    NodeId w = SourceThroughViews(g, mul.inputs[side], true), index = -1;
    if (g.node(w).op == Op::Gather) {
      // ExpertLinear: the weight [E, N, K] gathered along axis 0 by index [R] viewed as [R, 1, 1].
      const Node& gn = g.node(w);
      NodeId iv = gn.inputs[1];
      if (g.node(iv).op == Op::Expand) iv = g.node(iv).inputs[0];
      const Node& ir = g.node(iv);
      if (gn.axes[0] != 0 || mul.shape.size() != 3 || ir.op != Op::Reshape || ir.shape.size() != 3 ||
          !ir.shape[1].IsConst(1) || !ir.shape[2].IsConst(1) || ir.shape[0] != mul.shape[0])
        continue;
      index = ir.inputs[0];
      if (g.node(index).shape.size() != 1 || g.node(index).dtype != DType::I32) continue;
      w = gn.inputs[0];
    }
    const Node& wn = g.node(w);
    const size_t lead = index >= 0 ? 1 : 0;
    if (wn.op != Op::Weight || wn.shape.size() != 2 + lead || wn.shape[lead] != n || wn.shape[lead + 1] != k)
      continue;
    // The activation side: x [..., K] viewed as [..., 1, K] and broadcast over N.
    NodeId xv = mul.inputs[1 - side];
    if (g.node(xv).op == Op::Expand) xv = g.node(xv).inputs[0];  // no Expand when N == 1
    const Node& rs = g.node(xv);
    if (rs.op != Op::Reshape || rs.shape.size() < 2 || !rs.shape[rs.shape.size() - 2].IsConst(1)) continue;
    NodeId x = rs.inputs[0];
    const Node& xn = g.node(x);
    if (xn.dtype != DType::F32 || xn.shape.empty() || xn.shape.back() != k) continue;
    if (xn.shape.size() + 1 != rs.shape.size()) continue;
    if (index >= 0 && (xn.shape.size() != 2 || xn.shape[0] != g.node(index).shape[0])) continue;
    return LinearMatch{x, w, index};
  }
  return std::nullopt;
}

namespace {

bool Stored(const Graph& g, NodeId n) {
  const Op op = g.node(n).op;
  return !IsMovement(op) && op != Op::Constant && op != Op::Iota && !WritesState(op);
}

// x = Reshape(Permute(s)) with s stored [.., K, group] per group of rows: the rows' group size, else 0.
Expr KMajorGroup(const Graph& g, const Node& x, const Node& perm) {
  const Node& s = g.node(perm.inputs[0]);
  const size_t r = s.shape.size();
  std::vector<Expr> stride(r, Expr(1));  // s's row-major strides, by axis
  for (size_t d = r - 1; d-- > 0;) stride[d] = stride[d + 1] * s.shape[d + 1];
  std::vector<Expr> st(r);  // the permuted axes' strides
  for (size_t d = 0; d < r; ++d) st[d] = stride[perm.axes[d]];
  const std::vector<Expr>& dim = perm.shape;
  // The trailing permuted axes make K, one stride apart; the rows' inner axes before them are contiguous.
  const int64_t k = x.shape.back().value();
  size_t j = r;
  for (int64_t prod = 1; prod < k && j > 0 && dim[j - 1].IsConst();) prod *= dim[--j].value();
  if (j == r || j == 0 || Product(std::vector<Expr>(dim.begin() + j, dim.end())) != Expr(k)) return 0;
  for (size_t d = j; d + 1 < r; ++d)
    if (st[d] != st[d + 1] * dim[d + 1]) return 0;
  if (!st[j - 1].IsConst(1)) return 0;
  size_t i = j - 1;
  Expr group = dim[i];
  while (i > 0 && st[i - 1] == st[i] * dim[i]) group = group * dim[--i];
  if (st[r - 1] != group) return 0;
  // The axes before the group: whole groups of K x group values, in order.
  for (size_t d = i; d-- > 0;)
    if (st[d] != (d + 1 == i ? group * k : st[d + 1] * dim[d + 1])) return 0;
  return group;
}

}  // namespace

ActivationView ActivationSource(const Graph& g, NodeId x, bool kmajor) {
  const Node& n = g.node(x);
  if (n.op != Op::Reshape) return {x};
  if (Stored(g, n.inputs[0])) return {n.inputs[0]};
  const Node& p = g.node(n.inputs[0]);
  if (!kmajor || p.op != Op::Permute || !Stored(g, p.inputs[0]) || !n.shape.back().IsConst()) return {x};
  const Expr group = KMajorGroup(g, n, p);
  if (group.IsConst(0)) return {x};
  if (group.IsConst(1)) return {p.inputs[0]};  // [rows, K, 1]: row-major after all
  return {p.inputs[0], group};
}

NodeId EpilogueConsumer(const Graph& g, NodeId reduce) {
  const auto& outs = g.outputs();
  auto only_reader = [&](NodeId n) {
    NodeId reader = -1;
    for (NodeId i = n + 1; i < g.size(); ++i)
      for (NodeId x : g.node(i).inputs)
        if (x == n) {
          if (reader >= 0 && reader != i) return NodeId{-1};  // read twice
          reader = i;
        }
    return std::find(outs.begin(), outs.end(), n) == outs.end() ? reader : NodeId{-1};
  };
  // Reshapes keep the row-major order of elements: the product's element i is the view's element i.
  NodeId v = reduce, c = only_reader(reduce);
  while (c >= 0 && g.node(c).op == Op::Reshape) v = c, c = only_reader(c);
  if (c < 0) return -1;
  const Node& cn = g.node(c);
  if ((cn.op != Op::Add && cn.op != Op::Mul) || cn.dtype != DType::F32) return -1;
  const bool same_shape = cn.shape == g.node(v).shape, once = cn.inputs[0] != cn.inputs[1];
  return same_shape && once ? c : -1;
}

std::vector<bool> ChooseRealized(const Graph& g, const FusionOptions& opts, const std::set<NodeId>& forced) {
  const int32_t n = g.size();
  std::vector<std::vector<NodeId>> consumers(n);
  for (NodeId i = 0; i < n; ++i)
    for (NodeId x : g.node(i).inputs) consumers[x].push_back(i);
  std::vector<bool> is_output(n, false);
  for (NodeId o : g.outputs()) is_output[o] = true;

  // Reads seen through chains of views, and whether any of those views broadcasts.
  std::vector<int> uses(n, 0);
  std::vector<bool> broadcast(n, false);
  for (NodeId i = n; i-- > 0;) {
    if (is_output[i]) uses[i]++;
    for (NodeId c : consumers[i]) {
      const Node& cn = g.node(c);
      if (IsMovement(cn.op) && !is_output[c]) {
        uses[i] += uses[c];
        bool widens = false;
        if (cn.op == Op::Expand)
          for (size_t a = 0; a < cn.shape.size(); ++a) widens = widens || g.node(i).shape[a] != cn.shape[a];
        broadcast[i] = broadcast[i] || broadcast[c] || widens;
      } else {
        uses[i] += 1;
      }
    }
  }

  // The template GEMM reads its activation from a buffer and writes its own output buffer; so does
  // fused attention with its queries.
  std::vector<bool> template_side(n, false);
  std::set<NodeId> attention_interior;  // fused attention's inside: its own form, recomputed or not
  if (opts.templates)
    for (NodeId i = 0; i < n; ++i) {
      if (auto m = MatchLinear(g, i)) {
        // The product itself gets a buffer unless a single Add or Mul takes it as its epilogue (a
        // reduction read once is then fused into that reader, as any other).
        template_side[ActivationSource(g, m->x, opts.kmajor_activations && m->index < 0).source] = true;
        template_side[i] = !opts.gemm_epilogues || forced.count(i) || EpilogueConsumer(g, i) < 0;
        if (m->index >= 0) template_side[m->index] = template_side[i] = true;  // no expert epilogues
      }
      if (auto a = MatchCausalAttention(g, i)) {
        template_side[i] = template_side[a->q] = template_side[a->k] = template_side[a->v] = true;
        if (a->mask >= 0) template_side[a->mask] = true;
        attention_interior.insert(a->interior.begin(), a->interior.end());
      }
    }

  // Dead code: nodes no output or state write depends on get no kernel.
  std::vector<bool> needed(n, false);
  for (NodeId i = n; i-- > 0;) {
    const Op op = g.node(i).op;
    needed[i] = needed[i] || is_output[i] || WritesState(op) || IsLeafBuffer(op);
    if (needed[i])
      for (NodeId x : g.node(i).inputs) needed[x] = true;
  }

  std::vector<bool> realized(n, false);
  std::vector<int> cost(n, 0);
  for (NodeId i = 0; i < n; ++i) {
    const Node& nd = g.node(i);
    if (!needed[i]) continue;
    int c = OwnCost(nd.op);
    for (NodeId x : nd.inputs)
      if (!realized[x]) c += cost[x];
    bool r = false;
    if (IsLeafBuffer(nd.op) || WritesState(nd.op) || is_output[i] || forced.count(i) || template_side[i]) {
      r = true;
    } else if (nd.op == Op::Constant || nd.op == Op::Iota || IsMovement(nd.op)) {
      r = false;
    } else if (!opts.fuse) {
      r = true;
    } else if (IsReduce(nd.op)) {
      // Fused as a consumer's epilogue only when read once; lowering checks it is not broadcast.
      r = uses[i] != 1;
      c += 1000;  // never recompute a reduction
    } else {
      const bool recompute = opts.recompute || attention_interior.count(i);
      r = (uses[i] >= 2 && (c >= 8 || !recompute)) || (broadcast[i] && c >= 4) || c > 256;
    }
    realized[i] = r;
    cost[i] = r ? 0 : c;
  }
  return realized;
}

}  // namespace prism
