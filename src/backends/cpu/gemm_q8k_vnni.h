// The q8k form (Q4_K/Q6_K weights as stored, activations rounded as llama.cpp's Q8_K) on AVX512-VNNI.
#pragma once

#include <cstdint>

#include "backends/cpu/gemm_blocks.h"
#include "ir/dtype.h"

namespace prism {

// True when this CPU has AVX512-BW/VL and AVX512-VNNI and AVX-512 templates are enabled
// (PRISM_GEMM_ISA); GemmRowsBlockQ8K then runs these kernels instead of its AVX2 ones.
bool Q8KVnniSupported();

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end) over A already rounded (act), W Q4_K or
// Q6_K (N x K); the same integer sums as the AVX2 kernels, in another order, so within the same bound.
void GemmQ8KVnni(const Q8KRows& act, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
                 int64_t n_begin, int64_t n_end);

}  // namespace prism
