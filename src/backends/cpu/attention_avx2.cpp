// Template-tier CPU causal attention for x86-64 CPUs without AVX-512 (AVX2 + FMA): attention.cpp's
// block algorithm with 8 (query, group head) rows per block, one 8-lane vector. Queries sit transposed
// in a D x 8 panel, each key's 8 scores are one FMA chain of broadcast key elements, the softmax runs
// down the keys for 8 rows at once, and P·V reads each value row once per 4 rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/attention_block.h"

#define PRISM_AVX2 __attribute__((target("avx2,fma")))

namespace prism {
namespace {

constexpr int kRows = kAvx2AttentionRows;

// 2^x as attention.cpp's Exp2 (degree-7 series of e^((f - 1/2) ln 2) times sqrt(2)), with 2^i put into
// the exponent bits: 0 below x = -126 (no subnormals), NaN passes through.
PRISM_AVX2 inline __m256 Exp2(__m256 x) {
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLT_UQ);
  const __m256 xc = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 xi = _mm256_floor_ps(xc);
  const __m256 g = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(xc, xi), _mm256_set1_ps(0.5f)),
                                 _mm256_set1_ps(0.6931471805599453f));
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(c));
  // 2^i for i in [-127, 128): (i + 127) << 23 as float bits; i = -127 gives 0 (masked anyway).
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
  __m256 r = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_set1_ps(1.4142135623730951f)), _mm256_castsi256_ps(e));
  r = _mm256_and_ps(r, normal);
  return _mm256_blendv_ps(r, x, nan);
}

// out rows [r, r + rows) of the block (rows <= 4, computed 4 wide): sum over keys of p[t][lane] * v[t, :]
// over one strip of at most 8 * NC value columns from d0, scaled by 1 / l.
template <int NC>
PRISM_AVX2 void ValueStrip(const float* p, const float* v, int64_t v_stride, KeyRows kr, int64_t keys,
                           int lane0, int rows, int64_t d0, int64_t width, const float* inv_l,
                           float* const* out_rows) {
  __m256 acc[4][NC];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[i][c] = _mm256_setzero_ps();
  const int tail = (int)(width - 8 * (NC - 1));  // columns in the last vector, 1..8
  alignas(32) int32_t mask_bits[8];
  for (int j = 0; j < 8; ++j) mask_bits[j] = j < tail ? -1 : 0;
  const __m256i tail_mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(mask_bits));
  for (int64_t t = 0; t < keys; ++t) {
    const float* vr = v + kr(t) * v_stride + d0;
    if (kr.rows && t + kAhead < keys) PrefetchRow(v + kr(t + kAhead) * v_stride + d0, width);
    __m256 vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      vv[c] = c == NC - 1 ? _mm256_maskload_ps(vr + 8 * c, tail_mask) : _mm256_loadu_ps(vr + 8 * c);
    const float* pt = p + t * kRows + lane0;
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {  // all 4 (a lane past the block's rows holds probability 0)
      const __m256 pi = _mm256_broadcast_ss(pt + i);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[i][c] = _mm256_fmadd_ps(pi, vv[c], acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    if (i >= rows) break;
    const __m256 s = _mm256_set1_ps(inv_l[lane0 + i]);
    float* o = out_rows[i] + d0;
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const __m256 r = _mm256_mul_ps(acc[i][c], s);
      if (c == NC - 1)
        _mm256_maskstore_ps(o + 8 * c, tail_mask, r);
      else
        _mm256_storeu_ps(o + 8 * c, r);
    }
  }
}

}  // namespace

