// Template-tier CPU GEMM for Q8_0 and Q4_0 weights on AVX2 machines: the activation rounded to 8 bits per
// 32 values (as the AVX-512 int8 forms and llama.cpp round it), then integer dot products on the weights as
// stored (vpmaddubsw), one scale product per block.
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace prism {

// True on the AVX2 tier (AVX2, FMA, F16C; no AVX-512 templates, or PRISM_GEMM_ISA=avx2) for Q8_0 and Q4_0
// weights over whole blocks.
bool Int8Avx2Supported(DType wt, int64_t k);

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), W as stored (N x K, GGUF blocks), each
// activation block rounded by QuantizeActivationBlock's rule: within Int8DotErrorBound of the exact sum.
void GemmRowsInt8Avx2(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                      int64_t n_total, int64_t n_begin, int64_t n_end);

}  // namespace prism
