// Template-tier CPU causal attention (AVX-512): attention_kernel.h's block kernel over 16 lanes (16 (query,
// group head) rows per block; a decode step's block of at most 4 rows, or 8 from head size 64, puts 16 keys
// in the lanes; at most 4 rows below head size 32 take AVX2's 8 keys), and the loops that hand out the
// blocks.
#include "backends/cpu/attention.h"

// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_ps in max/roundscale/scalef).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/attention_block.h"
#include "backends/cpu/gemm.h"

#define PRISM_ATTN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace prism {
namespace {

// AVX-512's lanes for attention_kernel.h.
struct Lanes512 {
  using F = __m512;
  using M = __mmask16;
  using T = __mmask16;
  static constexpr int kW = 16;
  static constexpr int kAcrossKeysRows = 8;
  static constexpr int kStripVectors = 4;  // P·V strips of 64 columns
  static constexpr bool kMaskedLoadsFree = true;
  static constexpr bool kNarrowColumns = true;
  // Keys in the lanes for decode blocks; 5-8 rows (groups of 5-8 heads) from head size 64, where 16 keys'
  // dot products outweigh their lane sums.
  static bool AcrossKeys(int rows, int64_t d) { return rows <= 4 || (rows <= 8 && d >= 64); }

  PRISM_ATTN static F Zero() { return _mm512_setzero_ps(); }
  PRISM_ATTN static F Set1(float x) { return _mm512_set1_ps(x); }
  PRISM_ATTN static F Load(const float* p) { return _mm512_loadu_ps(p); }
  PRISM_ATTN static void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  PRISM_ATTN static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  PRISM_ATTN static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  PRISM_ATTN static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  PRISM_ATTN static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  PRISM_ATTN static F Fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  PRISM_ATTN static float ReduceAdd(F x) { return _mm512_reduce_add_ps(x); }
  PRISM_ATTN static float ReduceMax(F x) { return _mm512_reduce_max_ps(x); }
  PRISM_ATTN static T TailOf(int count) { return (__mmask16)((1u << count) - 1); }
  PRISM_ATTN static F LoadTail(T t, const float* p) { return _mm512_maskz_loadu_ps(t, p); }
  PRISM_ATTN static void StoreTail(T t, float* p, F x) { _mm512_mask_storeu_ps(p, t, x); }
  PRISM_ATTN static F MaxWhere(F m, M mask, F x) { return _mm512_mask_max_ps(m, mask, m, x); }
  PRISM_ATTN static F Keep(M mask, F x) { return _mm512_maskz_mov_ps(mask, x); }
  PRISM_ATTN static __m512i LoadCounts(const int32_t* n) { return _mm512_loadu_si512(n); }
  PRISM_ATTN static M Seen(__m512i nv, int64_t t) {
    return _mm512_cmpgt_epi32_mask(nv, _mm512_set1_epi32((int32_t)t));
  }

  // Keys [t0, t0 + 16) that a row seeing n keys sees.
  PRISM_ATTN static M Visible(int64_t n, int64_t t0) {
    return _mm512_cmpgt_epi32_mask(
        _mm512_set1_epi32((int32_t)n),
        _mm512_add_epi32(_mm512_set1_epi32((int32_t)t0),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
  }

  // 2^x: x = i + f with i an integer and f in [0, 1); 2^f = sqrt(2) * e^((f - 1/2) ln 2) by its Taylor
  // series to degree 7 (relative error below 1e-8 on [-1/2, 1/2]); scalef applies 2^i. Below x = -126 the
  // result is 0, not a subnormal: every FMA that reads a subnormal takes a microcode assist (~100 cycles),
  // and a peaked softmax (stories260K) had made P·V 4x slower that way. NaN passes through.
  PRISM_ATTN static F Exp2(F x) {
    const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    x = _mm512_max_ps(_mm512_set1_ps(-127.0f), x);
    const __m512 xi = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 g = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(x, xi), _mm512_set1_ps(0.5f)),
                                   _mm512_set1_ps(0.6931471805599453f));
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
      p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(c));
    return _mm512_maskz_scalef_ps(normal, _mm512_mul_ps(p, _mm512_set1_ps(1.4142135623730951f)), xi);
  }

  // Lane j: the sum of x[j]'s 16 lanes. Four rounds of pairwise adds of halves leave lane 4c + m holding
  // x[4m + c]'s sum; one permute puts it in lane 4m + c.
  PRISM_ATTN static F LaneSums(const F* x) {
    __m512 y[8], z[4], w[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)  // 256-bit halves: y[i] holds 8 partial sums of x[2i], then 8 of x[2i + 1]
      y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x44),
                           _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xEE));
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)  // 128-bit quarters: quarter c of z[i] holds 4 partial sums of x[4i + c]
      z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xDD));
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)  // within quarters: 2 partial sums each of x[8i + c] and x[8i + 4 + c]
      w[i] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * i], z[2 * i + 1], 0x44),
                           _mm512_shuffle_ps(z[2 * i], z[2 * i + 1], 0xEE));
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
  }
};

}  // namespace
}  // namespace prism

