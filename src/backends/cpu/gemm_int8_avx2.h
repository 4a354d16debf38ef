// Template-tier CPU GEMM for Q8_0, Q4_0, Q4_K and Q6_K weights on AVX2 machines: the activation rounded to 8
// bits per 32 values (as the AVX-512 int8 forms and llama.cpp's Q8_0 round it), then integer dot products
// (vpmaddubsw) over weights repacked 8 rows to a tile, one scale product per block and 8 rows.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/weight_memory.h"
#include "ir/dtype.h"

namespace prism {

// True on the AVX2 tier (AVX2, FMA, F16C; no AVX-512 templates, or PRISM_GEMM_ISA=avx2) for Q8_0, Q4_0, Q4_K
// and Q6_K weights over whole blocks.
bool Int8Avx2Supported(DType wt, int64_t k);

// Q8_0 or Q4_0 weights (N x K) in tiles of 8 rows (the last one padded with zero rows): block by block, the
// 8 rows' f16 scales, then their values in groups of 4 bytes (8 rows' bytes 0-3, then 4-7, ...), so that one
// 32-bit lane of a vector is one row's and the 4 activation bytes they meet are broadcast. As many bytes as
// GGUF's rows but for the padding; a thread's share is one sequential stream. Q4_0's nibbles are summed
// against the activation as unsigned bytes (vpmaddubsw takes one unsigned operand) and 8 times the
// activation's sum taken off once per block for all 8 rows. Q4_K per 256 values: the 8 rows' d and dmin,
// their 6-bit scales and mins unpacked to bytes, then each 32-value sub-block's nibbles laid out as Q4_0's (4
// bytes more per row and super-block than GGUF's 144). Q6_K per 256 values: the 8 rows' d and signed scales,
// then per 32 values their low nibbles as Q4_0's and their high 2 bits; its values enter vpmaddubsw unsigned
// (0-63) and 32 times the activation's sums, times each 16-value sub-block's scale, are taken off. For more
// than 4 activation rows a call expands each Q6_K tile once to signed bytes (values less 32) and meets the
// activation plus 128 instead, with the same integer sums.
struct Int8Avx2PackedWeight {
  DType type = DType::Q8_0;
  int64_t n = 0, k = 0;
  size_t bytes = 0;  // all of data
  WeightMemory data{nullptr, nullptr};
};
constexpr int64_t kInt8Avx2TileRows = 8;

// Packs Q8_0 or Q4_0 (k a multiple of 32) or Q4_K or Q6_K weights (k a multiple of 256) as above.
Int8Avx2PackedWeight PackForInt8Avx2(const void* w, DType wt, int64_t n, int64_t k);

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), W packed by PackForInt8Avx2, each activation
// block rounded by QuantizeActivationBlock's rule: within Int8DotErrorBound of the exact sum. `prefetch` is
// how far ahead of its loads the first pass over each tile prefetches the weights into L1, in bytes: 0 for
// the default (2 KiB), kInt8NoPrefetch (gemm_int8.h) for none. It changes the speed, never the sums.
void GemmRowsInt8Avx2(const float* a, int64_t m, const Int8Avx2PackedWeight& w, float* y, int64_t n_total,
                      int64_t n_begin, int64_t n_end, int64_t prefetch = 0);

// The prefetch distances the search times besides the default (none where the form is not offered).
std::vector<int64_t> Int8Avx2PrefetchChoices(DType wt, int64_t k);

}  // namespace prism
