// Lowering: cuts the graph into kernels and turns each into a loop nest with a value tree.
#include <algorithm>
#include <set>
#include <tuple>

#include "compiler/attention_match.h"
#include "compiler/fusion.h"
#include "compiler/kernel_ir.h"
#include "ir/error.h"
#include "ir/movement.h"
#include "ir/text_stream.h"

namespace prism {
namespace {

KValuePtr Make(KValue v) { return std::make_shared<const KValue>(std::move(v)); }

KValue NewValue(KValue::Kind kind, DType dtype) {
  KValue v;
  v.kind = kind;
  v.dtype = dtype;
  return v;
}

class KernelLowerer {
 public:
  KernelLowerer(const Graph& g, const std::vector<int>& buffer_of, const std::vector<KBuffer>& buffers)
      : g_(g), buffer_of_(buffer_of), buffers_(buffers) {}

  // Fused reductions to realize on the next attempt: found to be recomputed per element, or a GEMM
  // whose epilogue kernel did not take the form the template needs.
  std::set<NodeId> reduces_to_realize;

  Kernel Build(NodeId root, int out_buffer) {
    const Node& rn = g_.node(root);
    Kernel k;
    k.root = root;
    k.out_buffer = out_buffer;
    k.reduce_size = Expr(1);
    ResetRanges();
    fused_.clear();
    active_.clear();
    rcount_ = 0;
    gcount_ = 0;
    const bool state_write = WritesState(rn.op);
    const std::vector<Expr>& loop_shape = state_write ? g_.node(rn.inputs[1]).shape : rn.shape;
    std::vector<Expr> idx;
    for (size_t a = 0; a < loop_shape.size(); ++a) {
      std::string v = "i" + std::to_string(a);
      k.vars.push_back(v);
      k.extents.push_back(loop_shape[a]);
      AddRange(v, loop_shape[a]);
      idx.push_back(loop_shape[a].IsConst(1) ? Expr(0) : Expr::Sym(v));  // a size-1 loop is index 0
    }
    for (size_t a = 0; a < loop_shape.size(); ++a)
      if (!loop_shape[a].IsConst(1)) active_.push_back(k.vars[a]);
    if (rn.op == Op::StateScatter) {
      // Row i0 goes to row index[i0]: a data-dependent store index, bound like a Gather's.
      const std::string sym = "g" + std::to_string(gcount_++);
      AddRange(sym, rn.shape[0]);
      std::vector<Expr> dst = idx;
      dst[0] = Expr::Sym(sym);
      k.out_gathers.push_back({sym, Lower(rn.inputs[2], {idx[0]}), rn.shape[0]});
      k.out_index = Simplify(LinearIndex(rn.shape, dst), ranges_);
      k.value = Lower(rn.inputs[1], idx);
    } else if (state_write) {
      std::vector<Expr> dst = idx;
      dst[rn.axes[0]] = dst[rn.axes[0]] + rn.args[0];
      k.out_index = Simplify(LinearIndex(rn.shape, dst), ranges_);
      k.value = Lower(rn.inputs[1], idx);
    } else {
      k.out_index = Simplify(LinearIndex(rn.shape, idx), ranges_);
      k.value = LowerCompute(root, idx);
    }
    k.reduce_size = reduce_size_;
    reduce_size_ = Expr(1);
    k.fused.assign(fused_.begin(), fused_.end());
    DropUnitLoops(&k);
    return k;
  }

  // Size-1 loops index 0 everywhere (see Build): they need no loop variable at all.
  static void DropUnitLoops(Kernel* k) {
    for (size_t a = k->vars.size(); a-- > 0;)
      if (k->extents[a].IsConst(1)) {
        k->vars.erase(k->vars.begin() + a);
        k->extents.erase(k->extents.begin() + a);
      }
  }

