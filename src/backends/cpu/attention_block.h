// The ISA kernels behind attention.cpp: one block of (query, group head) rows of one K/V head.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/attention.h"

namespace prism {

// Rows [row0, row0 + rows per block) of head h (row r: query r / group, group head r % group) into out.
using AttentionBlockFn = void (*)(const float* q, const float* k, const float* v, float* out,
                                  const AttentionDims& a, int64_t h, int64_t row0,
                                  std::vector<float>& scratch);

constexpr int kAvx2AttentionRows = 8;
void AttentionBlockAvx2(const float* q, const float* k, const float* v, float* out, const AttentionDims& a,
                        int64_t h, int64_t row0, std::vector<float>& scratch);

}  // namespace prism
