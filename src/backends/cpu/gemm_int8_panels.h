// Template-tier CPU GEMM for many activation rows over quantized weights (Q8_0, Q4_0, and GGUF's
// block formats: K-quants, Q4_1/Q5_x, IQ4) as AVX512-VNNI integer dot products, one column per lane.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/dtype.h"

namespace prism {

// True when this CPU has AVX512-BW/VL and AVX512-VNNI, the type is Q8_0, Q4_0 or a block format of
// ir/quant_formats.h, and K is whole storage blocks.
bool Int8PanelsSupported(DType wt, int64_t k);

// Activation rows from which the panels beat the one-row int8 forms: 2 for the formats the panels keep as
// nibbles (a tile computes only the rows it holds, and 2 rows already share each decoded weight: Q4_K at 2
// rows 0.23 against q8k's 0.52 ms, 16384x2048 on Zen 5, bench/gemm_forms.cpp), 6 for those kept as bytes,
// whose panels stream more bytes than their storage (Q6_K's lost up to 3 rows).
int64_t Int8PanelsMinRows(DType wt);

// Weights (GGUF blocks, N x K) as panels of 32 columns, 32 values of K at a time: the values as bytes
// 0..255 (4-value steps x 32 columns; nibbles, two columns to a byte, for the formats whose values are
// below 16: Q4_0, Q4_1, Q4_K, Q2_K, Q3_K), then the 32 columns' f32 scales and offsets (value = scale *
// q - offset, exactly; per 16 values for Q2_K, Q3_K and Q6_K, per 32 for the others; Q4_0 and Q8_0 keep
// their f16 scales alone, the offset a fixed multiple of them), Int8PanelBytes in all (zero-padded past N).
size_t Int8PanelBytes(DType wt, int64_t n, int64_t k);
void PackPanelsInt8(const void* w, DType wt, int64_t n, int64_t k, uint8_t* out);

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), the activations rounded to 8 bits per
// 32 values exactly as the one-row int8 form rounds them (QuantizeActivationBlock), so each output
// is within Int8DotErrorBound of the exact sum. Threads split N at multiples of 32. K is taken in slices
// of slice_blocks 32-value blocks (0: kInt8PanelSlice), each slice's panels passed by every row tile while
// they stay in cache; any slice gives the same sums in the same order, only the speed differs.
// act_block 256 (formats of 256-value super-blocks, Int8PanelsGroupSupported; slices of whole 8 blocks): the
// activations rounded per 256 values instead, as llama.cpp's Q8_K rounds them (within Int8DotErrorBound for
// blocks of 256), so that each 16- or 32-value sum takes one multiply-add by its weight scale and the row's
// scale applies once per 256 values: Q6_K's tile did two multiplies per 16 values.
void GemmPanelsInt8(const float* a, int64_t m, const uint8_t* panels, DType wt, int64_t k, float* y,
                    int64_t n_total, int64_t n_begin, int64_t n_end, int64_t slice_blocks = 0,
                    int64_t act_block = 32);
bool Int8PanelsGroupSupported(DType wt, int64_t k);

// The default slice, and the others the search times for a reduction of k values: a longer slice stores
// and reloads the outputs fewer times (the 1B shape's head, 16 rows: 6.6-6.8 ms at 64 blocks against
// 7.3-7.6 at 32), a shorter one keeps less of each panel in flight (16384 x 8192: 3.2 ms at 16 or 64
// against 3.7-3.8 at 32, 2 threads, Zen 5).
constexpr int64_t kInt8PanelSlice = 64;
std::vector<int64_t> Int8PanelSliceChoices(int64_t k);

}  // namespace prism
