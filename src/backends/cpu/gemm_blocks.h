// Template-tier CPU GEMM over GGUF's other block formats (K-quants, Q4_1/Q5_x, IQ4): AVX2 dequantization.
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace prism {

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), as GemmRows, for W in a type of
// ir/quant_formats.h with K a multiple of its block. Needs AVX2 (GemmAvx2Supported). Few activation
// rows (decode): weight blocks are dequantized into L1 a 256-value chunk at a time and consumed at
// once. Many rows (prefill): a panel of weight rows is dequantized once to f32 and multiplied by
// GemmRows over every activation row. Products and sums in f32; the dequantized weights may differ
// from the reference by the rounding of one fused multiply-add.
void GemmRowsBlockFormat(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                         int64_t n_total, int64_t n_begin, int64_t n_end);

// Dequantizes `blocks` whole blocks of type wt into out (AVX2), for tests and the prefill panels.
void DequantizeBlocksAvx2(const void* w, DType wt, int64_t blocks, float* out);

// The rounded form for Q4_K and Q6_K weights (AVX2): activation rows rounded as llama.cpp's Q8_K
// (int8 per 256 values, scale max|a| / 127), then integer dot products. Its bound on one output's
// error (activation row a against weight row n): sum over blocks of (max|a| / 254) * sum |w|.
bool BlockQ8KSupported(DType wt, int64_t k);
void GemmRowsBlockQ8K(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                      int64_t n_total, int64_t n_begin, int64_t n_end);
double BlockQ8KErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n);

}  // namespace prism
