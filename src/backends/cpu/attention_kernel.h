// The attention block kernel over one vector width: written once, over a lanes type V (attention.cpp's
// 16-lane AVX-512 `Lanes512`, attention_avx2.cpp's 8-lane `Lanes256`). A block of V::kW (query, group head)
// rows of one K/V head keeps its queries transposed in a D x kW panel, so each key's scores for all rows are
// one FMA chain of broadcast key elements; the scores then sit as [key][row], where the softmax's max, exp
// and sum run down the keys for every row at once; P·V reads each value row once per 4 rows. Keys past a
// row's causal limit are never computed. A block of few rows (a decode step's group heads: V::AcrossKeys)
// puts kW keys in the lanes instead, for its scores and softmax.
//
// The including file defines PRISM_LANES_TARGET (its ISA's target attribute) and V first; everything here
// has internal linkage, so each file's copy is compiled for its own ISA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/cpu/attention_block.h"

namespace prism {
namespace {

// V's operations (all on V::F, kW f32 lanes): Zero, Set1, Load/Store (unaligned), Add, Sub, Mul, Div, Fmadd,
// Exp2 (attention's 2^x: 0 below -126, NaN through), ReduceAdd/ReduceMax (to a float), LaneSums (lane j:
// the sum of x[j]'s lanes, for kW vectors); V::M a lane mask: Visible(n, t0) (lanes t0 + j < n), Seen(nv, t)
// (lanes r with n[r] > t, nv = LoadCounts(n)), MaxWhere(m, mask, x), Keep(mask, x) (0 where not); V::T a
// tail of 1..kW lanes: TailOf(count), LoadTail, StoreTail.

// Scores and softmax of a block of at most V::kAcrossKeysRows rows with kW keys in the lanes: each row's
// scores against kW keys are kW dot products over D, summed across lanes at once, and the softmax's exp runs
// once per kW keys per row (row lanes would leave most lanes idle). Returns each row's probabilities (0 past
// the keys it sees; a buffer of this thread's) and leaves 1 / sum in inv_l.
template <class V>
PRISM_LANES_TARGET Probabilities SoftmaxAcrossKeys(const float* kh, int64_t k_row, KeyRows kr,
                                                   const AttentionDims& a, int64_t row0, const BlockSetup& b,
                                                   const int32_t* n, float* inv_l) {
  constexpr int W = V::kW, R = V::kAcrossKeysRows, kRows = V::kW;
  const int64_t D = a.head_dim, keys = b.keys, kp = (keys + W - 1) / W * W, dp = (D + W - 1) / W * W;
  static thread_local std::vector<float> buf;
  buf.assign((size_t)(R * dp + dp + R * kp), 0.0f);
  float *qs = buf.data(), *zero = qs + R * dp, *s = zero + dp;  // [R][dp] scaled queries; a zero row; [R][kp]
  for (int r = 0; r < b.rows; ++r)                              // the block's queries, transposed back
    for (int64_t e = 0; e < D; ++e) qs[r * dp + e] = b.qt[e * kRows + r];
  const typename V::T tail = V::TailOf((int)(D - (dp - W)));  // K's last 1..kW elements of a row
  const int64_t full = D / W * W, ahead = DenseAhead(D);
  for (int64_t t0 = 0; t0 < keys; t0 += W) {
    const float* kt[W];  // keys past the last read the zero row (their lanes are hidden below)
#pragma GCC unroll 16    // unrolled first: vectorized, it loaded key_rows with masked loads, slow on AMD
    for (int j = 0; j < W; ++j) kt[j] = t0 + j < keys ? kh + kr(t0 + j) * k_row : zero;
    if (kr.rows)  // paged: its blocks lie anywhere
      for (int64_t u = t0 + kAhead * W / 8; u < std::min(keys, t0 + kAhead * W / 8 + W); ++u)
        PrefetchRow(kh + kr(u) * k_row, D);
    else  // one sequence's cache
      for (int64_t u = t0 + ahead; u < std::min(keys, t0 + ahead + W); ++u) PrefetchRow(kh + u * k_row, D);
    for (int r = 0; r < b.rows; ++r) {
      typename V::F acc[W];
      const float* qr = qs + r * dp;
#pragma GCC unroll 2
      for (int half = 0; half < W / 8; ++half) {  // 8 key pointers at a time stay in registers
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[8 * half + j] = V::Zero();
        const float* const* kk = kt + 8 * half;
        for (int64_t e = 0; e < full; e += W) {
          const typename V::F qv = V::Load(qr + e);
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j) acc[8 * half + j] = V::Fmadd(qv, V::Load(kk[j] + e), acc[8 * half + j]);
        }
        if (full < D) {  // the queries' rows are zero past D; K's rows may end at D (the pool's last)
          const typename V::F qv = V::Load(qr + full);
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j)
            acc[8 * half + j] = V::Fmadd(qv, V::LoadTail(tail, kk[j] + full), acc[8 * half + j]);
        }
      }
      V::Store(s + r * kp + t0, V::LaneSums(acc));
    }
  }
  AddMask(s, 1, kp, keys, a, row0, b);
  const typename V::F c = V::Set1(a.exp_scale);
  for (int r = 0; r < b.rows; ++r) {
    float* sr = s + r * kp;
    typename V::F m = V::Set1(-INFINITY);
    for (int64_t t0 = 0; t0 < n[r]; t0 += W) m = V::MaxWhere(m, V::Visible(n[r], t0), V::Load(sr + t0));
    m = V::Set1(V::ReduceMax(m));
    typename V::F l = V::Zero();
    for (int64_t t0 = 0; t0 < keys; t0 += W) {
      const typename V::F e = V::Keep(V::Visible(n[r], t0), V::Exp2(V::Mul(V::Sub(V::Load(sr + t0), m), c)));
      l = V::Add(l, e);
      V::Store(sr + t0, e);
    }
    // A row that sees no key divides 0 by 0: NaN, as the unfused softmax gives.
    inv_l[r] = 1.0f / V::ReduceAdd(l);
  }
  return {s, 1, kp};
}

