// Template-tier CPU micro-kernels: Y = A · Wᵀ for an f32 activation A and a weight W in any dtype.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/dtype.h"

namespace prism {

// Revision of the template kernels, part of every tuning-database key: bump it when a template's
// speed changes, so decisions measured against the old kernels are searched again.
constexpr int kTemplateRevision = 21;

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), all m < M.
// A: M x K f32 row-major; W: N x K in dtype wt (f32, f16, bf16, q8_0, q4_0; K % 32 == 0 for
// quantized types); Y: M x N f32 row-major. Threads split the N range: weights are read once.
// gemv_rows, a template parameter the search varies: in a one-row product over f32/f16/bf16 weights with
// the AVX-512 or AVX2 kernels, how many weight rows are read at once: 1, one row as a single stream with a
// software prefetch; 2, two rows, one from each half of the range, as two streams; 4, four rows as four
// streams (the next four prefetched on AVX-512); 0, DefaultGemvRows. Which is faster depends on the CPU's
// prefetchers (GemvRowsChoices); the products are exact either way (the order of the sums differs).
void GemmRows(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
              int64_t n_begin, int64_t n_end, int64_t gemv_rows = 0);
// What gemv_rows 0 means over weights of type wt: with the AVX-512 kernels one row on AMD, two on Intel
// (their prefetchers differ); with the AVX2 kernels two rows, four for f32.
int64_t DefaultGemvRows(DType wt);
// The values of gemv_rows offered besides the default for m activation rows over weights of type wt: the
// other two counts for one row of plain float weights on the AVX-512 or AVX2 kernels, none otherwise.
std::vector<int64_t> GemvRowsChoices(DType wt, int64_t m);

// True on an Intel CPU: the decode kernels' defaults follow the maker, whose hardware prefetchers differ (the
// one-row gemv_rows here; the int8 rows' prefetch in gemm_int8.cpp).
bool IntelPrefetchers();

// Which instruction set the micro-kernels use on this CPU ("avx512", "avx2" or "scalar"): the best
// it has, or a lower one named by the environment variable PRISM_GEMM_ISA (avx2, scalar).
const char* GemmIsa();
// False when PRISM_GEMM_ISA or the CPU rules out the AVX-512 template forms (rounded, panels).
bool Avx512TemplatesEnabled();

// True if GemmRows supports this weight dtype and reduction size.
bool GemmSupports(DType wt, int64_t k);

// The template's rounded-activation form, where this CPU and weight type have one: the activation
// is rounded so that integer (Q8_0, Q4_0: AVX512-VNNI on 8-bit blocks) or bf16 (BF16: AVX512_BF16)
// dot-product instructions apply. Its name in receipts ("int8", "bf16dot"), and the bound on one
// output's error that the rounding allows (activation row a against weight row n).
bool RoundedActivationSupported(DType wt, int64_t k);
const char* RoundedActivationName(DType wt);
double RoundedActivationErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n);

}  // namespace prism
