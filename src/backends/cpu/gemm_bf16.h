// Template-tier CPU micro-kernels for bf16 weights as AVX512_BF16 dot products: the activation is
// rounded to bf16 on the way in, so one instruction multiplies and adds 32 weight values. Two forms:
// weight rows as stored (few activation rows), and weights packed in panels (many rows).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/weight_memory.h"

namespace prism {

// True when this CPU has AVX512_BF16 (and AVX512-BW for the masked tails).
bool Bf16DotSupported();

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end): A f32 (M x K), W bf16 (N x K).
// Each output's error is bounded by the activation rounding: |dy| <= 2^-8 sum_k |A[m,k] W[n,k]|,
// plus f32 accumulation.
void GemmRowsBf16Dot(const float* a, int64_t m, int64_t k, const uint16_t* w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end);

// bf16 weights (N x K) packed for GemmBf16Panels: panel p holds columns [32p, 32p + 32) as ceil(K / 2)
// rows of 32 pairs, pair (kp, c) = (W[32p + c, 2kp], W[32p + c, 2kp + 1]) (zero past N and K): one row
// is two registers of vdpbf16ps's weight operand.
struct Bf16PanelWeight {
  int64_t n = 0, k = 0, panels = 0;
  size_t bytes = 0;
  WeightMemory data{nullptr, nullptr};
};
constexpr int64_t kBf16PanelCols = 32;
Bf16PanelWeight PackBf16Panels(const uint16_t* w, int64_t n, int64_t k);

// As GemmRowsBf16Dot (the same rounding, the same bound) over packed weights: 8 activation rows x 32
// columns per register tile, the activation's pairs broadcast, no horizontal sums. Threads split N at
// multiples of kBf16PanelCols.
void GemmBf16Panels(const float* a, int64_t m, const Bf16PanelWeight& w, float* y, int64_t n_total,
                    int64_t n_begin, int64_t n_end);

// That bound for one output: activation row a (K values) against bf16 weight row n of w.
double Bf16DotErrorBound(const float* a, const uint16_t* w, int64_t k, int64_t n);

}  // namespace prism
