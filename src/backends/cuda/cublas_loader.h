// cuBLAS loaded at run time (dlopen, never linked): the entry points of the library GEMM tier.
#pragma once

#include <cstdint>
#include <string>

#include "ir/dtype.h"

namespace prism {

// Enum values of cublas_api.h and library_types.h (CUDA 11-13), declared here so that building
// needs no CUDA toolkit.
constexpr int kCublasOpN = 0, kCublasOpT = 1;
constexpr int kCudaR32F = 0, kCudaR16F = 2, kCudaR16BF = 14;
constexpr int kCublasCompute32F = 68;
constexpr int kCublasGemmDefault = -1;

// The cuBLAS entry points used (handles and streams as opaque pointers, statuses as ints).
struct CublasApi {
  std::string library;                                      // the file that loaded, e.g. "libcublas.so.13"
  int (*create)(void** handle) = nullptr;                   // cublasCreate_v2
  int (*destroy)(void* handle) = nullptr;                   // cublasDestroy_v2
  int (*set_stream)(void* handle, void* stream) = nullptr;  // cublasSetStream_v2
  // cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
  // ldc, computeType, algo)
  int (*gemm_ex)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                 const void*, void*, int, int, int, int) = nullptr;
};

// Loads libcublas once (PRISM_CUBLAS, then libcublas.so, .so.13, .so.12, .so.11); nullptr with a
// one-line reason in *why ("cannot load libcublas (tried ...)" or "<file> lacks <symbol>").
const CublasApi* LoadCublas(std::string* why = nullptr);
std::string CublasStatusName(int status);  // "CUBLAS_STATUS_NOT_INITIALIZED"

// Weight dtypes the tier takes: f32, bf16 and f16 (quantized formats are not offered).
bool CublasGemmTakes(DType w);

// The arguments of one cublasGemmEx call.
struct CublasGemmCall {
  int transa = kCublasOpN, transb = kCublasOpN;
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  int a_type = kCudaR32F, b_type = kCudaR32F, c_type = kCudaR32F;
  int compute = kCublasCompute32F;
};

// y[M, N] = a[M, K] * w[N, K]^T, all row-major, y and a f32, w of dtype w (f32, bf16, f16), as a
// call whose A operand is w and whose B operand is a (already converted to w's dtype when w is
// bf16 or f16). Throws prism::Error when w is not taken or a size does not fit an int.
CublasGemmCall CublasRowMajorGemm(DType w, int64_t m, int64_t n, int64_t k);

// Kernels converting f32 to bf16 / f16 (round to nearest even), after GpuRenderer's CUDA prelude.
// Arguments: (uint16_t* out, const float* in, int64_t n); any grid (grid-stride loop).
std::string CublasConvertSource();
std::string CublasConvertName(DType to);  // "prism_cublas_f32_to_bf16" or "prism_cublas_f32_to_f16"

// Largest error that rounding a row of a to w's dtype adds to y[m, n] (w_row: w's row n): 0 for
// f32; bf16 as the tensor-core template's (CudaMmaGemmErrorBound); f16: 2^-10 sum |a w| for normal
// values plus 2^-24 sum |w| for activations in f16's subnormal range. Activations beyond f16's range
// become infinities and get no allowance (the check then rejects the candidate).
double CublasGemmErrorBound(DType w, const float* a_row, const void* w_row, int64_t k);

}  // namespace prism
