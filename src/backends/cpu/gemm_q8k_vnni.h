// The q8k form (Q4_K/Q6_K weights as stored, activations rounded as llama.cpp's Q8_K) on AVX512-VNNI.
#pragma once

#include <cstdint>

#include "backends/cpu/gemm_blocks.h"
#include "ir/dtype.h"

namespace prism {

// True when this CPU has AVX512-BW/VL and AVX512-VNNI and AVX-512 templates are enabled
// (PRISM_GEMM_ISA); GemmRowsBlockQ8K then runs this kernel instead of its AVX2 ones.
bool Q8KVnniSupported();

// Lays act's values out as well for the Q4_K kernel (Q8KRows::q4k); once per activation, before
// DotRowsQ8KVnni reads Q4_K weights.
void PrepareQ8KVnni(DType wt, Q8KRows* act);

// Activation rows [i0, i0 + rows) of act (rows 1 to 4) against one Q4_K or Q6_K weight row of K
// values: out[i * ldo] for row i0 + i. The same integer sums as the AVX2 kernels, in another order,
// so within the same bound.
void DotRowsQ8KVnni(DType wt, const uint8_t* row, int64_t k, const Q8KRows& act, int64_t i0, int rows,
                    float* out, int64_t ldo);

}  // namespace prism
