// Template-tier CPU causal attention for x86-64 CPUs without AVX-512 (AVX2 + FMA): attention.cpp's
// block algorithm with 8 (query, group head) rows per block, one 8-lane vector. Queries sit transposed
// in a D x 8 panel, each key's 8 scores are one FMA chain of broadcast key elements, the softmax runs
// down the keys for 8 rows at once, and P·V reads each value row once per 4 rows. A block of at most 4
// rows (a decode step's group heads) puts 8 keys in the lanes instead, for its scores and softmax.
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

// Lanes [0, 8) as int32: which of 8 keys from t0 a row seeing n keys sees is n > t0 + lane.
PRISM_AVX2 inline __m256 Visible(int64_t n, int64_t t0) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)n),
                                                _mm256_add_epi32(lane, _mm256_set1_epi32((int32_t)t0))));
}

// Lane j: the sum of x[j]'s 8 lanes.
PRISM_AVX2 inline __m256 LaneSums(const __m256* x) {
  const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(x[0], x[1]), _mm256_hadd_ps(x[2], x[3]));
  const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(x[4], x[5]), _mm256_hadd_ps(x[6], x[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
}

PRISM_AVX2 inline float HorizontalSum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

PRISM_AVX2 inline __m256 HorizontalMax(__m256 x) {
  x = _mm256_max_ps(x, _mm256_permute2f128_ps(x, x, 0x01));
  x = _mm256_max_ps(x, _mm256_shuffle_ps(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm256_max_ps(x, _mm256_shuffle_ps(x, x, _MM_SHUFFLE(2, 3, 0, 1)));
}

// Scores and softmax of a block of at most 4 rows with 8 keys in the lanes (row lanes would leave half or
// more of each vector idle, and the softmax's exp runs once per 8 keys per row instead of once per key):
// each row's score against 8 keys is 8 dot products over D, summed across lanes at once. Returns each row's
// probabilities (0 past the keys it sees; a buffer of this thread's) and leaves 1 / sum in inv_l.
PRISM_AVX2 Probabilities SoftmaxAcrossKeys(const float* kh, int64_t k_row, KeyRows kr, const AttentionDims& a,
                                           int64_t row0, const BlockSetup& b, const int32_t* n,
                                           float* inv_l) {
  const int64_t D = a.head_dim, keys = b.keys, kp = (keys + 7) / 8 * 8, dp = (D + 7) / 8 * 8;
  static thread_local std::vector<float> buf;
  buf.assign((size_t)(4 * dp + dp + 4 * kp), 0.0f);
  float *qs = buf.data(), *zero = qs + 4 * dp, *s = zero + dp;  // [4][dp] scaled queries; a zero row; [4][kp]
  for (int r = 0; r < b.rows; ++r)                              // the block's queries, transposed back
    for (int64_t e = 0; e < D; ++e) qs[r * dp + e] = b.qt[e * kRows + r];
  alignas(32) int32_t tail_bits[8];
  for (int j = 0; j < 8; ++j) tail_bits[j] = D % 8 == 0 || j < D % 8 ? -1 : 0;
  const __m256i tail = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail_bits));
  const int64_t full = D / 8 * 8;
  for (int64_t t0 = 0; t0 < keys; t0 += 8) {
    const float* kt[8];  // keys past the last read the zero row (their lanes are hidden below)
#pragma GCC unroll 8     // unrolled first: vectorized, it loaded key_rows with masked loads, slow on AMD
    for (int j = 0; j < 8; ++j) kt[j] = t0 + j < keys ? kh + kr(t0 + j) * k_row : zero;
    if (kr.rows)  // paged: its blocks lie anywhere
      for (int64_t u = t0 + kAhead; u < std::min(keys, t0 + kAhead + 8); ++u)
        PrefetchRow(kh + kr(u) * k_row, D);
    for (int r = 0; r < b.rows; ++r) {
      __m256 acc[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
      const float* qr = qs + r * dp;
      for (int64_t e = 0; e < full; e += 8) {
        const __m256 qv = _mm256_loadu_ps(qr + e);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kt[j] + e), acc[j]);
      }
      if (full < D) {  // the queries' rows are zero past D; K's rows may end at D (the pool's last)
        const __m256 qv = _mm256_loadu_ps(qr + full);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j)
          acc[j] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(kt[j] + full, tail), acc[j]);
      }
      _mm256_storeu_ps(s + r * kp + t0, LaneSums(acc));
    }
  }
  AddMask(s, 1, kp, keys, a, row0, b);
  const __m256 c = _mm256_set1_ps(a.exp_scale);
  for (int r = 0; r < b.rows; ++r) {
    float* sr = s + r * kp;
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int64_t t0 = 0; t0 < n[r]; t0 += 8)
      m = _mm256_blendv_ps(m, _mm256_max_ps(m, _mm256_loadu_ps(sr + t0)), Visible(n[r], t0));
    m = HorizontalMax(m);
    __m256 l = _mm256_setzero_ps();
    for (int64_t t0 = 0; t0 < keys; t0 += 8) {
      const __m256 x = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(sr + t0), m), c);
      const __m256 e = _mm256_and_ps(Exp2(x), Visible(n[r], t0));
      l = _mm256_add_ps(l, e);
      _mm256_storeu_ps(sr + t0, e);
    }
    // A row that sees no key divides 0 by 0: NaN, as the unfused softmax gives.
    inv_l[r] = 1.0f / HorizontalSum(l);
  }
  return {s, 1, kp};
}

