// A kernel's structural identity: a hash of its loops and value tree (see kernel_hash.h).
#include "compiler/kernel_hash.h"

#include <cstdio>
#include <cstring>
#include <map>

namespace prism {
namespace {

class Hasher {
 public:
  explicit Hasher(const KernelProgram& p) : p_(p) {}

  void Mix(uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) {
      a_ = (a_ ^ (v & 0xff)) * 1099511628211ull;           // FNV-1a
      b_ = (b_ ^ (v & 0xff)) * 0x9E3779B97F4A7C15ull + 7;  // an independent multiplier
      b_ ^= b_ >> 29;
    }
  }
  void Mix(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    Mix(bits);
  }
  void Mix(const std::string& s) {
    Mix((uint64_t)s.size());
    for (unsigned char c : s) Mix((uint64_t)c);
  }

  // Buffers by order of first appearance; the first sight also mixes what the buffer is.
  void Buffer(int b) {
    auto [it, fresh] = buffers_.emplace(b, (int)buffers_.size());
    Mix((uint64_t)it->second);
    if (!fresh) return;
    const KBuffer& kb = p_.buffers[b];
    Mix((uint64_t)kb.kind);
    Mix((uint64_t)kb.dtype);
    Mix((uint64_t)kb.shape.size());
    for (const Expr& e : kb.shape) Expression(e);
  }

  void Expression(const Expr& e) {
    Mix((uint64_t)e.kind());
    switch (e.kind()) {
      case Expr::Kind::Const: Mix((uint64_t)e.value()); return;
      case Expr::Kind::Sym: {
        // Gather symbols are local to the kernel: known by their order of binding.
        auto g = gathers_.find(e.name());
        if (g != gathers_.end()) {
          Mix((uint64_t)g->second);
        } else {
          Mix(e.name());
        }
        return;
      }
      default:
        Mix((uint64_t)e.args().size());
        for (const Expr& a : e.args()) Expression(a);
    }
  }

  void Value(const KValuePtr& v) {
    Mix((uint64_t)v->kind);
    Mix((uint64_t)v->dtype);
    Mix((uint64_t)v->gathers.size());
    for (const GatherBinding& gb : v->gathers) Bind(gb);
    switch (v->kind) {
      case KValue::Kind::Load:
        Buffer(v->buffer);
        Expression(v->index);
        break;
      case KValue::Kind::Const: Mix(v->constant); break;
      case KValue::Kind::Index:
      case KValue::Kind::Guard: Expression(v->index); break;
      case KValue::Kind::Op:
      case KValue::Kind::Reduce: Mix((uint64_t)v->op); break;
    }
    Mix((uint64_t)v->rvars.size());
    for (size_t i = 0; i < v->rvars.size(); ++i) {
      Mix(v->rvars[i]);
      Expression(v->rextents[i]);
    }
    Mix((uint64_t)v->args.size());
    for (const KValuePtr& a : v->args) Value(a);
  }

  void Bind(const GatherBinding& gb) {
    gathers_.emplace(gb.sym, (int)gathers_.size());
    Value(gb.value);
    Expression(gb.limit);
  }

  std::string Hex() const {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)a_, (unsigned long long)b_);
    return buf;
  }

 private:
  const KernelProgram& p_;
  uint64_t a_ = 1469598103934665603ull, b_ = 0x243F6A8885A308D3ull;
  std::map<int, int> buffers_;
  std::map<std::string, int> gathers_;
};

}  // namespace

std::string KernelStructuralHash(const KernelProgram& p, const Kernel& k) {
  Hasher h(p);
  h.Buffer(k.out_buffer);
  h.Mix((uint64_t)k.vars.size());
  for (size_t i = 0; i < k.vars.size(); ++i) {
    h.Mix(k.vars[i]);
    h.Expression(k.extents[i]);
  }
  h.Value(k.value);
  if (!k.out_gathers.empty()) {  // a scatter (absent elsewhere, so other kernels' keys are unchanged)
    h.Mix((uint64_t)k.out_gathers.size());
    for (const GatherBinding& gb : k.out_gathers) h.Bind(gb);
  }
  h.Expression(k.out_index);  // after the value: its gather symbols are bound
  h.Expression(k.reduce_size);
  h.Mix((uint64_t)k.gemm.has_value());
  if (k.gemm) {
    h.Buffer(k.gemm->a_buffer);
    h.Buffer(k.gemm->w_buffer);
    h.Expression(k.gemm->m);
    h.Mix((uint64_t)k.gemm->n);
    h.Mix((uint64_t)k.gemm->k);
    h.Mix((uint64_t)k.gemm->epilogue);
    h.Mix((uint64_t)k.gemm->a_bf16);
    h.Expression(k.gemm->a_group);
    if (k.gemm->index_buffer >= 0) {
      h.Buffer(k.gemm->index_buffer);
      h.Mix((uint64_t)k.gemm->experts);
    }
  }
  h.Mix((uint64_t)k.attention.has_value());
  if (const auto& at = k.attention) {
    for (int b : {at->q_buffer, at->k_buffer, at->v_buffer}) h.Buffer(b);
    for (int64_t v : {at->heads_kv, at->group, at->head_dim}) h.Mix((uint64_t)v);
    for (const Expr& e : {at->seq, at->total, at->offset}) h.Expression(e);
    h.Mix(at->scale);
    h.Mix(at->exp_scale);
    if (!at->Plain()) {  // other layouts or a mask (absent elsewhere, so other kernels' keys are unchanged)
      for (const OperandLayout* l : {&at->q_layout, &at->k_layout, &at->v_layout, &at->mask_layout})
        for (const Expr* e : {&l->row, &l->head, &l->offset}) h.Expression(*e);
      if (at->mask_buffer >= 0) h.Buffer(at->mask_buffer);
    }
    if (at->table_buffer >= 0) {  // paged (absent elsewhere, so other kernels' keys are unchanged)
      h.Buffer(at->table_buffer);
      h.Buffer(at->positions_buffer);
      h.Mix((uint64_t)at->block);
    }
  }
  return h.Hex();
}

}  // namespace prism
