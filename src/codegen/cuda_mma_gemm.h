// A tensor-core GEMM template for CUDA (sm_80+): out = a * w^T with bf16 weights, mma.sync bf16.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/kernel_ir.h"

namespace prism {

// out[m, n] = sum_k a[m, k] * w[n, k] for a f32 [M, K], w bf16 [N, K], out f32 [M, N]: a block of
// kCudaMmaThreads threads computes a 64 x 64 tile of out with mma.sync.m16n8k16 (bf16 inputs, f32
// accumulation); a is rounded to bf16 (nearest even) as it is staged in shared memory. Any M, N, K
// (edges are zero-filled). N and K are compile-time constants of the function.
constexpr int kCudaMmaThreads = 128;

// True when kernel k is a GemmTemplate with f32 activations, bf16 weights and an f32 output.
bool CudaMmaGemmApplies(const KernelProgram& p, const Kernel& k);

std::string CudaMmaGemmName(int64_t n, int64_t k);  // "prism_mma_bf16_n<N>_k<K>"
// The function (needs the CUDA prelude of GpuRenderer before it). Arguments: (float* out, const
// float* a, const uint16_t* w, int64_t M).
std::string CudaMmaGemmSource(int64_t n, int64_t k);
int64_t CudaMmaGemmBlocks(int64_t m, int64_t n);  // blocks to launch (one per 64 x 64 tile)

// Largest error rounding a row of a to bf16 can add to out[m, n]: 2^-8 * sum_k |a[m, k] w[n, k]|
// (one rounding of each activation, relative error at most 2^-9, doubled for the f32 sum's order).
double CudaMmaGemmErrorBound(const float* a_row, const uint16_t* w_row, int64_t k);

}  // namespace prism