// Scores and softmax of a block with its rows in the lanes: leaves the probabilities in p [keys][kRows]
// (0 past the keys each row sees) and 1 / sum per row in inv_l.
PRISM_AVX2 Probabilities SoftmaxAcrossRows(const float* qt, const float* kh, int64_t k_row, KeyRows kr,
                                           const AttentionDims& a, int64_t row0, const BlockSetup& b,
                                           const int32_t* n, float* p, float* inv_l) {
  const int64_t D = a.head_dim, keys = b.keys;
  int64_t t = 0;
  for (; t + 4 <= keys; t += 4) {
    if (kr.rows)  // paged: its blocks lie anywhere
      for (int64_t u = t + kAhead; u < std::min(keys, t + kAhead + 4); ++u)
        PrefetchRow(kh + kr(u) * k_row, D);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const float *k0 = kh + kr(t) * k_row, *k1 = kh + kr(t + 1) * k_row, *k2 = kh + kr(t + 2) * k_row,
                *k3 = kh + kr(t + 3) * k_row;
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
    const float* k0 = kh + kr(t) * k_row;
    for (int64_t e = 0; e < D; ++e)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qt + e * kRows), _mm256_broadcast_ss(k0 + e), s0);
    _mm256_storeu_ps(p + t * kRows, s0);
  }
  AddMask(p, kRows, 1, keys, a, row0, b);
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
  _mm256_store_ps(inv_l, _mm256_div_ps(_mm256_set1_ps(1.0f), l));
  return {p, kRows, 1};
}

// out rows [r, r + RW) of the block (RW <= 4): sum over keys of p's (key, row) * v[t, :] over one strip of at
// most 8 * NC value columns from d0, scaled by 1 / l.
template <int NC, int RW>
PRISM_AVX2 void ValueStrip(Probabilities p, const float* v, int64_t v_stride, KeyRows kr, int64_t keys,
                           int lane0, int64_t d0, int64_t width, const float* inv_l, float* const* out_rows) {
  __m256 acc[RW][NC];
#pragma GCC unroll 4
  for (int i = 0; i < RW; ++i)
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
      vv[c] =
          c == NC - 1 && tail < 8 ? _mm256_maskload_ps(vr + 8 * c, tail_mask) : _mm256_loadu_ps(vr + 8 * c);
    const float* pt = p.p + t * p.key_step + lane0 * p.row_step;
#pragma GCC unroll 4
    for (int i = 0; i < RW; ++i) {
      const __m256 pi = _mm256_broadcast_ss(pt + i * p.row_step);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[i][c] = _mm256_fmadd_ps(pi, vv[c], acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < RW; ++i) {
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

// ValueStrip over rr (1..4) rows: no lane past the block's rows is read.
template <int NC>
PRISM_AVX2 void ValueStripOf(int rr, Probabilities p, const float* v, int64_t v_stride, KeyRows kr,
                             int64_t keys, int lane0, int64_t d0, int64_t width, const float* inv_l,
                             float* const* out_rows) {
  switch (rr) {
    case 1: return ValueStrip<NC, 1>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    case 2: return ValueStrip<NC, 2>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    case 3: return ValueStrip<NC, 3>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    default: return ValueStrip<NC, 4>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
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
  float *qt = b.qt, *p = b.p;  // [D][8] queries, transposed, pre-scaled; [keys][8] scores, then probabilities
  const KeyRows kr{a.key_rows, b.first};  // keys from b.first on
  const float* kh = k + h * lay.k_head;
  alignas(32) float inv_l[kRows];
  const Probabilities pr = rows <= 4 ? SoftmaxAcrossKeys(kh, lay.k_row, kr, a, row0, b, n, inv_l)
                                     : SoftmaxAcrossRows(qt, kh, lay.k_row, kr, a, row0, b, n, p, inv_l);
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
        ValueStripOf<2>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows);
      else
        ValueStripOf<1>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows);
    }
  }
}

}  // namespace prism
