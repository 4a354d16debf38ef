// Template-tier CPU causal attention (AVX-512; attention_avx2.cpp has the AVX2 block). A block of 16 (query,
// group head) rows of one K/V head keeps its queries transposed in a D x 16 panel, so each key's scores for
// all 16 rows are one FMA chain of broadcast key elements; the scores of the block then sit as [key][row],
// where the softmax's max, exp and sum run down the keys for 16 rows at once; P·V reads each value row once
// per 4 rows. Keys past a row's causal limit are never computed. A block of at most 4 rows (a decode step's
// group heads; 8 from head size 64) puts 16 keys in the lanes instead, for its scores and softmax (at most 4
// rows below head size 32: AVX2's 8 keys).
#include "backends/cpu/attention.h"

// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_ps in max/roundscale/scalef).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/attention_block.h"
#include "backends/cpu/gemm.h"

#define PRISM_ATTN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace prism {
namespace {

constexpr int kRows = 16;  // rows per block: one vector of lanes

// 2^x: x = i + f with i an integer and f in [0, 1); 2^f = sqrt(2) * e^((f - 1/2) ln 2) by its Taylor
// series to degree 7 (relative error below 1e-8 on [-1/2, 1/2]); scalef applies 2^i. Below x = -126 the
// result is 0, not a subnormal: every FMA that reads a subnormal takes a microcode assist (~100 cycles),
// and a peaked softmax (stories260K) had made P·V 4x slower that way. NaN passes through.
PRISM_ATTN inline __m512 Exp2(__m512 x) {
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
PRISM_ATTN inline __m512 LaneSums(const __m512* x) {
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

// Keys [t0, t0 + 16) that a row seeing n keys sees.
PRISM_ATTN inline __mmask16 Visible(int64_t n, int64_t t0) {
  return _mm512_cmpgt_epi32_mask(
      _mm512_set1_epi32((int32_t)n),
      _mm512_add_epi32(_mm512_set1_epi32((int32_t)t0),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
}

// Scores and softmax of a block of at most 8 rows (a decode step's group heads) with 16 keys in the lanes:
// each row's scores against 16 keys are 16 dot products over D, summed across lanes at once, and the
// softmax's exp runs once per 16 keys per row (row lanes would leave 8 or more of 16 idle). Returns each
// row's probabilities (0 past the keys it sees; a buffer of this thread's) and leaves 1 / sum in inv_l.
PRISM_ATTN Probabilities SoftmaxAcrossKeys(const float* kh, int64_t k_row, KeyRows kr, const AttentionDims& a,
                                           int64_t row0, const BlockSetup& b, const int32_t* n,
                                           float* inv_l) {
  const int64_t D = a.head_dim, keys = b.keys, kp = (keys + 15) / 16 * 16, dp = (D + 15) / 16 * 16;
  static thread_local std::vector<float> buf;
  buf.assign((size_t)(8 * dp + dp + 8 * kp), 0.0f);
  float *qs = buf.data(), *zero = qs + 8 * dp, *s = zero + dp;  // [8][dp] scaled queries; a zero row; [8][kp]
  for (int r = 0; r < b.rows; ++r)                              // the block's queries, transposed back
    for (int64_t e = 0; e < D; ++e) qs[r * dp + e] = b.qt[e * kRows + r];
  const __mmask16 tail = (__mmask16)((1u << (D - (dp - 16))) - 1);  // the last 1..16 elements
  for (int64_t t0 = 0; t0 < keys; t0 += 16) {
    const float* kt[16];  // keys past the last read the zero row (their lanes are hidden below)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) kt[j] = t0 + j < keys ? kh + kr(t0 + j) * k_row : zero;
    if (kr.rows)  // paged: its blocks lie anywhere
      for (int64_t u = t0 + 2 * kAhead; u < std::min(keys, t0 + 2 * kAhead + 16); ++u)
        PrefetchRow(kh + kr(u) * k_row, D);
    for (int r = 0; r < b.rows; ++r) {
      __m512 acc[16];
      const float* qr = qs + r * dp;
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {  // 8 key pointers at a time stay in registers
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[8 * half + j] = _mm512_setzero_ps();
        const float* const* kk = kt + 8 * half;
        for (int64_t e = 0; e < dp; e += 16) {
          const __m512 qv = _mm512_loadu_ps(qr + e);
          if (e + 16 <= D) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j)
              acc[8 * half + j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kk[j] + e), acc[8 * half + j]);
          } else {  // K's rows may end at D (the pool's last): the tail loads only D's elements
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j)
              acc[8 * half + j] =
                  _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(tail, kk[j] + e), acc[8 * half + j]);
          }
        }
      }
      _mm512_storeu_ps(s + r * kp + t0, LaneSums(acc));
    }
  }
  AddMask(s, 1, kp, keys, a, row0, b);
  const __m512 c = _mm512_set1_ps(a.exp_scale);
  for (int r = 0; r < b.rows; ++r) {
    float* sr = s + r * kp;
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t t0 = 0; t0 < n[r]; t0 += 16)
      m = _mm512_mask_max_ps(m, Visible(n[r], t0), m, _mm512_loadu_ps(sr + t0));
    m = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    __m512 l = _mm512_setzero_ps();
    for (int64_t t0 = 0; t0 < keys; t0 += 16) {
      const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(sr + t0), m), c);
      const __m512 e = _mm512_maskz_mov_ps(Visible(n[r], t0), Exp2(x));
      l = _mm512_add_ps(l, e);
      _mm512_storeu_ps(sr + t0, e);
    }
    // A row that sees no key divides 0 by 0: NaN, as the unfused softmax gives.
    inv_l[r] = 1.0f / _mm512_reduce_add_ps(l);
  }
  return {s, 1, kp};
}