// Scores and softmax of a block with its rows in the lanes: leaves the probabilities in p [keys][kW] (0 past
// the keys each row sees) and 1 / sum per row in inv_l.
template <class V>
PRISM_LANES_TARGET Probabilities SoftmaxAcrossRows(const float* qt, const float* kh, int64_t k_row,
                                                   KeyRows kr, const AttentionDims& a, int64_t row0,
                                                   const BlockSetup& b, const int32_t* n, float* p,
                                                   float* inv_l) {
  constexpr int kRows = V::kW;
  const int64_t D = a.head_dim, keys = b.keys;
  int64_t t = 0;
  for (; t + 4 <= keys; t += 4) {
    if (kr.rows)  // paged: its blocks lie anywhere
      for (int64_t u = t + kAhead; u < std::min(keys, t + kAhead + 4); ++u)
        PrefetchRow(kh + kr(u) * k_row, D);
    typename V::F s0 = V::Zero(), s1 = s0, s2 = s0, s3 = s0;
    const float *k0 = kh + kr(t) * k_row, *k1 = kh + kr(t + 1) * k_row, *k2 = kh + kr(t + 2) * k_row,
                *k3 = kh + kr(t + 3) * k_row;
    for (int64_t e = 0; e < D; ++e) {
      const typename V::F qe = V::Load(qt + e * kRows);
      s0 = V::Fmadd(qe, V::Set1(k0[e]), s0);
      s1 = V::Fmadd(qe, V::Set1(k1[e]), s1);
      s2 = V::Fmadd(qe, V::Set1(k2[e]), s2);
      s3 = V::Fmadd(qe, V::Set1(k3[e]), s3);
    }
    V::Store(p + (t + 0) * kRows, s0);
    V::Store(p + (t + 1) * kRows, s1);
    V::Store(p + (t + 2) * kRows, s2);
    V::Store(p + (t + 3) * kRows, s3);
  }
  for (; t < keys; ++t) {
    typename V::F s0 = V::Zero();
    const float* k0 = kh + kr(t) * k_row;
    for (int64_t e = 0; e < D; ++e) s0 = V::Fmadd(V::Load(qt + e * kRows), V::Set1(k0[e]), s0);
    V::Store(p + t * kRows, s0);
  }
  AddMask(p, kRows, 1, keys, a, row0, b);
  // Softmax down the keys, every row at once; keys a row does not see become probability 0.
  const auto nv = V::LoadCounts(n);
  typename V::F m = V::Set1(-INFINITY);
  for (t = 0; t < keys; ++t) m = V::MaxWhere(m, V::Seen(nv, t), V::Load(p + t * kRows));
  const typename V::F c = V::Set1(a.exp_scale);
  typename V::F l = V::Zero();
  for (t = 0; t < keys; ++t) {
    const typename V::F e = V::Keep(V::Seen(nv, t), V::Exp2(V::Mul(V::Sub(V::Load(p + t * kRows), m), c)));
    l = V::Add(l, e);
    V::Store(p + t * kRows, e);
  }
  // A row that sees no key divides 0 by 0: NaN, as the unfused softmax gives.
  V::Store(inv_l, V::Div(V::Set1(1.0f), l));
  return {p, kRows, 1};
}

