// Template-tier CPU GEMM for many activation rows on AVX2 machines: weights as stored, decoded slice by
// slice (16 columns x 256 values of K) to f32 K-major, then 6 x 16 register tiles broadcast over them.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/gemm_panels.h"
#include "ir/dtype.h"

namespace prism {

// True on the AVX2 tier (AVX2, FMA, F16C; no AVX-512 templates, or PRISM_GEMM_ISA=avx2) for f32, f16,
// bf16 and every block-quantized type GemmRows takes, with K a whole number of blocks.
bool SliceGemmSupported(DType wt, int64_t k);

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), W as stored (N x K): f32 products of the
// weights decoded exactly to f32, summed over K in order. Each row block of `m_block` activation rows
// (0: the default) decodes every slice of the weights once. A is row-major, or K-major as `layout` says (an
// image's im2col), read where it lies. Threads should split N at multiples of kSliceCols.
void GemmSlicesAvx2(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
                    int64_t n_begin, int64_t n_end, int64_t m_block = 0, PanelActivation layout = {});

constexpr int64_t kSliceCols = 16;

// Row-block sizes the search may try besides the default, for m activation rows.
std::vector<int64_t> SliceRowBlockChoices(int64_t m);

}  // namespace prism