  // A copy kernel for an output that is a leaf or a state buffer.
  Kernel BuildCopy(NodeId node, int out_buffer) {
    Kernel k;
    k.root = node;
    k.out_buffer = out_buffer;
    k.reduce_size = Expr(1);
    ResetRanges();
    std::vector<Expr> idx;
    const auto& shape = g_.node(node).shape;
    for (size_t a = 0; a < shape.size(); ++a) {
      k.vars.push_back("i" + std::to_string(a));
      k.extents.push_back(shape[a]);
      AddRange(k.vars.back(), shape[a]);
      idx.push_back(shape[a].IsConst(1) ? Expr(0) : Expr::Sym(k.vars.back()));
    }
    k.out_index = Simplify(LinearIndex(shape, idx), ranges_);
    k.value = LoadBuffer(node, idx);
    DropUnitLoops(&k);
    return k;
  }

 private:
  // Sizes are never negative: lets bounds reasoning cancel terms like seq - 1 - i.
  void ResetRanges() {
    ranges_.clear();
    for (const std::string& s : g_.Symbols()) ranges_[s] = SymRange{};
  }

  void AddRange(const std::string& v, const Expr& extent) {
    SymRange r;
    if (extent.IsConst())
      r.hi = std::max<int64_t>(extent.value() - 1, 0);
    else
      r.upper_excl = extent;
    ranges_[v] = r;
  }

  KValuePtr LoadBuffer(NodeId n, const std::vector<Expr>& idx) {
    int b = buffer_of_[n];
    KValue v = NewValue(KValue::Kind::Load, buffers_[b].dtype);
    v.buffer = b;
    v.index = Simplify(LinearIndex(buffers_[b].shape, idx), ranges_);
    AttachGathers(&v);
    return Make(std::move(v));
  }

  // Index expressions under a Gather mention its data-dependent symbol: bind it where used.
  void AttachGathers(KValue* v) const {
    std::vector<std::string> syms;
    v->index.CollectSymbols(&syms);
    for (const GatherBinding& gb : gathers_)
      if (std::find(syms.begin(), syms.end(), gb.sym) != syms.end()) v->gathers.push_back(gb);
  }

  KValuePtr Lower(NodeId n, const std::vector<Expr>& idx) {
    if (buffer_of_[n] >= 0) return LoadBuffer(n, idx);
    return LowerCompute(n, idx);
  }

