// The ISA kernels behind attention.cpp: one block of (query, group head) rows of one K/V head.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/attention.h"

namespace prism {

// Rows [row0, row0 + rows per block) of head h (row r: query r / group, group head r % group) into out.
using AttentionBlockFn = void (*)(const float* q, const float* k, const float* v, float* out,
                                  const AttentionDims& a, int64_t h, int64_t row0,
                                  std::vector<float>& scratch);

// What both block kernels set up first: row r of the block (query (row0 + r) / group, group head
// (row0 + r) % group) sees keys [0, n[r]); `qt` [D][R] holds the queries transposed and pre-scaled (rows
// past the block's zero) and `p` [keys][R] the room for scores. Returns the block's rows.
struct BlockSetup {
  int rows;
  int64_t keys;  // max n[r]
  float *qt, *p;
};
template <int R>
BlockSetup SetUpBlock(const float* q, const AttentionDims& a, int64_t h, int64_t row0, int32_t* n,
                      std::vector<float>& scratch) {
  const int64_t G = a.group, D = a.head_dim, HD = a.heads_kv * D;
  BlockSetup b{(int)std::min<int64_t>(R, a.seq * G - row0), 0, nullptr, nullptr};
  for (int r = 0; r < R; ++r) {
    n[r] = r < b.rows ? (int32_t)std::clamp<int64_t>((row0 + r) / G + a.offset, 0, a.total) : 0;
    b.keys = std::max<int64_t>(b.keys, n[r]);
  }
  scratch.resize((size_t)(D + b.keys) * R);
  b.qt = scratch.data();
  b.p = b.qt + D * R;
  for (int64_t e = 0; e < D; ++e)
    for (int r = 0; r < R; ++r) {
      const int64_t s = (row0 + r) / G, g = (row0 + r) % G;
      b.qt[e * R + r] = r < b.rows ? q[s * G * HD + (h * G + g) * D + e] * a.scale : 0.0f;
    }
  return b;
}

constexpr int kAvx2AttentionRows = 8;
void AttentionBlockAvx2(const float* q, const float* k, const float* v, float* out, const AttentionDims& a,
                        int64_t h, int64_t row0, std::vector<float>& scratch);

}  // namespace prism