PRISM_AVX2 void AttentionBlockAvx2(const float* q, const float* k, const float* v, float* out,
                                   const AttentionDims& a, int64_t h, int64_t row0,
                                   std::vector<float>& scratch) {
  const int64_t G = a.group, D = a.head_dim, S = a.seq;
  const AttentionLayout lay = LayoutOf(a);
  const int64_t So = a.out_seq > 0 ? a.out_seq : S;
  // Row r of the block is query (row0 + r) / G of group head (row0 + r) % G; it sees n[r] keys.
  alignas(32) int32_t n[kRows];
  const BlockSetup b = SetUpBlock<kRows>(q, a, h, row0, n, scratch);
  const int rows = b.rows;
  const int64_t keys = b.keys;
  float *qt = b.qt, *p = b.p;  // [D][8] queries, transposed, pre-scaled; [keys][8] scores, then probabilities
  const KeyRows kr{a.key_rows, b.first};  // keys from b.first on
  const float* kh = k + h * lay.k_head;
  int64_t t = 0;
  for (; t + 4 <= keys; t += 4) {
    if (kr.rows)  // paged: its blocks lie anywhere
      for (int64_t u = t + kAhead; u < std::min(keys, t + kAhead + 4); ++u)
        PrefetchRow(kh + kr(u) * lay.k_row, D);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const float *k0 = kh + kr(t) * lay.k_row, *k1 = kh + kr(t + 1) * lay.k_row,
                *k2 = kh + kr(t + 2) * lay.k_row, *k3 = kh + kr(t + 3) * lay.k_row;
    for (int64_t e = 0; e < D; ++e) {
      const __m256 qe = _mm256_loadu_ps(qt + e * kRows);
      s0 = _mm256_fmadd_ps(qe, _mm256_broadcast_ss(k0 + e), s0);
      s1 = _mm256_fmadd_ps(qe, _mm256_broadcast_ss(k1 + e), s1);
      s2 = _mm256_fmadd_ps(qe, _mm256_broadcast_ss(k2 + e), s2);
      s3 = _mm256_fmadd_ps(qe, _mm256_broadcast_ss(k3 + e), s3);
    }
    _mm256_storeu_ps(p + (t + 0) * kRows, s0);
    _mm256_storeu_ps(p + (t + 1) * kRows, s1);
    _mm256_storeu_ps(p + (t + 2) * kRows, s2);
    _mm256_storeu_ps(p + (t + 3) * kRows, s3);
  }
  for (; t < keys; ++t) {
    __m256 s0 = _mm256_setzero_ps();
    const float* k0 = kh + kr(t) * lay.k_row;
    for (int64_t e = 0; e < D; ++e)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qt + e * kRows), _mm256_broadcast_ss(k0 + e), s0);
    _mm256_storeu_ps(p + t * kRows, s0);
  }
  AddMask<kRows>(p, keys, a, row0, b);
  // Softmax down the keys, 8 rows at once; keys a row does not see become probability 0.
  const __m256i nv = _mm256_load_si256(reinterpret_cast<const __m256i*>(n));
  __m256 m = _mm256_set1_ps(-INFINITY);
  for (t = 0; t < keys; ++t) {
    const __m256 vis = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, _mm256_set1_epi32((int32_t)t)));
    m = _mm256_blendv_ps(m, _mm256_max_ps(m, _mm256_loadu_ps(p + t * kRows)), vis);
  }
  const __m256 c = _mm256_set1_ps(a.exp_scale);
  __m256 l = _mm256_setzero_ps();
  for (t = 0; t < keys; ++t) {
    const __m256 vis = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, _mm256_set1_epi32((int32_t)t)));
    const __m256 x = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(p + t * kRows), m), c);
    const __m256 e = _mm256_and_ps(Exp2(x), vis);
    l = _mm256_add_ps(l, e);
    _mm256_storeu_ps(p + t * kRows, e);
  }
  // A row that sees no key divides 0 by 0: NaN, as the unfused softmax gives.
  alignas(32) float inv_l[kRows];
  _mm256_store_ps(inv_l, _mm256_div_ps(_mm256_set1_ps(1.0f), l));
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
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
      const int64_t width = std::min<int64_t>(16, D - d0);
      if (width > 8)
        ValueStrip<2>(p, vh, lay.v_row, kr, chunk_keys, r0, rr, d0, width, inv_l, out_rows);
      else
        ValueStrip<1>(p, vh, lay.v_row, kr, chunk_keys, r0, rr, d0, width, inv_l, out_rows);
    }
  }
}

}  // namespace prism