#define PRISM_LANES_TARGET PRISM_ATTN
#include "backends/cpu/attention_kernel.h"

namespace prism {
namespace {

constexpr int kRows = Lanes512::kW;  // rows per block: one vector of lanes

PRISM_ATTN void AttentionBlock(const float* q, const float* k, const float* v, float* out,
                               const AttentionDims& a, int64_t h, int64_t row0, std::vector<float>& scratch) {
  // A decode step's block of narrow heads: AVX2's 8 keys in the lanes need fewer operations per score than
  // 16 (a 16-lane sum costs more than the dot products it saves below 32 elements).
  if (a.seq * a.group - row0 <= 4 && a.head_dim < 32)
    return AttentionBlockAvx2(q, k, v, out, a, h, row0, scratch);
  AttentionBlockOf<Lanes512>(q, k, v, out, a, h, row0, scratch);
}

// The block kernel this CPU runs and its rows per block: AVX-512 (16 rows), else AVX2 (8).
struct BlockKernel {
  AttentionBlockFn fn;
  int rows;
};

BlockKernel Kernel() {
  if (Avx512TemplatesEnabled()) return {AttentionBlock, kRows};
  return {AttentionBlockAvx2, kAvx2AttentionRows};
}

}  // namespace

bool AttentionTemplateSupported() { return std::strcmp(GemmIsa(), "scalar") != 0; }

void CausalAttentionF32(const float* q, const float* k, const float* v, float* out, const AttentionDims& a,
                        int thread, int threads) {
  thread_local std::vector<float> scratch;
  thread_local std::vector<AttentionDims::MaskSpan> spans;
  const BlockKernel kb = Kernel();
  const int64_t blocks = (a.seq * a.group + kb.rows - 1) / kb.rows, items = a.heads_kv * blocks;
  AttentionDims dims = a;
  if (a.mask) {  // once per call: every head's blocks share the mask
    MaskSpans(a, spans);
    dims.spans = spans.data();
  }
  for (int64_t i = thread; i < items; i += threads)
    kb.fn(q, k, v, out, dims, i / blocks, i % blocks * kb.rows, scratch);
}

void PagedAttentionF32(const float* q, const float* k_pool, const float* v_pool, float* out,
                       const AttentionDims& a, const PagedKv& kv, int thread, int threads) {
  const int64_t S = a.seq, NB = kv.blocks, HD = a.heads_kv * a.head_dim, QD = a.group * HD;
  thread_local std::vector<int64_t> starts;
  thread_local std::vector<int64_t> rows;
  thread_local std::vector<float> scratch;
  starts.clear();
  for (int64_t s = 0; s < S; ++s) {
    const bool same = s > 0 && kv.positions[s] == kv.positions[s - 1] + 1 &&
                      std::equal(kv.table + s * NB, kv.table + (s + 1) * NB, kv.table + (s - 1) * NB);
    if (!same) starts.push_back(s);
  }
  starts.push_back(S);
  const int64_t runs = (int64_t)starts.size() - 1;
  const bool whole = runs >= threads;  // each run on one thread; else every thread shares every run
  for (int64_t r = whole ? thread : 0; r < runs; r += whole ? threads : 1) {
    const int64_t s0 = starts[r], n = starts[r + 1] - s0;
    AttentionDims ra = a;
    ra.seq = n;
    ra.total = std::clamp<int64_t>(kv.positions[s0 + n - 1] + 1, 0, a.total);
    ra.offset = (int64_t)kv.positions[s0] + 1;
    ra.out_seq = S;
    ra.out_row0 = s0;
    rows.resize((size_t)ra.total);
    for (int64_t t = 0; t < ra.total; ++t)
      rows[t] = std::clamp<int64_t>((int64_t)kv.table[s0 * NB + t / kv.block] * kv.block + t % kv.block, 0,
                                    kv.pool_rows - 1);
    ra.key_rows = rows.data();
    const BlockKernel kb = Kernel();
    const int64_t blocks = (n * a.group + kb.rows - 1) / kb.rows, items = a.heads_kv * blocks;
    for (int64_t i = whole ? 0 : thread; i < items; i += whole ? 1 : threads)
      kb.fn(q + s0 * QD, k_pool, v_pool, out, ra, i / blocks, i % blocks * kb.rows, scratch);
  }
}

}  // namespace prism
