// Template-tier CPU GEMM for many activation rows (prefill): weights repacked once into panels of
// 32 output columns, K-major; activation rows are repacked in tiles of 12 (or a searched 8 or 14) per block
// of K and half-precision panels widened to f32 once per block, so a 12 x 32 register tile does 24 FMAs per
// two weight loads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/weight_memory.h"
#include "ir/dtype.h"

namespace prism {

// f32, f16 or bf16 weights (N x K, row-major) as panels: panel p holds columns [32p, 32p + 32) as
// K rows of 32 values in the weights' own dtype (zero-padded past N). Same bytes as the weights,
// rounded up to whole panels.
struct PanelPackedWeight {
  DType type = DType::F32;
  int64_t n = 0, k = 0, panels = 0;
  size_t bytes = 0;  // all of data
  WeightMemory data{nullptr, nullptr};
};

constexpr int64_t kPanelCols = 32;

// True when this CPU has AVX-512 (F, BW, VL; F16C for f16) and the dtype is a plain float type, or
// AVX512-VNNI and the dtype is quantized (GemmPanelsInt8: activations rounded to 8 bits).
bool PanelGemmSupported(DType wt);

PanelPackedWeight PackPanels(const void* w, DType wt, int64_t n, int64_t k);

// Where GemmPanels reads A: row-major [m, k] (group 0), or K-major in groups of `group` rows (a points at
// the whole activation, [rows / group, k, group]) with A's row i at its row first + i; float weights only.
struct PanelActivation {
  int64_t group = 0, first = 0;
};

// Rows [m0, m1) x K values [k0, k0 + kb) of a row-major A (rows lda apart) into tiles of MR rows, K-major (a
// tile's MR values of one k together, as a register tile of MR rows broadcasts them), zero past m1.
template <int MR>
void PackActivationTiles(const float* a, int64_t lda, int64_t m0, int64_t m1, int64_t k0, int64_t kb,
                         float* ap) {
  for (int64_t i0 = m0; i0 < m1; i0 += MR, ap += kb * MR)
    for (int i = 0; i < MR; ++i) {
      const float* row = i0 + i < m1 ? a + (i0 + i) * lda + k0 : nullptr;
      for (int64_t kk = 0; kk < kb; ++kk) ap[kk * MR + i] = row ? row[kk] : 0.0f;
    }
}

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), exactly as the reference (f32
// products and sums) for float weights; quantized ones round the activations (Int8DotErrorBound).
// Threads should split N at multiples of kPanelCols (quantized weights require it).
// param, a template parameter the search varies: for quantized weights the K-slice of GemmPanelsInt8, for
// float ones the register tile's rows (PanelTileRowsChoices); 0: the default. It changes only the speed.
// bias (float weights only; null: none): bias[n] added to each output as it is stored, after its sum (as
// an epilogue adding it would).
void GemmPanels(const float* a, int64_t m, const PanelPackedWeight& w, float* y, int64_t n_total,
                int64_t n_begin, int64_t n_end, PanelActivation layout = {}, int64_t param = 0,
                const float* bias = nullptr);
// The register tile's rows offered besides the default (12) for float weights: {8, 14}; none for others.
std::vector<int64_t> PanelTileRowsChoices(DType wt);

}  // namespace prism
