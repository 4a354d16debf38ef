// Pattern match of causal grouped-query attention: walks back from P·V through the softmax, the causal
// mask and Q·Kᵀ, composing every view's index map so that any chain of reshapes and permutes that
// reads the right elements matches (and any that reads others does not).
#include "compiler/attention_match.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "ir/movement.h"

namespace prism {
namespace {

class AttentionMatcher {
 public:
  explicit AttentionMatcher(const Graph& g) : g_(g) {
    for (const std::string& s : g.Symbols()) ranges_[s] = SymRange{};
  }

  std::optional<AttentionMatch> Match(NodeId pv) {
    const Node& o = g_.node(pv);
    if (o.op != Op::SumReduce || o.dtype != DType::F32 || o.shape.size() != 5 ||
        o.axes != std::vector<int64_t>{4})
      return std::nullopt;
    const Node& prod = g_.node(o.inputs[0]);
    if (prod.op != Op::Mul || prod.shape.size() != 5) return std::nullopt;
    const auto& sh = prod.shape;  // [H, G, S, D, T]
    if (!sh[0].IsConst() || !sh[1].IsConst() || !sh[3].IsConst()) return std::nullopt;
    AttentionMatch m;
    m.heads_kv = sh[0].value();
    m.group = sh[1].value();
    m.head_dim = sh[3].value();
    m.seq = sh[2];
    m.total = sh[4];
    Range("attn_h", sh[0]);
    Range("attn_g", sh[1]);
    Range("attn_s", m.seq);
    Range("attn_t", m.total);
    Range("attn_d", sh[3]);
    // A size-1 axis is index 0 (views drop it), as in lowering.
    auto var = [](const char* name, const Expr& extent) {
      return extent.IsConst(1) ? Expr(0) : Expr::Sym(name);
    };
    const Expr h = var("attn_h", sh[0]), gi = var("attn_g", sh[1]), s = var("attn_s", m.seq);
    const Expr t = var("attn_t", m.total), d = var("attn_d", sh[3]);
    interior_.insert(o.inputs[0]);

    // P·V: p[h, g, s, t] * v[t, h, d], summed over t.
    NodeId p = -1, v = -1;
    if (!EitherOrder(prod, [&](NodeId a, NodeId b) {
          return Reads(a, {h, gi, s, d, t}, {h, gi, s, t}, &p) &&
                 ReadsKv(b, {h, gi, s, d, t}, s, t, h, d, &v, &m, &m.v_layout);
        }))
      return std::nullopt;
    m.v = v;
    // Softmax: p = e * recip(sum_t e), e = exp2((w - max_t w) * c).
    const Node& pn = g_.node(p);
    NodeId e = -1, recip = -1;
    if (pn.op != Op::Mul || !EitherOrder(pn, [&](NodeId a, NodeId b) {
          e = a;
          return g_.node(a).op == Op::Exp2 && Reads(b, {h, gi, s, t}, {h, gi, s, Expr(0)}, &recip);
        }))
      return std::nullopt;
    const Node& rn = g_.node(recip);
    if (rn.op != Op::Recip) return std::nullopt;
    const Node& zn = g_.node(rn.inputs[0]);
    if (zn.op != Op::SumReduce || zn.axes != std::vector<int64_t>{3} || zn.inputs[0] != e)
      return std::nullopt;
    interior_.insert({p, e, recip, rn.inputs[0]});
    const Node& scaled = g_.node(g_.node(e).inputs[0]);
    interior_.insert(g_.node(e).inputs[0]);
    NodeId shifted = -1;
    std::optional<double> c;
    if (scaled.op != Op::Mul || !EitherOrder(scaled, [&](NodeId a, NodeId b) {
          shifted = a;
          return (c = ConstantOf(b, {h, gi, s, t})).has_value();
        }))
      return std::nullopt;
    m.exp_scale = *c;
    const Node& sn = g_.node(shifted);
    interior_.insert(shifted);
    NodeId w = -1, negmax = -1;
    if (sn.op != Op::Add || !EitherOrder(sn, [&](NodeId a, NodeId b) {
          w = a;
          return Reads(b, {h, gi, s, t}, {h, gi, s, Expr(0)}, &negmax);
        }))
      return std::nullopt;
    const Node& nm = g_.node(negmax);
    NodeId mx = -1;
    if (nm.op != Op::Mul || !EitherOrder(nm, [&](NodeId a, NodeId b) {
          mx = a;
          return ConstantOf(b, {h, gi, s, Expr(0)}) == -1.0;
        }))
      return std::nullopt;
    const Node& mxn = g_.node(mx);
    if (mxn.op != Op::MaxReduce || mxn.axes != std::vector<int64_t>{3} || mxn.inputs[0] != w)
      return std::nullopt;
    interior_.insert({negmax, mx, w});
    // The causal mask: w = t < s + offset ? scores : -inf (none: every key is visible, offset = total).
    const std::vector<Expr> at = {h, gi, s, t};
    NodeId masked = w;
    const Node& wn = g_.node(w);
    if (wn.op == Op::Where && ConstantOf(wn.inputs[2], at) == -INFINITY) {
      const Node& cond = g_.node(wn.inputs[0]);
      if (cond.op != Op::LessThan || !IotaIs(cond.inputs[0], at, t)) return std::nullopt;
      const Node& limit = g_.node(cond.inputs[1]);
      std::optional<Expr> offset;
      if (m.table >= 0) {  // paged: t < positions[s] + 1
        if (limit.op != Op::Add || !EitherOrder(limit, [&](NodeId a, NodeId b) {
              const Node* pn = nullptr;
              return Reads(a, at, {s}, &m.positions) && (pn = &g_.node(m.positions)) &&
                     IsInteger(pn->dtype) && pn->shape.size() == 1 && ConstantOf(b, at) == 1.0;
            }))
          return std::nullopt;
        m.offset = Expr(0);
      } else {
        if (limit.op != Op::Add || !EitherOrder(limit, [&](NodeId a, NodeId b) {
              if (!IotaIs(a, at, s)) return false;
              offset = IotaValue(b, at);  // a size, or a whole number
              const std::optional<double> c = offset ? std::nullopt : ConstantOf(b, at);
              if (c && *c == std::floor(*c) && std::abs(*c) < 1e15) offset = Expr((int64_t)*c);
              return offset.has_value();
            }))
          return std::nullopt;
        m.offset = *offset;
      }
      interior_.insert({wn.inputs[0], cond.inputs[1]});
      masked = wn.inputs[1];
      interior_.insert(masked);
    } else if (m.table >= 0) {
      return std::nullopt;  // a paged cache's keys are visible up to each query's position only
    } else {
      m.offset = m.total;
    }
    // An additive mask: scores + mask[s, t], the same for every head.
    NodeId scores = masked;
    const Node& mk = g_.node(masked);
    if (mk.op == Op::Add) {
      if (!EitherOrder(mk, [&](NodeId a, NodeId b) {
            scores = a;
            return ReadsMask(b, at, s, t, &m);
          }))
        return std::nullopt;
      interior_.insert(scores);
    }
    // Scores: scale * sum_d q[s, h*G + g, d] * k[t, h, d] (or the sum alone: scale 1).
    const Node& sc = g_.node(scores);
    NodeId qk = -1;
    std::optional<double> scale;
    const size_t mark = views_.size();
    if (sc.op != Op::Mul || !EitherOrder(sc, [&](NodeId a, NodeId b) {
          return Reads(a, at, {h, gi, s, t, Expr(0)}, &qk) && (scale = ConstantOf(b, at)).has_value();
        })) {
      views_.resize(mark);
      if (!Reads(scores, at, {h, gi, s, t, Expr(0)}, &qk)) return std::nullopt;
      scale = 1.0;
    }
    m.scale = *scale;
    const Node& qkn = g_.node(qk);
    if (qkn.op != Op::SumReduce || qkn.axes != std::vector<int64_t>{4}) return std::nullopt;
    const Node& qkp = g_.node(qkn.inputs[0]);
    if (qkp.op != Op::Mul || qkp.shape.size() != 5 || qkp.shape[4] != sh[3]) return std::nullopt;
    interior_.insert({qk, qkn.inputs[0]});
    const std::vector<Expr> qk_at = {h, gi, s, t, d};
    NodeId q = -1, k = -1;
    AttentionMatch km = m;  // K must be read as V is: both paged through the same table, or neither
    km.table = -1;
    if (!EitherOrder(qkp, [&](NodeId a, NodeId b) {
          return ReadsQuery(a, qk_at, s, h, gi, d, m, &q, &m.q_layout) &&
                 ReadsKv(b, qk_at, s, t, h, d, &k, &km, &m.k_layout);
        }))
      return std::nullopt;
    if (km.table != m.table || km.block != m.block) return std::nullopt;
    m.q = q;
    m.k = k;
    interior_.insert(views_.begin(), views_.end());
    for (NodeId operand : {q, k, v, m.table, m.positions, m.mask}) interior_.erase(operand);
    m.interior = interior_;
    return m;
  }