  KValuePtr LowerCompute(NodeId n, const std::vector<Expr>& idx) {
    const Node& nd = g_.node(n);
    fused_.insert(n);
    switch (nd.op) {
      case Op::Constant: {
        KValue v = NewValue(KValue::Kind::Const, nd.dtype);
        v.constant = nd.scalar;
        return Make(std::move(v));
      }
      case Op::Iota: {
        KValue v = NewValue(KValue::Kind::Index, nd.dtype);
        v.index = idx[nd.axes[0]];
        AttachGathers(&v);
        return Make(std::move(v));
      }
      case Op::Reshape:
      case Op::Permute:
      case Op::Expand:
      case Op::Slice:
      case Op::Pad: {
        const auto& in_shape = g_.node(nd.inputs[0]).shape;
        SourceIndex si = MapThroughMovement(nd, in_shape, idx);
        for (Expr& e : si.index) e = Simplify(e, ranges_);
        Expr valid = Simplify(si.valid, ranges_);
        KValuePtr inner = Lower(nd.inputs[0], si.index);
        if (valid.IsConst(1)) return inner;
        KValue v = NewValue(KValue::Kind::Guard, nd.dtype);
        v.index = valid;
        AttachGathers(&v);
        v.args = {inner};
        return Make(std::move(v));
      }
      case Op::Gather: {
        KValuePtr iv = Lower(nd.inputs[1], idx);
        const auto& src_shape = g_.node(nd.inputs[0]).shape;
        std::string sym = "g" + std::to_string(gcount_++);
        Expr limit = src_shape[nd.axes[0]];
        SymRange r;
        if (limit.IsConst())
          r.hi = std::max<int64_t>(limit.value() - 1, 0);
        else
          r.upper_excl = limit;
        ranges_[sym] = r;
        gathers_.push_back({sym, iv, limit});
        std::vector<Expr> src_idx = idx;
        src_idx[nd.axes[0]] = Expr::Sym(sym);
        KValuePtr out = Lower(nd.inputs[0], src_idx);
        gathers_.pop_back();
        return out;
      }
      case Op::SumReduce:
      case Op::MaxReduce: {
        if (!IsInjective(nd, idx)) reduces_to_realize.insert(n);
        const auto& in_shape = g_.node(nd.inputs[0]).shape;
        KValue v = NewValue(KValue::Kind::Reduce, nd.dtype);
        v.op = nd.op;
        std::vector<Expr> inner = idx;
        for (int64_t a : nd.axes) {
          std::string rv = "r" + std::to_string(rcount_++);
          v.rvars.push_back(rv);
          v.rextents.push_back(in_shape[a]);
          AddRange(rv, in_shape[a]);
          inner[a] = in_shape[a].IsConst(1) ? Expr(0) : Expr::Sym(rv);
          reduce_size_ = reduce_size_ * in_shape[a];
        }
        size_t saved = active_.size();
        for (size_t r = 0; r < v.rvars.size(); ++r)
          if (!v.rextents[r].IsConst(1)) active_.push_back(v.rvars[r]);
        v.args = {Lower(nd.inputs[0], inner)};
        active_.resize(saved);
        return Make(std::move(v));
      }
      case Op::StateWrite:
      case Op::StateScatter: throw Error("internal: state write " + g_.Describe(n) + " must be realized");
      case Op::Input:
      case Op::Weight:
      case Op::State: return LoadBuffer(n, idx);
      default: {  // elementwise
        KValue v = NewValue(KValue::Kind::Op, nd.dtype);
        v.op = nd.op;
        for (NodeId x : nd.inputs) v.args.push_back(Lower(x, idx));
        return Make(std::move(v));
      }
    }
  }

  // A fused reduction is computed once per point of the loops around it only if its output
  // index is a one-to-one image of those loop variables.
  bool IsInjective(const Node& nd, const std::vector<Expr>& idx) {
    std::vector<std::string> used;
    for (size_t a = 0; a < idx.size(); ++a) {
      if (nd.shape[a].IsConst(1)) continue;
      if (idx[a].kind() != Expr::Kind::Sym) return false;
      if (std::find(used.begin(), used.end(), idx[a].name()) != used.end()) return false;
      used.push_back(idx[a].name());
    }
    for (const std::string& v : active_)
      if (std::find(used.begin(), used.end(), v) == used.end()) return false;
    return used.size() == active_.size();
  }

