// Template-tier CPU micro-kernel for bf16 weights as AVX512_BF16 dot products: the activation is
// rounded to bf16 on the way in, so one instruction multiplies and adds 32 weight values.
#pragma once

#include <cstdint>

namespace prism {

// True when this CPU has AVX512_BF16 (and AVX512-BW for the masked tails).
bool Bf16DotSupported();

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end): A f32 (M x K), W bf16 (N x K).
// Each output's error is bounded by the activation rounding: |dy| <= 2^-8 sum_k |A[m,k] W[n,k]|,
// plus f32 accumulation.
void GemmRowsBf16Dot(const float* a, int64_t m, int64_t k, const uint16_t* w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end);

// That bound for one output: activation row a (K values) against bf16 weight row n of w.
double Bf16DotErrorBound(const float* a, const uint16_t* w, int64_t k, int64_t n);

}  // namespace prism
