// Template-tier CPU GEMM for x86-64 CPUs without AVX-512: the rows form with AVX2, FMA and F16C.
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace prism {

// True when this CPU has AVX2, FMA and F16C.
bool GemmAvx2Supported();

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), as GemmRows (same operands and
// dtypes: f32, f16, bf16, q8_0, q4_0 with K % 32 == 0 for the quantized ones), f32 products and sums.
// gemv_rows as GemmRows's, resolved (1, 2 or 4; anything else means 4): one row of float weights at a time,
// two, or the four-row tiles.
void GemmRowsAvx2(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
                  int64_t n_begin, int64_t n_end, int64_t gemv_rows = 4);

}  // namespace prism