// out rows [lane0, lane0 + RW) of the block (RW <= 4): sum over keys of p's (key, row) * v[t, :], over one
// strip of at most NC vectors of value columns starting at d0, scaled by 1 / l.
template <class V, int NC, int RW>
PRISM_LANES_TARGET void ValueStrip(Probabilities p, const float* v, int64_t v_stride, KeyRows kr,
                                   int64_t keys, int lane0, int64_t d0, int64_t width, const float* inv_l,
                                   float* const* out_rows) {
  constexpr int W = V::kW;
  typename V::F acc[RW][NC];  // fully unrolled below: the accumulators live in registers
#pragma GCC unroll 4
  for (int i = 0; i < RW; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[i][c] = V::Zero();
  const int last = (int)(width - W * (NC - 1));  // columns in the last vector, 1..W
  const typename V::T tail = V::TailOf(last);
  // A whole last vector loads plainly where a masked load costs more (AVX2's).
  const bool masked = V::kMaskedLoadsFree || last < W;
  for (int64_t t = 0; t < keys; ++t) {
    const float* vr = v + kr(t) * v_stride + d0;
    if (kr.rows && t + kAheadValues < keys) PrefetchRow(v + kr(t + kAheadValues) * v_stride + d0, width);
    typename V::F vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      vv[c] = c == NC - 1 && masked ? V::LoadTail(tail, vr + W * c) : V::Load(vr + W * c);
    const float* pt = p.p + t * p.key_step + lane0 * p.row_step;
#pragma GCC unroll 4
    for (int i = 0; i < RW; ++i) {
      const typename V::F pi = V::Set1(pt[i * p.row_step]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[i][c] = V::Fmadd(pi, vv[c], acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < RW; ++i) {
    const typename V::F s = V::Set1(inv_l[lane0 + i]);
    float* o = out_rows[i] + d0;
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const typename V::F r = V::Mul(acc[i][c], s);
      if (c == NC - 1)
        V::StoreTail(tail, o + W * c, r);
      else
        V::Store(o + W * c, r);
    }
  }
}

// ValueStrip over rr (1..4) rows: no lane past the block's rows is read.
template <class V, int NC>
PRISM_LANES_TARGET void ValueStripOf(int rr, Probabilities p, const float* v, int64_t v_stride, KeyRows kr,
                                     int64_t keys, int lane0, int64_t d0, int64_t width, const float* inv_l,
                                     float* const* out_rows) {
  switch (rr) {
    case 1: return ValueStrip<V, NC, 1>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    case 2: return ValueStrip<V, NC, 2>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    case 3: return ValueStrip<V, NC, 3>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
    default: return ValueStrip<V, NC, 4>(p, v, v_stride, kr, keys, lane0, d0, width, inv_l, out_rows);
  }
}

// Narrow heads (D <= kW, rows in the lanes): out[row][d] for all the block's rows at once, as D accumulators
// over the rows: each key adds v[t][d] (broadcast) times the key's probability vector. One FMA per key and
// column, against 9 operations per 4 rows of a half-empty vector in ValueStrip.
template <class V, int D>
PRISM_LANES_TARGET void ValueColumns(const float* p, const float* v, int64_t v_stride, KeyRows kr,
                                     int64_t keys, int rows, const float* inv_l, float* const* out_rows) {
  constexpr int kRows = V::kW;
  typename V::F acc[D];
#pragma GCC unroll 16
  for (int d = 0; d < D; ++d) acc[d] = V::Zero();
  for (int64_t t = 0; t < keys; ++t) {
    const typename V::F pt = V::Load(p + t * kRows);
    const float* vr = v + kr(t) * v_stride;
#pragma GCC unroll 16
    for (int d = 0; d < D; ++d) acc[d] = V::Fmadd(pt, V::Set1(vr[d]), acc[d]);
  }
  alignas(64) float cols[D][kRows];
  const typename V::F s = V::Load(inv_l);
#pragma GCC unroll 16
  for (int d = 0; d < D; ++d) V::Store(cols[d], V::Mul(acc[d], s));
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) out_rows[r][d] = cols[d][r];
}

template <class V, int... Ds>
PRISM_LANES_TARGET void ValueColumnsOf(int64_t D, std::integer_sequence<int, Ds...>, const float* p,
                                       const float* v, int64_t v_stride, KeyRows kr, int64_t keys, int rows,
                                       const float* inv_l, float* const* out_rows) {
  ((D == Ds + 1 ? ValueColumns<V, Ds + 1>(p, v, v_stride, kr, keys, rows, inv_l, out_rows) : void()), ...);
}

// One block: rows [row0, row0 + kW) of K/V head h (AttentionBlockFn).
template <class V>
PRISM_LANES_TARGET void AttentionBlockOf(const float* q, const float* k, const float* v, float* out,
                                         const AttentionDims& a, int64_t h, int64_t row0,
                                         std::vector<float>& scratch) {
  constexpr int kRows = V::kW, kStrip = V::kStripVectors * V::kW;
  const int64_t G = a.group, D = a.head_dim, S = a.seq;
  const AttentionLayout lay = LayoutOf(a);
  const int64_t So = a.out_seq > 0 ? a.out_seq : S;  // out rows per (head, group head)
  // Row r of the block is query (row0 + r) / G of group head (row0 + r) % G; it sees n[r] keys.
  alignas(64) int32_t n[kRows];
  const BlockSetup b = SetUpBlock<kRows>(q, a, h, row0, n, scratch);
  const int rows = b.rows;
  float *qt = b.qt,
        *p = b.p;  // [D][kW] queries, transposed, pre-scaled; [keys][kW] scores, then probabilities
  const KeyRows kr{a.key_rows, b.first};  // keys from b.first on
  const float* kh = k + h * lay.k_head;
  const float* vh = v + h * lay.v_head;
  alignas(64) float inv_l[kRows];
  const bool across_keys = V::AcrossKeys(rows, D);
  const Probabilities pr = across_keys ? SoftmaxAcrossKeys<V>(kh, lay.k_row, kr, a, row0, b, n, inv_l)
                                       : SoftmaxAcrossRows<V>(qt, kh, lay.k_row, kr, a, row0, b, n, p, inv_l);
  if (V::kNarrowColumns && !across_keys && D <= kRows) {  // p is [keys][kW]
    float* out_rows[kRows];
    for (int r = 0; r < rows; ++r) {
      const int64_t s = (row0 + r) / G, g = (row0 + r) % G;
      out_rows[r] = out + ((h * G + g) * So + a.out_row0 + s) * D;
    }
    ValueColumnsOf<V>(D, std::make_integer_sequence<int, kRows>{}, p, vh, lay.v_row, kr, b.keys, rows, inv_l,
                      out_rows);
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
    for (int64_t d0 = 0; d0 < D; d0 += kStrip) {
      const int64_t width = std::min<int64_t>(kStrip, D - d0);
      switch ((width + kRows - 1) / kRows) {
        case 1:
          ValueStripOf<V, 1>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows);
          break;
        case 2:
          ValueStripOf<V, 2>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows);
          break;
        case 3:
          if constexpr (V::kStripVectors >= 3)
            ValueStripOf<V, 3>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows);
          break;
        default:
          if constexpr (V::kStripVectors >= 4)
            ValueStripOf<V, 4>(rr, pr, vh, lay.v_row, kr, chunk_keys, r0, d0, width, inv_l, out_rows);
          break;
      }
    }
  }
}

}  // namespace
}  // namespace prism
