// A GEMM that computes its own activation: the kernel that would store it (a convolution's im2col) run by
// the GEMM a chunk of rows at a time into a thread's own buffer, so the activation never reaches memory.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/program.h"

namespace prism {

int Program::ProducerOf(size_t k, const std::vector<std::set<int>>& reads) const {
  const Kernel& kn = kp_.kernels[k];
  if (!kn.gemm || kn.gemm->index_buffer >= 0) return -1;
  const int a = kn.gemm->a_buffer;
  const KBuffer& ab = kp_.buffers[a];
  if (ab.kind != BufferKind::Intermediate || ab.dtype != DType::F32) return -1;
  int j = -1;
  for (size_t i = 0; i < kp_.kernels.size(); ++i) {
    if (kp_.kernels[i].out_buffer == a) {
      if (j >= 0) return -1;
      j = (int)i;
    } else if (i != k && reads[i].count(a)) {
      return -1;  // read by another kernel too: it is stored anyway
    }
  }
  if (j < 0 || j > (int)k) return -1;
  for (size_t i = j + 1; i < k; ++i)  // what it reads, as it was when it would have run
    if (reads[j].count(kp_.kernels[i].out_buffer)) return -1;
  // Element by element at its own flat index (a plain loop nest over its output: no reduction, no
  // data-dependent store), so that any range of elements can be computed into any buffer.
  const Kernel& p = kp_.kernels[j];
  if (p.gemm || p.attention || p.covered_by >= 0 || !p.out_gathers.empty() || HasReduce(p.value) || !fns_[j])
    return -1;
  return j;
}

int Program::FusedProducer(size_t k, const KernelLaunch& st) const {
  const int j = k < producer_.size() ? producer_[k] : -1;
  if (j < 0 || !gemm_producers_ || !st.use_template || st.skip) return -1;
  const GemmTemplate& gm = *kp_.kernels[k].gemm;
  // Only where the activation outweighs the weight: the team then splits the rows (each computed once),
  // and chunks of rows cost no second read of the weight. A team rounding the activation together (AMX)
  // works on it whole.
  if (GemmForms()[st.form].fit_team || !ActivationDominates(st.m, gm, kp_.buffers[gm.w_buffer].dtype))
    return -1;
  auto offloaded = [&](size_t i) { return i < offloaded_.size() && offloaded_[i]; };
  return offloaded(k) || offloaded((size_t)j) ? -1 : j;
}

int Program::ComputedInside(size_t k) const {
  for (size_t i = 0; i < launches_.size(); ++i)
    if (launches_[i].producer == (int)k) return (int)i;
  return -1;
}

void Program::RunGemmOnProducedRows(size_t k, GemmCall call, int64_t mb, int64_t me, void* const* bufs,
                                    const int64_t* syms) {
  const Kernel& kn = kp_.kernels[k];
  const GemmTemplate& gm = *kn.gemm;
  const KernelLaunch& st = launches_[k];
  const GemmForm& form = GemmForms()[st.form];
  const size_t j = (size_t)st.producer;
  const int out = kp_.kernels[j].out_buffer;
  // The producer's elements [flat, flat + count) into dst: its generated function over that range, its
  // output operand moved so that element `flat` lands at dst[0].
  auto produce = [&](int64_t flat, int64_t count, float* dst) {
    void* moved = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(dst) - flat * sizeof(float));
    CallGenerated(fns_[j], j, bufs, syms, flat, flat + count, out, moved);
  };
  // Chunks of about 256 KiB of activation (which stay in L2 for the product), in whole row tiles; a
  // K-major activation's chunk stays within one group (an image: K rows of `group` pixels each).
  const int64_t K = gm.k, group = st.a_group;
  const int64_t chunk = std::max<int64_t>(48, 65536 / K / 48 * 48);
  static thread_local std::vector<float> act, rows;
  act.resize((size_t)(chunk * K));
  float* y = static_cast<float*>(bufs[kn.out_buffer]);
  for (int64_t r0 = mb; r0 < me;) {
    const int64_t r1 = std::min(group > 0 ? (r0 / group + 1) * group : me, std::min(me, r0 + chunk)),
                  m = r1 - r0;
    call.m = m;
    call.a = act.data();
    call.a_group = call.a_first = 0;
    call.y = y + r0 * gm.n;
    if (group > 0) {  // K rows of m values each: a K-major chunk of one group
      for (int64_t kk = 0, g = r0 / group, p = r0 % group; kk < K; ++kk)
        produce((g * K + kk) * group + p, m, act.data() + kk * m);
      if (form.reads_kmajor && form.reads_kmajor(call.wt)) {
        call.a_group = m;
      } else {
        rows.resize((size_t)(m * K));
        KMajorRowsToRowMajor(act.data(), m, K, 0, m, rows.data());
        call.a = rows.data();
      }
    } else {
      produce(r0 * K, m * K, act.data());
    }
    form.run(call);
    if (gm.epilogue) CallGenerated(fns_epi_[k], k, bufs, syms, r0 * gm.n, r1 * gm.n);
    r0 = r1;
  }
}

}  // namespace prism