// Scores and softmax of a block with its rows in the lanes: leaves the probabilities in p [keys][16] (0 past
// the keys each row sees) and 1 / sum per row in inv_l.
PRISM_ATTN Probabilities SoftmaxAcrossRows(const float* qt, const float* kh, int64_t k_row, KeyRows kr,
                                           const AttentionDims& a, int64_t row0, const BlockSetup& b,
                                           const int32_t* n, float* p, float* inv_l) {
  const int64_t D = a.head_dim, keys = b.keys;
  int64_t t = 0;
  for (; t + 4 <= keys; t += 4) {
    if (kr.rows)  // paged: its blocks lie anywhere
      for (int64_t u = t + kAhead; u < std::min(keys, t + kAhead + 4); ++u)
        PrefetchRow(kh + kr(u) * k_row, D);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const float *k0 = kh + kr(t) * k_row, *k1 = kh + kr(t + 1) * k_row, *k2 = kh + kr(t + 2) * k_row,
                *k3 = kh + kr(t + 3) * k_row;
    for (int64_t e = 0; e < D; ++e) {
      const __m512 qe = _mm512_loadu_ps(qt + e * kRows);
      s0 = _mm512_fmadd_ps(qe, _mm512_set1_ps(k0[e]), s0);
      s1 = _mm512_fmadd_ps(qe, _mm512_set1_ps(k1[e]), s1);
      s2 = _mm512_fmadd_ps(qe, _mm512_set1_ps(k2[e]), s2);
      s3 = _mm512_fmadd_ps(qe, _mm512_set1_ps(k3[e]), s3);
    }
    _mm512_storeu_ps(p + (t + 0) * kRows, s0);
    _mm512_storeu_ps(p + (t + 1) * kRows, s1);
    _mm512_storeu_ps(p + (t + 2) * kRows, s2);
    _mm512_storeu_ps(p + (t + 3) * kRows, s3);
  }
  for (; t < keys; ++t) {
    __m512 s0 = _mm512_setzero_ps();
    const float* k0 = kh + kr(t) * k_row;
    for (int64_t e = 0; e < D; ++e)
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(qt + e * kRows), _mm512_set1_ps(k0[e]), s0);
    _mm512_storeu_ps(p + t * kRows, s0);
  }
  AddMask(p, kRows, 1, keys, a, row0, b);
  // Softmax down the keys, 16 rows at once; keys a row does not see become probability 0.
  const __m512i nv = _mm512_load_si512(n);
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (t = 0; t < keys; ++t) {
    const __mmask16 vis = _mm512_cmpgt_epi32_mask(nv, _mm512_set1_epi32((int32_t)t));
    m = _mm512_mask_max_ps(m, vis, m, _mm512_loadu_ps(p + t * kRows));
  }
  const __m512 c = _mm512_set1_ps(a.exp_scale);
  __m512 l = _mm512_setzero_ps();
  for (t = 0; t < keys; ++t) {
    const __mmask16 vis = _mm512_cmpgt_epi32_mask(nv, _mm512_set1_epi32((int32_t)t));
    const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(p + t * kRows), m), c);
    const __m512 e = _mm512_maskz_mov_ps(vis, Exp2(x));
    l = _mm512_add_ps(l, e);
    _mm512_storeu_ps(p + t * kRows, e);
  }
  // A row that sees no key divides 0 by 0: NaN, as the unfused softmax gives.
  _mm512_store_ps(inv_l, _mm512_div_ps(_mm512_set1_ps(1.0f), l));
  return {p, kRows, 1};
}

