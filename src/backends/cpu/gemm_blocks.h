// Template-tier CPU GEMM over GGUF's other block formats (K-quants, Q4_1/Q5_x, IQ4): AVX2 dequantization.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/dtype.h"

namespace prism {

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), as GemmRows, for W in a type of
// ir/quant_formats.h with K a multiple of its block. Needs AVX2 (GemmAvx2Supported). One or two
// activation rows (decode): each group of 32 weights is widened in registers and dotted with the
// activation, its scale applied to the sum and its min to the activation's per-16 sums. More rows
// (prefill): a panel of weight rows is dequantized once to f32 and multiplied by GemmRows over every
// activation row. Products and sums in f32, in an order other than the reference's.
void GemmRowsBlockFormat(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                         int64_t n_total, int64_t n_begin, int64_t n_end);

// Dequantizes `blocks` whole blocks of type wt into out (AVX2), for tests and the prefill panels.
void DequantizeBlocksAvx2(const void* w, DType wt, int64_t blocks, float* out);

// The rounded form for Q4_K and Q6_K weights (AVX2; gemm_q8k_vnni.h on AVX-512): activation rows rounded as
// llama.cpp's Q8_K (int8 per 256 values, scale max|a| / 127), then integer dot products. Its bound on one
// output's error (activation row a against weight row n): sum over blocks of (max|a| / 254) * sum |w|.
bool BlockQ8KSupported(DType wt, int64_t k);
void GemmRowsBlockQ8K(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                      int64_t n_total, int64_t n_begin, int64_t n_end);
double BlockQ8KErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n);

// Activation rows as llama.cpp's Q8_K rounds them: per 256 values, scale d = max|a| / 127 (NaN for a
// block holding a NaN or infinity) and q = round(a / d) in int8, with the per-16 and per-32 sums of q
// (for the formats' offsets and mins). Row i's block b is entry i * k / 256 + b.
struct Q8KRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> bsum16;  // 16 per block
  std::vector<int16_t> bsum32;  // 8 per block
  // The values again with the middle two 32-value pieces of every 128 swapped (0-31, 64-95, 32-63,
  // 96-127): the order the AVX-512 Q4_K kernel's 64-byte weight loads meet them (PrepareQ8KVnni).
  std::vector<int8_t> q4k;
};
void QuantizeQ8K(const float* a, int64_t m, int64_t k, Q8KRows* out);

}  // namespace prism