 private:
  void Range(const std::string& v, const Expr& extent) {
    SymRange r;
    if (extent.IsConst())
      r.hi = std::max<int64_t>(extent.value() - 1, 0);
    else
      r.upper_excl = extent;
    ranges_[v] = r;
  }

  // Equal for every value of the symbols in range: simplified to 0, or the same polynomial once expanded
  // (strides such as 16 * ((g + 2h) * seq), which Simplify leaves factored).
  bool Same(const Expr& a, const Expr& b) const {
    const Expr diff = Simplify(a - b, ranges_);
    if (diff.IsConst(0)) return true;
    Polynomial p;
    if (!Expand(diff, &p)) return false;
    for (const auto& [monomial, coefficient] : p)
      if (coefficient != 0) return false;
    return true;
  }

  // A polynomial: coefficient per monomial (its symbols, sorted, repeated by power).
  using Polynomial = std::map<std::vector<std::string>, int64_t>;
  static bool Expand(const Expr& e, Polynomial* out) {
    switch (e.kind()) {
      case Expr::Kind::Const: (*out)[{}] += e.value(); return true;
      case Expr::Kind::Sym: (*out)[{e.name()}] += 1; return true;
      case Expr::Kind::Add:
        for (const Expr& a : e.args())
          if (!Expand(a, out)) return false;
        return true;
      case Expr::Kind::Mul: {
        Polynomial acc{{{}, 1}};
        for (const Expr& a : e.args()) {
          Polynomial f, next;
          if (!Expand(a, &f)) return false;
          for (const auto& [ma, ca] : acc)
            for (const auto& [mb, cb] : f) {
              std::vector<std::string> m = ma;
              m.insert(m.end(), mb.begin(), mb.end());
              std::sort(m.begin(), m.end());
              next[m] += ca * cb;
            }
          acc = std::move(next);
        }
        for (const auto& [m, c] : acc) (*out)[m] += c;
        return true;
      }
      default: return false;  // division, modulo, min, max, comparisons: not a polynomial
    }
  }

