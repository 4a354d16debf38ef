// Template-tier CPU GEMM on AMX tiles (Intel Advanced Matrix Extensions) for many activation rows:
// bf16 weights against activations rounded to bf16, Q8_0/Q4_0 weights against activations quantized
// per 32-value block exactly as the int8 forms do, with weights repacked once into tile layout.
#pragma once

#include <cstdint>

#include "backends/cpu/weight_memory.h"
#include "ir/dtype.h"

namespace prism {

// Weights (N x K) as AMX B tiles, panels of 16 output columns (zero-padded to a whole number of
// 32-column blocks): bf16 as 16 x 32-value chunks of K (pairs of K values per column, 1 KiB a tile);
// Q8_0/Q4_0 as one 32-value block a tile (4 values per column, 512 bytes, signed) followed by the
// panel's 16 block scales as f32.
struct AmxPackedWeight {
  DType type = DType::BF16;
  int64_t n = 0, k = 0, chunks = 0, panels = 0;  // chunks: 32-value steps of K (padded with zeros)
  size_t bytes = 0;                              // all of data
  WeightMemory data{nullptr, nullptr};
};

// Output columns per block a thread takes: threads split N at multiples of it.
constexpr int64_t kAmxCols = 32;

// True when this CPU has AMX (tile, bf16, int8) and Linux let this process use the tile state.
bool AmxUsable();

// True when AmxUsable and the weight type and K suit the GEMM (bf16: any K; Q8_0, Q4_0: K a
// multiple of 32).
bool AmxGemmSupported(DType wt, int64_t k);

// Machine probes: `iters` rounds of six independent 16 x 16 tile products (bf16 pairs, or int8 quads
// over K = 64) on tile registers only; returns the operations done (2 per multiply-add). Needs
// AmxUsable.
double AmxPeakLoop(bool int8, int64_t iters);

AmxPackedWeight PackForAmx(const void* w, DType wt, int64_t n, int64_t k);

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end) (n_begin a multiple of kAmxCols). bf16
// weights: A rounded to bf16, each output within Bf16DotErrorBound; Q8_0/Q4_0: A quantized as
// GemmRowsInt8 does, within Int8DotErrorBound.
void GemmAmx(const float* a, int64_t m, const AmxPackedWeight& w, float* y, int64_t n_total, int64_t n_begin,
             int64_t n_end);

}  // namespace prism
