// A kernel's work at one bucket's sizes, for its roofline floor.
#include "search/kernel_work.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace prism {

KernelWork WorkOf(const KernelProgram& kp, const Kernel& kn, const SymbolBindings& b) {
  int64_t total = 1;
  for (const Expr& e : kn.extents) total *= e.Eval(b);
  const double red = std::max<double>(1, (double)kn.reduce_size.Eval(b));
  KernelWork w;
  w.flops = 2.0 * (double)total * red;
  // Bytes: each buffer once, but never more than the elements its loads can reach (a KV cache is read
  // only up to the current position).
  std::map<int, double> reach;
  std::function<void(const KValuePtr&, double)> collect = [&](const KValuePtr& v, double execs) {
    if (v->kind == KValue::Kind::Reduce) execs *= red;
    if (v->kind == KValue::Kind::Load) reach[v->buffer] += execs;
    for (const auto& gb : v->gathers) collect(gb.value, execs);
    for (const auto& a : v->args) collect(a, execs);
  };
  collect(kn.value, (double)total);
  if (kn.gemm) reach[kn.gemm->w_buffer] = reach[kn.gemm->a_buffer] = INFINITY;
  if (kn.gemm && kn.gemm->index_buffer >= 0)  // experts: only the slabs the rows chose, at most one each
    reach[kn.gemm->w_buffer] =
        (double)std::min(kn.gemm->m.Eval(b), kn.gemm->experts) * (double)kn.gemm->n * (double)kn.gemm->k;
  if (const auto& at = kn.attention) {
    const int64_t seq = at->seq.Eval(b), keys = at->total.Eval(b), offset = at->offset.Eval(b);
    double pairs = 0;
    for (int64_t q = 0; q < seq; ++q) pairs += (double)std::clamp<int64_t>(q + offset, 0, keys);
    w.flops = 4.0 * pairs * (double)(at->heads_kv * at->group * at->head_dim);
    reach.clear();
    reach[at->q_buffer] = INFINITY;
    reach[at->k_buffer] = reach[at->v_buffer] = (double)(keys * at->heads_kv * at->head_dim);
  }
  reach[kn.out_buffer] += (double)total;
  for (const auto& [buf, execs] : reach) {
    int64_t n = 1;
    for (int64_t d : EvalShape(kp.buffers[buf].shape, b)) n *= d;
    const double whole = (double)StorageBytes(kp.buffers[buf].dtype, n);
    w.bytes += std::min(whole, execs * std::max(1.0, whole / (double)std::max<int64_t>(n, 1)));
  }
  return w;
}

}  // namespace prism
