// Template-tier CPU GEMM on AMX tiles (Intel Advanced Matrix Extensions) for many activation rows:
// bf16 weights against activations rounded to bf16; f32 and f16 weights split into two bf16 parts
// (hi + lo) against activations split likewise, three products each (near f32 accuracy); Q8_0/Q4_0
// weights against activations quantized per 32-value block exactly as the int8 forms do. Weights are
// repacked once into tile layout.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/weight_memory.h"
#include "ir/dtype.h"

namespace prism {

// Weights (N x K) as AMX B tiles, panels of 16 output columns (zero-padded to a whole number of
// 32-column blocks): bf16 as 16 x 32-value chunks of K (pairs of K values per column, 1 KiB a tile);
// f32/f16 likewise, a hi tile and a lo tile per chunk; Q8_0/Q4_0 as one 32-value block a tile (4
// values per column, 512 bytes, signed) followed by the panel's 16 block scales as f32.
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

// True when AmxUsable and the weight type and K suit the GEMM (f32, f16, bf16: any K; Q8_0, Q4_0: K
// a multiple of 32).
bool AmxGemmSupported(DType wt, int64_t k);

// The bound on one output's error (activation row a against weight row n of w, as stored): bf16
// weights Bf16DotErrorBound, Q8_0/Q4_0 Int8DotErrorBound, f32/f16 sum |a w| x (2^-14 + 3K 2^-24).
double AmxErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n);

// Machine probes: `iters` rounds of six independent 16 x 16 tile products (bf16 pairs, or int8 quads
// over K = 64) on tile registers only; returns the operations done (2 per multiply-add). Needs
// AmxUsable.
double AmxPeakLoop(bool int8, int64_t iters);

AmxPackedWeight PackForAmx(const void* w, DType wt, int64_t n, int64_t k);

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end) (n_begin a multiple of kAmxCols), each
// output within AmxErrorBound.
void GemmAmx(const float* a, int64_t m, const AmxPackedWeight& w, float* y, int64_t n_total, int64_t n_begin,
             int64_t n_end);

// The same in two steps, so that a team rounds the activation once between them instead of once per
// thread (rounding a 512 x 8192 activation took 1 ms, a tenth of each thread's GEMM): size the buffers
// (AmxActivationFit, before the team starts), round share `part` of `parts` of the rows each, then,
// once every share is done, multiply.
struct AmxActivation {
  std::vector<uint8_t> values;  // A tiles (bf16, split bf16 pairs, or int8)
  std::vector<float> scales;    // int8: per row and block
};
void AmxActivationFit(AmxActivation* act, int64_t m, const AmxPackedWeight& w);
void AmxActivationRound(const float* a, int64_t m, const AmxPackedWeight& w, int part, int parts,
                        AmxActivation* act);
void GemmAmxRounded(const AmxActivation& act, int64_t m, const AmxPackedWeight& w, float* y, int64_t n_total,
                    int64_t n_begin, int64_t n_end);

}  // namespace prism
