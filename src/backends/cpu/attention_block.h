// The ISA kernels behind attention.cpp: one block of (query, group head) rows of one K/V head.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/attention.h"

namespace prism {

// Rows [row0, row0 + rows per block) of head h (row r: query r / group, group head r % group) into out.
using AttentionBlockFn = void (*)(const float* q, const float* k, const float* v, float* out,
                                  const AttentionDims& a, int64_t h, int64_t row0,
                                  std::vector<float>& scratch);

// The strides of q, K and V (AttentionDims' -1 resolved to the dense layouts).
struct AttentionLayout {
  int64_t q_row, q_head, k_row, k_head, v_row, v_head;
};
inline AttentionLayout LayoutOf(const AttentionDims& a) {
  const int64_t D = a.head_dim, HD = a.heads_kv * D;
  auto pick = [](int64_t given, int64_t dense) { return given >= 0 ? given : dense; };
  return {pick(a.q_row, a.group * HD), pick(a.q_head, D), pick(a.k_row, HD),
          pick(a.k_head, D),           pick(a.v_row, HD), pick(a.v_head, D)};
}

// Where key `first + t` lies in K and V, in rows: itself, or its pool row (AttentionDims::key_rows).
struct KeyRows {
  const int64_t* rows;
  int64_t first;
  int64_t operator()(int64_t t) const { return rows ? rows[first + t] : first + t; }
};

// Keys ahead of the one in use whose rows both block kernels prefetch from a paged cache: one head's part of
// a key row is a few cache lines at the stride of all heads' rows, in blocks anywhere in the pool, which the
// hardware prefetcher does not foresee (reading them in place so beat copying them out first by 11-33%). P·V
// reads its values twice as far ahead: `prism_attention_bench 16 KEYS 2 cold N paged`, 16 keys against 8
// through a temporary switch, twice each: 50 keys 144.1 / 143.9 against 146.9 / 146.0 us, 200 keys 469 / 476
// against 482 (and a first 665), 500 keys 1,164 / 1,157 against 1,214 / 1,220 us (4 sequences x 1,000 keys:
// 571 / 574 against 601 / 596).
constexpr int64_t kAhead = 8, kAheadValues = 16;
inline void PrefetchRow(const float* row, int64_t n) {
  for (int64_t e = 0; e < n; e += 16) __builtin_prefetch(row + e);
}
// Keys ahead whose rows a decode block's scores prefetch from one sequence's cache, whose head-major rows are
// one stream a head: about 8 KiB. The hardware prefetcher alone left a cold step at half the read bandwidth
// (`prism_attention_bench 1 2048 1 cold 50 heads`: 390 us without, 265-303 us at 8-10 KiB ahead, 292-306 at
// 4, 6, 12 or 16 KiB). Its values are left to the hardware: prefetching them gained a decode step nothing and
// cost a prefill 4-5%.
inline int64_t DenseAhead(int64_t head_dim) { return std::max<int64_t>(1, 8192 / (4 * head_dim)); }

// What both block kernels set up first: row r of the block (query (row0 + r) / group, group head
// (row0 + r) % group) sees keys [0, n[r]) (causally, and up to its mask's last visible key); `qt` [D][R]
// holds the queries transposed and pre-scaled (rows past the block's zero) and `p` [keys][R] the room for
// scores. Returns the block's rows.
struct BlockSetup {
  int rows;
  int64_t keys;   // max n[r]
  int64_t first;  // keys before this one no row sees (their masks hide them): n[r] counts from it
  bool plain;     // the rows' masks add 0 to every key from `first` they see: nothing to add
  float *qt, *p;
};
template <int R>
BlockSetup SetUpBlock(const float* q, const AttentionDims& a, int64_t h, int64_t row0, int32_t* n,
                      std::vector<float>& scratch) {
  const int64_t G = a.group, D = a.head_dim;
  const AttentionLayout l = LayoutOf(a);
  BlockSetup b{(int)std::min<int64_t>(R, a.seq * G - row0), 0, 0, true, nullptr, nullptr};
  int64_t first = a.total;  // the earliest key some row sees
  for (int r = 0; r < R; ++r) {
    n[r] = r < b.rows ? (int32_t)std::clamp<int64_t>((row0 + r) / G + a.offset, 0, a.total) : 0;
    if (a.spans && r < b.rows) {  // keys past the last one the mask shows add nothing (NaN shows)
      const AttentionDims::MaskSpan& sp = a.spans[(row0 + r) / G];
      n[r] = std::min<int32_t>(n[r], sp.end);
      if (sp.first < n[r]) first = std::min<int64_t>(first, sp.first);
    }
  }
  if (a.spans) {
    b.first = first < a.total ? first : 0;
    for (int r = 0; r < b.rows; ++r) {
      const AttentionDims::MaskSpan& sp = a.spans[(row0 + r) / G];
      b.plain = b.plain && (n[r] <= b.first || (sp.plain && sp.first == b.first));
    }
  }
  for (int r = 0; r < R; ++r) {
    n[r] = (int32_t)std::max<int64_t>(0, n[r] - b.first);
    b.keys = std::max<int64_t>(b.keys, n[r]);
  }
  scratch.resize((size_t)(D + b.keys) * R);
  b.qt = scratch.data();
  b.p = b.qt + D * R;
  // Row by row, each query's place found once; the rows past the block's (a decode block has few) zeroed
  // at once.
  if (b.rows < R) std::memset(b.qt, 0, sizeof(float) * (size_t)(D * R));
  for (int r = 0; r < b.rows; ++r) {
    const int64_t s = (row0 + r) / G, g = (row0 + r) % G;
    const float* qr = q + s * l.q_row + (h * G + g) * l.q_head;
    for (int64_t e = 0; e < D; ++e) b.qt[e * R + r] = qr[e] * a.scale;
  }
  return b;
}

// A block's probabilities: row r's key t at p[t * key_step + r * row_step].
struct Probabilities {
  const float* p;
  int64_t key_step, row_step;
};

// Adds the mask to the block's scores over keys [b.first, b.first + keys): row r's key t at
// p[t * key_step + r * row_step] (rows past the block's keep theirs).
inline void AddMask(float* p, int64_t key_step, int64_t row_step, int64_t keys, const AttentionDims& a,
                    int64_t row0, const BlockSetup& b) {
  if (!a.mask || b.plain) return;
  for (int r = 0; r < b.rows; ++r) {
    const float* m = a.mask + (row0 + r) / a.group * a.mask_row + b.first;
    for (int64_t t = 0; t < keys; ++t) p[t * key_step + r * row_step] += m[t];
  }
}

// Each query's MaskSpan (AttentionDims::spans) over the keys its causal limit leaves it.
inline void MaskSpans(const AttentionDims& a, std::vector<AttentionDims::MaskSpan>& out) {
  out.assign((size_t)a.seq, {});
  for (int64_t s = 0; s < a.seq; ++s) {
    const float* m = a.mask + s * a.mask_row;
    const int64_t limit = std::clamp<int64_t>(s + a.offset, 0, a.total);
    int64_t first = 0, end = limit;
    while (first < limit && m[first] == -INFINITY) ++first;
    while (end > first && m[end - 1] == -INFINITY) --end;
    bool plain = true;
    for (int64_t t = first; t < end && plain; ++t) plain = m[t] == 0.0f;
    out[(size_t)s] = {(int32_t)first, (int32_t)end, plain};
  }
}

constexpr int kAvx2AttentionRows = 8;
// AVX2's block; a block of at most 4 rows with head size below 32 runs it on AVX-512 CPUs too.
void AttentionBlockAvx2(const float* q, const float* k, const float* v, float* out, const AttentionDims& a,
                        int64_t h, int64_t row0, std::vector<float>& scratch);

}  // namespace prism