  // Follows views from n at index idx down to the first computed node; false inside padding.
  bool Resolve(NodeId n, std::vector<Expr> idx, NodeId* base, std::vector<Expr>* base_idx) {
    while (true) {
      const Node& nd = g_.node(n);
      if (nd.op != Op::Reshape && nd.op != Op::Permute && nd.op != Op::Expand && nd.op != Op::Slice) break;
      SourceIndex si = MapThroughMovement(nd, g_.node(nd.inputs[0]).shape, idx);
      if (!Simplify(si.valid, ranges_).IsConst(1)) return false;
      for (Expr& e : si.index) e = Simplify(e, ranges_);
      views_.push_back(n);
      idx = std::move(si.index);
      n = nd.inputs[0];
    }
    *base = n;
    *base_idx = std::move(idx);
    return true;
  }

  // Whether node n at idx reads its base node at exactly `want` (index by index).
  bool Reads(NodeId n, const std::vector<Expr>& idx, const std::vector<Expr>& want, NodeId* base) {
    std::vector<Expr> got;
    if (!Resolve(n, idx, base, &got) || got.size() != want.size()) return false;
    for (size_t i = 0; i < want.size(); ++i)
      if (!Same(got[i], want[i])) return false;
    return true;
  }

  // An index linear in `vars`: its strides and offset; nullopt when it is not linear. A constant stands for
  // an axis of size 1, whose stride is moot: `dense` gives it (the dense layout's, so that a dense operand
  // keeps its plain form).
  struct Affine {
    std::vector<Expr> strides;
    Expr offset;
  };
  std::optional<Affine> Linear(const Expr& index, const std::vector<Expr>& vars,
                               const std::vector<int64_t>& dense) {
    std::map<std::string, Expr> zero;
    for (const Expr& v : vars)
      if (v.kind() == Expr::Kind::Sym) zero[v.name()] = Expr(0);
    Affine a{{}, Simplify(index.Substitute(zero), ranges_)};
    Expr sum = a.offset;
    for (size_t i = 0; i < vars.size(); ++i) {
      const Expr& v = vars[i];
      Expr st = dense[i];
      if (v.kind() == Expr::Kind::Sym) {
        std::map<std::string, Expr> one = zero;
        one[v.name()] = Expr(1);
        st = Simplify(index.Substitute(one) - a.offset, ranges_);
      }
      a.strides.push_back(st);
      sum = sum + v * st;
    }
    if (!Same(index, sum)) return std::nullopt;
    // The strides and offset hold sizes only: an operand whose place moves with another loop variable
    // (a key that depends on its query) is not this operand.
    std::vector<std::string> used;
    for (const Expr& e : a.strides) e.CollectSymbols(&used);
    a.offset.CollectSymbols(&used);
    for (const std::string& name : used)
      if (ranges_.count(name) && name.rfind("attn_", 0) == 0) return std::nullopt;
    return a;
  }

