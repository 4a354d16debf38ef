// Template-tier CPU micro-kernels: Y = A · Wᵀ for an f32 activation A and a weight W in any dtype.
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace prism {

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), all m < M.
// A: M x K f32 row-major; W: N x K in dtype wt (f32, f16, bf16, q8_0, q4_0; K % 32 == 0 for
// quantized types); Y: M x N f32 row-major. Threads split the N range: weights are read once.
void GemmRows(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
              int64_t n_begin, int64_t n_end);

// Which instruction set the micro-kernels use on this CPU ("avx512", "avx2" or "scalar").
const char* GemmIsa();

// True if GemmRows supports this weight dtype and reduction size.
bool GemmSupports(DType wt, int64_t k);

}  // namespace prism