// out rows [lane0, lane0 + RW) of the block (RW <= 4): sum over keys of p's (key, row) * v[t, :], over one
// strip of at most 64 value columns starting at d0, scaled by 1 / l.
template <int NC, int RW>
PRISM_ATTN void ValueStrip(Probabilities p, const float* v, int64_t v_stride, KeyRows kr, int64_t keys,
                           int lane0, int64_t d0, int64_t width, const float* inv_l, float* const* out_rows) {
  __m512 acc[RW][NC];  // fully unrolled below: the accumulators live in registers
#pragma GCC unroll 4
  for (int i = 0; i < RW; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_setzero_ps();
  const __mmask16 tail = (__mmask16)((1u << (width - 16 * (NC - 1))) - 1);
  for (int64_t t = 0; t < keys; ++t) {
    const float* vr = v + kr(t) * v_stride + d0;
    if (kr.rows && t + kAhead < keys) PrefetchRow(v + kr(t + kAhead) * v_stride + d0, width);
    __m512 vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      vv[c] = c == NC - 1 ? _mm512_maskz_loadu_ps(tail, vr + 16 * c) : _mm512_loadu_ps(vr + 16 * c);
    const float* pt = p.p + t * p.key_step + lane0 * p.row_step;
#pragma GCC unroll 4
    for (int i = 0; i < RW; ++i) {
      const __m512 pi = _mm512_set1_ps(pt[i * p.row_step]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_fmadd_ps(pi, vv[c], acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < RW; ++i) {
    const __m512 s = _mm512_set1_ps(inv_l[lane0 + i]);
    float* o = out_rows[i] + d0;
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const __m512 r = _mm512_mul_ps(acc[i][c], s);
      if (c == NC - 1)
        _mm512_mask_storeu_ps(o + 16 * c, tail, r);
      else
        _mm512_storeu_ps(o + 16 * c, r);
    }
  }
}

// ValueStrip over rr (1..4) rows: no lane past the block's rows is read.
template <int NC>
PRISM_ATTN void ValueStripOf(int rr, Probabilities p, const float* v, int64_t v_stride, KeyRows kr,
                             int64_t keys, int lane0, int64_t d0, int64_t width, const float* inv_l,
                             float* const* out_rows) {
  switch (rr) {
    case 1: return ValueStrip<NC, 1>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    case 2: return ValueStrip<NC, 2>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    case 3: return ValueStrip<NC, 3>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    default: return ValueStrip<NC, 4>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
  }
}

// Narrow heads (D <= 16): out[row][d] for all 16 rows of the block at once, as D accumulators over the
// rows: each key adds v[t][d] (broadcast) times the key's probability vector. One FMA per key and
// column, against 9 operations per 4 rows of a half-empty vector in ValueStrip.
template <int D>
PRISM_ATTN void ValueColumns(const float* p, const float* v, int64_t v_stride, KeyRows kr, int64_t keys,
                             int rows, const float* inv_l, float* const* out_rows) {
  __m512 acc[D];
#pragma GCC unroll 16
  for (int d = 0; d < D; ++d) acc[d] = _mm512_setzero_ps();
  for (int64_t t = 0; t < keys; ++t) {
    const __m512 pt = _mm512_loadu_ps(p + t * kRows);
    const float* vr = v + kr(t) * v_stride;
#pragma GCC unroll 16
    for (int d = 0; d < D; ++d) acc[d] = _mm512_fmadd_ps(pt, _mm512_set1_ps(vr[d]), acc[d]);
  }
  alignas(64) float cols[D][kRows];
  const __m512 s = _mm512_load_ps(inv_l);
#pragma GCC unroll 16
  for (int d = 0; d < D; ++d) _mm512_store_ps(cols[d], _mm512_mul_ps(acc[d], s));
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) out_rows[r][d] = cols[d][r];
}

template <int... Ds>
PRISM_ATTN void ValueColumnsOf(int64_t D, std::integer_sequence<int, Ds...>, const float* p, const float* v,
                               int64_t v_stride, KeyRows kr, int64_t keys, int rows, const float* inv_l,
                               float* const* out_rows) {
  ((D == Ds + 1 ? ValueColumns<Ds + 1>(p, v, v_stride, kr, keys, rows, inv_l, out_rows) : void()), ...);
}

PRISM_ATTN void AttentionBlock(const float* q, const float* k, const float* v, float* out,
                               const AttentionDims& a, int64_t h, int64_t row0, std::vector<float>& scratch) {
  const int64_t G = a.group, D = a.head_dim, S = a.seq;
  // A decode step's block of narrow heads: AVX2's 8 keys in the lanes need fewer operations per score than
  // 16 (a 16-lane sum costs more than the dot products it saves below 32 elements).
  if (S * G - row0 <= 4 && D < 32) return AttentionBlockAvx2(q, k, v, out, a, h, row0, scratch);
  const AttentionLayout lay = LayoutOf(a);
  const int64_t So = a.out_seq > 0 ? a.out_seq : S;  // out rows per (head, group head)
  // Row r of the block is query (row0 + r) / G of group head (row0 + r) % G; it sees n[r] keys.
  alignas(64) int32_t n[kRows];
  const BlockSetup b = SetUpBlock<kRows>(q, a, h, row0, n, scratch);
  const int rows = b.rows;
  float *qt = b.qt,
        *p = b.p;  // [D][16] queries, transposed, pre-scaled; [keys][16] scores, then probabilities
  const KeyRows kr{a.key_rows, b.first};  // keys from b.first on
  const float* kh = k + h * lay.k_head;
  alignas(64) float inv_l[kRows];
  // Keys in the lanes for decode blocks; 5-8 rows (groups of 5-8 heads) from head size 64, where 16 keys'
  // dot products outweigh their lane sums.
  const bool across_keys = rows <= 4 || (rows <= 8 && D >= 64);
  const Probabilities pr = across_keys ? SoftmaxAcrossKeys(kh, lay.k_row, kr, a, row0, b, n, inv_l)
                                       : SoftmaxAcrossRows(qt, kh, lay.k_row, kr, a, row0, b, n, p, inv_l);
  if (D <= 16) {  // not across keys (D < 32 with rows <= 4 went to AVX2's block above): p is [keys][16]
    float* out_rows[kRows];
    for (int r = 0; r < rows; ++r) {
      const int64_t s = (row0 + r) / G, g = (row0 + r) % G;
      out_rows[r] = out + ((h * G + g) * So + a.out_row0 + s) * D;
    }
    ValueColumnsOf(D, std::make_integer_sequence<int, 16>{}, p, v + h * lay.v_head, lay.v_row, kr, b.keys,
                   rows, inv_l, out_rows);
    return;
  }
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int rr = std::min(4, rows - r0);
    float* out_rows[4];
    int64_t chunk_keys = 0;
    for (int i = 0; i < rr; ++i) {
      const int64_t s = (row0 + r0 + i) / G, g = (row0 + r0 + i) % G;
      out_rows[i] = out + ((h * G + g) * So + a.out_row0 + s) * D;
      chunk_keys = std::max<int64_t>(chunk_keys, n[r0 + i]);
    }
    const float* vh = v + h * lay.v_head;
    for (int64_t d0 = 0; d0 < D; d0 += 64) {
      const int64_t width = std::min<int64_t>(64, D - d0);
      switch ((width + 15) / 16) {
        case 1: ValueStripOf<1>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows); break;
        case 2: ValueStripOf<2>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows); break;
        case 3: ValueStripOf<3>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows); break;
        default:
          ValueStripOf<4>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows);
          break;
      }
    }
  }
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