  // An f32 node read at `idx` through views; its linear index there.
  std::optional<Expr> LinearRead(NodeId n, const std::vector<Expr>& idx, NodeId* base) {
    std::vector<Expr> got;
    if (!Resolve(n, idx, base, &got)) return std::nullopt;
    const Node& b = g_.node(*base);
    if (b.dtype != DType::F32 || b.op == Op::Constant || b.op == Op::Iota) return std::nullopt;
    return Simplify(LinearIndex(b.shape, got), ranges_);
  }

  // q[s, h*G + g, d] of an f32 node in any layout with contiguous rows.
  bool ReadsQuery(NodeId n, const std::vector<Expr>& idx, const Expr& s, const Expr& h, const Expr& gi,
                  const Expr& d, const AttentionMatch& m, NodeId* base, OperandLayout* layout) {
    const int64_t D = m.head_dim, G = m.group;
    const auto index = LinearRead(n, idx, base);
    const auto a = index ? Linear(*index, {s, h, gi, d}, {m.heads_kv * G * D, G * D, D, 1}) : std::nullopt;
    if (!a || !a->strides[3].IsConst(1)) return false;
    // A query head's stride: along g, or along h when there is one group head (G apart otherwise).
    const bool sym_g = gi.kind() == Expr::Kind::Sym, sym_h = h.kind() == Expr::Kind::Sym;
    const Expr head = sym_g ? a->strides[2] : sym_h ? a->strides[1] : Expr(D);
    if (sym_g && sym_h && !Same(a->strides[1], head * Expr(G))) return false;
    *layout = {a->strides[0], head, a->offset};
    return true;
  }

  // Key t of K/V head h as an f32 node in any layout with contiguous rows.
  bool ReadsStrided(NodeId n, const std::vector<Expr>& idx, const Expr& t, const Expr& h, const Expr& d,
                    int64_t hd, int64_t d_size, NodeId* base, OperandLayout* layout) {
    const auto index = LinearRead(n, idx, base);
    const auto a = index ? Linear(*index, {t, h, d}, {hd, d_size, 1}) : std::nullopt;
    if (!a || !a->strides[2].IsConst(1)) return false;
    *layout = {a->strides[0], a->strides[1], a->offset};
    return true;
  }

  // An f32 node read at [s, t] for every head.
  bool ReadsMask(NodeId n, const std::vector<Expr>& idx, const Expr& s, const Expr& t, AttentionMatch* m) {
    NodeId base = -1;
    const auto index = LinearRead(n, idx, &base);
    const auto a = index ? Linear(*index, {s, t}, {0, 1}) : std::nullopt;
    if (!a || !a->strides[1].IsConst(1)) return false;
    m->mask = base;
    m->mask_layout = {a->strides[0], 0, a->offset};
    return true;
  }

  // An f32 state write [cap, H, D] read at `want`.
  bool ReadsState(NodeId n, const std::vector<Expr>& idx, const std::vector<Expr>& want, NodeId* base) {
    if (!Reads(n, idx, want, base)) return false;
    const Node& b = g_.node(*base);
    return b.op == Op::StateWrite && b.dtype == DType::F32 && b.shape.size() == 3;
  }

  // K or V at [t, h, d] for query s: a state write read directly, or (paged, recorded in *m) a pool
  // gathered per query through its block table.
  bool ReadsKv(NodeId n, const std::vector<Expr>& idx, const Expr& s, const Expr& t, const Expr& h,
               const Expr& d, NodeId* base, AttentionMatch* m, OperandLayout* layout) {
    *layout = {Expr(m->heads_kv * m->head_dim), Expr(m->head_dim), 0};
    const size_t mark = views_.size();
    if (ReadsState(n, idx, {t, h, d}, base)) return true;
    views_.resize(mark);
    if (ReadsPaged(n, idx, s, t, h, d, base, m)) return true;
    views_.resize(mark);
    return m->table < 0 &&
           ReadsStrided(n, idx, t, h, d, m->heads_kv * m->head_dim, m->head_dim, base, layout);
  }