  const Graph& g_;
  const std::vector<int>& buffer_of_;
  const std::vector<KBuffer>& buffers_;
  RangeMap ranges_;
  std::set<NodeId> fused_;
  std::vector<GatherBinding> gathers_;
  std::vector<std::string> active_;
  Expr reduce_size_{1};
  int rcount_ = 0, gcount_ = 0;
};

BufferKind LeafKind(Op op) {
  return op == Op::Input ? BufferKind::Input : op == Op::Weight ? BufferKind::Weight : BufferKind::State;
}

// Gives a kernel that realizes a causal-attention pattern its fused template, when the kernels of the
// pattern's interior feed nothing outside it (so skipping them when the template runs loses nothing).
void MarkAttention(const Graph& g, const std::vector<int>& buffer_of, KernelProgram* p) {
  for (size_t k = 0; k < p->kernels.size(); ++k) {
    Kernel& kn = p->kernels[k];
    auto m = MatchCausalAttention(g, kn.root);
    if (!m || kn.out_buffer != buffer_of[kn.root] || buffer_of[m->q] < 0 || buffer_of[m->k] < 0 ||
        buffer_of[m->v] < 0 || (m->mask >= 0 && buffer_of[m->mask] < 0))
      continue;
    if (m->table >= 0 && (buffer_of[m->table] < 0 || buffer_of[m->positions] < 0 ||
                          p->buffers[buffer_of[m->table]].dtype != DType::I32 ||
                          p->buffers[buffer_of[m->positions]].dtype != DType::I32))
      continue;
    std::vector<size_t> covered;
    std::set<int> covered_buffers;
    for (size_t j = 0; j < p->kernels.size(); ++j)
      if (m->interior.count(p->kernels[j].root)) {
        covered.push_back(j);
        covered_buffers.insert(p->kernels[j].out_buffer);
      }
    bool closed = true;
    for (size_t j = 0; j < p->kernels.size() && closed; ++j) {
      if (j == k || m->interior.count(p->kernels[j].root)) continue;
      const std::set<int> reads = KernelReads(p->kernels[j]);
      for (int b : covered_buffers) closed = closed && !reads.count(b);
    }
    for (int b : covered_buffers) closed = closed && p->buffers[b].kind == BufferKind::Intermediate;
    for (size_t j : covered) closed = closed && j < k && p->kernels[j].covered_by < 0;
    if (!closed) continue;
    kn.attention = AttentionTemplate{.q_buffer = buffer_of[m->q],
                                     .k_buffer = buffer_of[m->k],
                                     .v_buffer = buffer_of[m->v],
                                     .heads_kv = m->heads_kv,
                                     .group = m->group,
                                     .head_dim = m->head_dim,
                                     .seq = m->seq,
                                     .total = m->total,
                                     .offset = m->offset,
                                     .scale = m->scale,
                                     .exp_scale = m->exp_scale,
                                     .q_layout = m->q_layout,
                                     .k_layout = m->k_layout,
                                     .v_layout = m->v_layout,
                                     .mask_layout = m->mask_layout};
    AttentionTemplate& at = *kn.attention;
    if (m->mask >= 0) at.mask_buffer = buffer_of[m->mask];
    if (m->table >= 0) {
      kn.attention->table_buffer = buffer_of[m->table];
      kn.attention->positions_buffer = buffer_of[m->positions];
      kn.attention->block = m->block;
    }
    kn.name += "_attention";
    for (size_t j : covered) p->kernels[j].covered_by = (int)k;
  }
}

}  // namespace

KernelProgram BuildKernelProgram(const Graph& g, const FusionOptions& opts) {
  std::set<NodeId> forced;
  for (int attempt = 0;; ++attempt) {
    std::vector<bool> realized = ChooseRealized(g, opts, forced);
    KernelProgram p;
    p.graph_nodes = g.size();
    p.symbols = g.Symbols();
    std::vector<int> buffer_of(g.size(), -1);
    std::vector<bool> is_output(g.size(), false);
    for (NodeId o : g.outputs()) is_output[o] = true;
    for (NodeId i = 0; i < g.size(); ++i) {
      const Node& nd = g.node(i);
      if (!realized[i]) continue;
      p.realized.push_back(i);
      if (WritesState(nd.op)) {
        buffer_of[i] = buffer_of[nd.inputs[0]];
        continue;
      }
      bool leaf = nd.op == Op::Input || nd.op == Op::Weight || nd.op == Op::State;
      BufferKind kind = leaf ? LeafKind(nd.op) : is_output[i] ? BufferKind::Output : BufferKind::Intermediate;
      std::string name = leaf ? nd.name : "t" + std::to_string(i);
      buffer_of[i] = (int)p.buffers.size();
      p.buffers.push_back({name, kind, nd.dtype, nd.shape, i});
    }
    KernelLowerer lw(g, buffer_of, p.buffers);
    auto view = [&](const LinearMatch& m) {  // where the activation lies
      if (buffer_of[m.x] >= 0) return ActivationView{m.x};
      return ActivationSource(g, m.x, opts.kmajor_activations && m.index < 0);
    };
    auto activation = [&](const LinearMatch& m) { return buffer_of[view(m).source]; };
    for (NodeId i : p.realized) {
      Op op = g.node(i).op;
      if (op == Op::Input || op == Op::Weight || op == Op::State) continue;
      Kernel k = lw.Build(i, buffer_of[i]);
      k.name = "k" + std::to_string(p.kernels.size()) + "_" + std::string(OpName(op));
      // x · Wᵀ itself, or an Add or Mul taking it as its epilogue.
      auto gemm = [&](const LinearMatch& m, bool epilogue) {
        const auto& xs = g.node(m.x).shape;
        std::vector<Expr> lead(xs.begin(), xs.end() - 1);
        const auto& ws = g.node(m.weight).shape;
        const size_t e = m.index >= 0 ? 1 : 0;  // ExpertLinear: [experts, N, K]
        k.gemm = GemmTemplate{activation(m), buffer_of[m.weight], Product(lead),
                              ws[e].value(), ws[e + 1].value(),   epilogue};
        const Node& xn = g.node(m.x);
        k.gemm->a_bf16 = xn.op == Op::Cast && g.node(xn.inputs[0]).dtype == DType::BF16;
        k.gemm->a_group = view(m).group;
        if (m.index >= 0) {
          k.gemm->index_buffer = buffer_of[m.index];
          k.gemm->experts = ws[0].value();
        }
        k.name += m.index >= 0 ? "_experts" : "_gemm";
      };
      if (opts.templates) {
        if (auto m = MatchLinear(g, i);
            m && activation(*m) >= 0 && (m->index < 0 || buffer_of[m->index] >= 0))
          gemm(*m, false);
        for (NodeId j : k.fused) {
          if (!opts.gemm_epilogues || k.gemm || EpilogueConsumer(g, j) != i) continue;
          auto m = MatchLinear(g, j);
          if (!m || m->index >= 0 || buffer_of[j] >= 0 || activation(*m) < 0) continue;
          // The template stores the product where the value tree reads its one reduction.
          const KValue& v = *k.value;
          int reduces = 0;
          bool direct = v.kind == KValue::Kind::Op && v.args.size() == 2;
          for (const KValuePtr& a : v.args) {
            reduces += HasReduce(a);
            direct = direct && (a->kind == KValue::Kind::Reduce || !HasReduce(a));
          }
          if (direct && reduces == 1)
            gemm(*m, true);
          else
            lw.reduces_to_realize.insert(j);  // not in the form the epilogue needs: give it a buffer
        }
      }
      p.kernels.push_back(std::move(k));
    }
    // Outputs: a computed node's own buffer, else a copy into a fresh output buffer.
    std::set<int> claimed;
    for (size_t k = 0; k < g.outputs().size(); ++k) {
      NodeId o = g.outputs()[k];
      int b = buffer_of[o];
      if (p.buffers[b].kind == BufferKind::Output && !claimed.count(b)) {
        p.buffers[b].name = g.output_names()[k];
        claimed.insert(b);
        p.output_buffers.push_back(b);
        continue;
      }
      int nb = (int)p.buffers.size();
      p.buffers.push_back({g.output_names()[k], BufferKind::Output, g.node(o).dtype, g.node(o).shape, o});
      claimed.insert(nb);
      Kernel c = lw.BuildCopy(o, nb);
      c.name = "k" + std::to_string(p.kernels.size()) + "_Copy";
      p.kernels.push_back(std::move(c));
      p.output_buffers.push_back(nb);
    }
    if (lw.reduces_to_realize.empty()) {
      if (opts.templates) MarkAttention(g, buffer_of, &p);
      return p;
    }
    size_t before = forced.size();
    forced.insert(lw.reduces_to_realize.begin(), lw.reduces_to_realize.end());
    if (forced.size() == before || attempt > g.size())
      throw Error("internal: fusion did not converge on a kernel plan");
  }
}

namespace {

void ValueText(const KernelProgram& p, const KValuePtr& v, TextStream& os) {
  switch (v->kind) {
    case KValue::Kind::Load:
      os << p.buffers[v->buffer].name << "[" << v->index.str();
      for (const auto& gb : v->gathers) {
        os << " | " << gb.sym << "=";
        ValueText(p, gb.value, os);
      }
      os << "]";
      break;
    case KValue::Kind::Const: os << v->constant; break;
    case KValue::Kind::Index: os << "idx(" << v->index.str() << ")"; break;
    case KValue::Kind::Guard:
      os << "(" << v->index.str() << " ? ";
      ValueText(p, v->args[0], os);
      os << " : 0)";
      break;
    case KValue::Kind::Reduce:
      os << (v->op == Op::SumReduce ? "sum" : "max") << "(";
      for (size_t r = 0; r < v->rvars.size(); ++r) os << v->rvars[r] << "<" << v->rextents[r].str() << ", ";
      ValueText(p, v->args[0], os);
      os << ")";
      break;
    case KValue::Kind::Op:
      os << OpName(v->op) << "(";
      for (size_t a = 0; a < v->args.size(); ++a) {
        if (a) os << ", ";
        ValueText(p, v->args[a], os);
      }
      if (v->op == Op::Cast) os << " -> " << DTypeName(v->dtype);
      os << ")";
      break;
  }
}

}  // namespace

KValuePtr EpilogueValue(const Kernel& k) {
  if (!k.gemm || !k.gemm->epilogue) throw Error("internal: kernel " + k.name + " has no GEMM epilogue");
  auto stored = std::make_shared<KValue>();
  stored->kind = KValue::Kind::Load;
  stored->dtype = DType::F32;
  stored->buffer = k.out_buffer;
  stored->index = k.out_index;
  auto v = std::make_shared<KValue>(*k.value);
  for (KValuePtr& a : v->args)
    if (a->kind == KValue::Kind::Reduce) a = stored;
  return v;
}

std::vector<int> GeneratedOperands(const Kernel& k) {
  std::set<int> used;
  CollectLoads(k.value, &used);
  for (const GatherBinding& gb : k.out_gathers) CollectLoads(gb.value, &used);
  used.insert(k.out_buffer);  // the epilogue's value reads only these and the output
  return {used.begin(), used.end()};
}

void CheckStateWrites(const Graph& g, const KernelProgram& p, const std::map<std::string, int64_t>& b) {
  for (const Kernel& k : p.kernels) {
    const Node& root = g.node(k.root);
    if (root.op != Op::StateWrite) continue;
    int64_t off = root.args[0].Eval(b), axis = root.axes[0];
    int64_t len = g.node(root.inputs[1]).shape[axis].Eval(b), cap = root.shape[axis].Eval(b);
    if (off < 0 || off + len > cap)
      throw Error("state '" + root.name + "': writing positions [" + std::to_string(off) + ", " +
                  std::to_string(off + len) + ") past its size " + std::to_string(cap));
  }
}

std::string KernelProgramToText(const Graph& g, const KernelProgram& p) {
  TextStream os;
  os << p.kernels.size() << " kernels for " << g.size() << " graph nodes\n";
  for (const Kernel& k : p.kernels) {
    os << k.name << ": for (";
    for (size_t a = 0; a < k.vars.size(); ++a)
      os << (a ? ", " : "") << k.vars[a] << "<" << k.extents[a].str();
    os << ") " << p.buffers[k.out_buffer].name << "[" << k.out_index.str() << "] = ";
    ValueText(p, k.value, os);
    os << "\n    fuses nodes:";
    for (NodeId n : k.fused) os << " %" << n;
    os << "\n";
  }
  return os.str();
}

}  // namespace prism
