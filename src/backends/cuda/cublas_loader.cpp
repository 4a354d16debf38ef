// cuBLAS through dlopen: the four entry points are declared in cublas_loader.h, so building needs
// no CUDA toolkit and a machine without cuBLAS simply has no library GEMM tier.
#include "backends/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "backends/cuda/toolkit_library.h"
#include "codegen/cuda_mma_gemm.h"
#include "ir/error.h"

namespace prism {
namespace {

struct Loaded {
  CublasApi api;
  std::string error;
};

const Loaded& Load() {
  static std::once_flag once;
  static Loaded l;
  std::call_once(once, [] {
    std::string tried, first_error;
    void* lib = nullptr;
    for (const std::string& c : ToolkitLibraryCandidates(
             "PRISM_CUBLAS", {"libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"},
             "libcublas.so", {"lib64", "lib"})) {
      lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib && dlsym(lib, "cublasGemmEx")) {
        l.api.library = c;
        break;
      }
      if (!lib && first_error.empty())
        if (const char* e = dlerror()) first_error = e;
      if (lib) dlclose(lib);
      lib = nullptr;
      tried += (tried.empty() ? "" : ", ") + c;
    }
    if (!lib) {
      l.error = "cannot load libcublas (tried " + tried + (first_error.empty() ? "" : "; " + first_error) +
                "; set PRISM_CUBLAS to libcublas.so)";
      return;
    }
    auto sym = [&](const char* name) -> void* {
      void* p = dlsym(lib, name);
      if (!p && l.error.empty()) l.error = l.api.library + " lacks " + name;
      return p;
    };
    CublasApi& a = l.api;
    a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2"));
    a.set_stream = reinterpret_cast<decltype(a.set_stream)>(sym("cublasSetStream_v2"));
    a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx"));
  });
  return l;
}

}  // namespace

const CublasApi* LoadCublas(std::string* why) {
  const Loaded& l = Load();
  if (why) *why = l.error;
  return l.error.empty() ? &l.api : nullptr;
}

std::string CublasStatusName(int status) {
  switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "cuBLAS status " + std::to_string(status);
}

bool CublasGemmTakes(DType w) { return w == DType::F32 || w == DType::BF16 || w == DType::F16; }

// cuBLAS is column-major: C (m x n, leading dimension ldc) = op(A) (m x k) * op(B) (k x n), where
// a matrix X with leading dimension ld has X(i, j) at X[i + j * ld].
//
// Row-major y[M, N] with y[r][c] at y[r * N + c] is, read column-major with ld N, the N x M matrix
// Y^T (Y^T(c, r) = y[r * N + c]). Likewise row-major w[N, K] is the K x N column-major matrix W^T
// (ld K) and row-major a[M, K] the K x M matrix A^T (ld K). y = a * w^T transposes to
// Y^T = W * A^T, so:
//   C = y as N x M, ldc = N          (m = N, n = M)
//   op(A) = W (N x K): A is the buffer w (K x N, lda = K) with transa = T    (k = K)
//   op(B) = A^T (K x M): B is the buffer a (K x M, ldb = K) with transb = N
// Check, element (i = c, j = r): C[c + r * N] = y[r][c] = sum_k op(A)(c, k) op(B)(k, r)
//   = sum_k A[k + c * K] * B[k + r * K] = sum_k w[c][k] * a[r][k].  (tests/cuda_test.cpp checks this
// with a host column-major GEMM.)
CublasGemmCall CublasRowMajorGemm(DType w, int64_t m, int64_t n, int64_t k) {
  if (!CublasGemmTakes(w))
    throw Error("cublas: " + std::string(DTypeName(w)) + " weights are not taken (f32, bf16 and f16 are)");
  for (int64_t v : {m, n, k})
    if (v < 0 || v > INT_MAX)
      throw Error("cublas: GEMM " + std::to_string(m) + " x " + std::to_string(n) + " x " +
                  std::to_string(k) + " has a size beyond an int");
  CublasGemmCall c;
  c.transa = kCublasOpT;
  c.transb = kCublasOpN;
  c.m = (int)n;
  c.n = (int)m;
  c.k = (int)k;
  c.lda = c.ldb = std::max((int)k, 1);
  c.ldc = std::max((int)n, 1);
  c.a_type = c.b_type = w == DType::F32 ? kCudaR32F : w == DType::BF16 ? kCudaR16BF : kCudaR16F;
  c.c_type = kCudaR32F;  // f32 output, f32 accumulation for every weight dtype
  c.compute = kCublasCompute32F;
  return c;
}

std::string CublasConvertSource() {
  return R"(
extern "C" __global__ void prism_cublas_f32_to_bf16(uint16_t* __restrict__ out, const float* __restrict__ in,
                                                    const int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = prism_f2bf(in[i]);
}
extern "C" __global__ void prism_cublas_f32_to_f16(uint16_t* __restrict__ out, const float* __restrict__ in,
                                                   const int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = prism_f2h(in[i]);
}
)";
}

std::string CublasConvertName(DType to) {
  return to == DType::BF16 ? "prism_cublas_f32_to_bf16" : "prism_cublas_f32_to_f16";
}

double CublasGemmErrorBound(DType w, const float* a_row, const void* w_row, int64_t k) {
  const uint16_t* w16 = static_cast<const uint16_t*>(w_row);
  if (w == DType::BF16) return CudaMmaGemmErrorBound(a_row, w16, k);
  if (w != DType::F16) return 0;
  double rel = 0, sub = 0;
  for (int64_t i = 0; i < k; ++i) {
    double wv = std::fabs((double)HalfToFloat(w16[i]));
    rel += std::fabs((double)a_row[i]) * wv;
    sub += wv;
  }
  return rel * std::ldexp(1.0, -10) + sub * std::ldexp(1.0, -24);
}

}  // namespace prism