  // A pool gathered per query through its block table (recorded in *m).
  bool ReadsPaged(NodeId n, const std::vector<Expr>& idx, const Expr& s, const Expr& t, const Expr& h,
                  const Expr& d, NodeId* base, AttentionMatch* m) {
    // gathered[s, t, e] = src[s, index[s, t, e], e] with e = h * D + d.
    NodeId gn = -1;
    std::vector<Expr> gi;
    if (!Resolve(n, idx, &gn, &gi)) return false;
    const Node& gather = g_.node(gn);
    if (gather.op != Op::Gather || gather.dtype != DType::F32 || gather.shape.size() != 3 ||
        gather.axes[0] != 1 || !gather.shape[2].IsConst())
      return false;
    const Expr e = h * Expr(m->head_dim) + d;
    if (!Same(gi[0], s) || !Same(gi[1], t) || !Same(gi[2], e)) return false;
    // The source: the pool [rows, H, D], a state scatter, seen as [S, rows, H * D].
    Range("attn_r", g_.node(gather.inputs[0]).shape[1]);
    const Expr r = Expr::Sym("attn_r");
    if (!Reads(gather.inputs[0], {s, r, e}, {r, h, d}, base)) return false;
    const Node& pool = g_.node(*base);
    if (pool.op != Op::StateScatter || pool.dtype != DType::F32 || pool.shape.size() != 3) return false;
    // The index: table[s, t / B] * B + t % B, computed over [S, blocks, B].
    NodeId add = -1;
    std::vector<Expr> ai;
    if (!Resolve(gather.inputs[1], {s, t, e}, &add, &ai)) return false;
    const Node& an = g_.node(add);
    if (an.op != Op::Add || an.shape.size() != 3 || !an.shape[2].IsConst()) return false;
    const int64_t block = an.shape[2].value();
    const Expr tb = t / Expr(block), tm = t % Expr(block);
    if (!Same(ai[0], s) || !Same(ai[1], tb) || !Same(ai[2], tm)) return false;
    const std::vector<Expr> at = {s, tb, tm};
    NodeId table = -1;
    if (!EitherOrder(an, [&](NodeId a, NodeId b) {
          const Node& mul = g_.node(a);
          return mul.op == Op::Mul && IotaIs(b, at, tm) && EitherOrder(mul, [&](NodeId x, NodeId y) {
                   return Reads(x, at, {s, tb}, &table) && ConstantOf(y, at) == (double)block;
                 });
        }))
      return false;
    const Node& tn = g_.node(table);
    if (!IsInteger(tn.dtype) || tn.shape.size() != 2) return false;
    if (m->table >= 0 && (m->table != table || m->block != block)) return false;
    m->table = table;
    m->block = block;
    interior_.insert({gn, add});
    return true;
  }

  std::optional<double> ConstantOf(NodeId n, const std::vector<Expr>& idx) {
    NodeId base;
    std::vector<Expr> got;
    if (!Resolve(n, idx, &base, &got) || g_.node(base).op != Op::Constant) return std::nullopt;
    return g_.node(base).scalar;
  }

  // The value an Iota view holds at idx (its index along the Iota's axis).
  std::optional<Expr> IotaValue(NodeId n, const std::vector<Expr>& idx) {
    NodeId base;
    std::vector<Expr> got;
    if (!Resolve(n, idx, &base, &got) || g_.node(base).op != Op::Iota) return std::nullopt;
    return got[g_.node(base).axes[0]];
  }

  bool IotaIs(NodeId n, const std::vector<Expr>& idx, const Expr& want) {
    auto v = IotaValue(n, idx);
    return v && Same(*v, want);
  }

  template <typename F>
  bool EitherOrder(const Node& n, F&& f) {
    if (n.inputs.size() != 2) return false;
    size_t mark = views_.size();
    if (f(n.inputs[0], n.inputs[1])) return true;
    views_.resize(mark);
    return f(n.inputs[1], n.inputs[0]);
  }

  const Graph& g_;
  RangeMap ranges_;
  std::vector<NodeId> views_;  // views walked so far (rolled back when an operand order fails)
  std::set<NodeId> interior_;
};

}  // namespace

std::optional<AttentionMatch> MatchCausalAttention(const Graph& g, NodeId pv) {
  return AttentionMatcher(g).Match(pv);
}

}  // namespace prism
