// A tensor-core GEMM template for CUDA (sm_80+): out = a * w^T with bf16 weights, mma.sync bf16.
//
// Block: 4 warps as 2 x 2, each computing a 32 x 32 piece of the 64 x 64 tile as 2 x 4 fragments
// of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32. Per step of 32 along K, the block stages
// a (f32 -> bf16) and w (bf16) tiles in shared memory, rows padded to 40 elements so the fragment
// loads (32-bit words at row g, column 2 * t) hit 32 distinct banks. Fragment layouts are those of
// the PTX ISA for m16n8k16 (.bf16): A rows g and g + 8, columns 2t..2t+1 and 2t+8..2t+9; B (= w
// rows, as w is [N, K]) column g, rows 2t..2t+1 and 2t+8..2t+9; C rows g and g + 8, columns 2t, 2t+1.
#include "codegen/cuda_mma_gemm.h"

#include <cmath>

#include "ir/dtype.h"

namespace prism {

bool CudaMmaGemmApplies(const KernelProgram& p, const Kernel& k) {
  return k.gemm && !k.gemm->epilogue && k.gemm->index_buffer < 0 &&
         p.buffers[k.gemm->a_buffer].dtype == DType::F32 &&
         p.buffers[k.gemm->w_buffer].dtype == DType::BF16 && p.buffers[k.out_buffer].dtype == DType::F32;
}

std::string CudaMmaGemmName(int64_t n, int64_t k) {
  return "prism_mma_bf16_n" + std::to_string(n) + "_k" + std::to_string(k);
}

int64_t CudaMmaGemmBlocks(int64_t m, int64_t n) { return ((m + 63) / 64) * ((n + 63) / 64); }

std::string CudaMmaGemmSource(int64_t n, int64_t k) {
  std::string s = R"(
extern "C" __global__ void __launch_bounds__(128) NAME(float* __restrict__ out, const float* __restrict__ a,
                                                      const uint16_t* __restrict__ w, const int64_t M) {
  const int64_t N = NVAL, K = KVAL;
  __shared__ __align__(16) uint16_t As[64][40];
  __shared__ __align__(16) uint16_t Ws[64][40];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, t2 = (lane & 3) * 2;
  const int64_t tiles_n = (N + 63) / 64;
  const int64_t m0 = (int64_t)blockIdx.x / tiles_n * 64, n0 = (int64_t)blockIdx.x % tiles_n * 64;
  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int idx = tid + i * 128, r = idx >> 5, c = idx & 31;
      const int64_t gm = m0 + r, gn = n0 + r, gk = k0 + c;
      const bool kin = K % 32 == 0 || gk < K;
      As[r][c] = gm < M && kin ? prism_f2bf(a[gm * K + gk]) : (uint16_t)0;
      Ws[r][c] = gn < N && kin ? w[gn * K + gk] : (uint16_t)0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 32; kk += 16) {
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = wm * 32 + i * 16 + g;
        af[i][0] = *(const uint32_t*)&As[r][kk + t2];
        af[i][1] = *(const uint32_t*)&As[r + 8][kk + t2];
        af[i][2] = *(const uint32_t*)&As[r][kk + t2 + 8];
        af[i][3] = *(const uint32_t*)&As[r + 8][kk + t2 + 8];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = wn * 32 + j * 8 + g;
        bf[j][0] = *(const uint32_t*)&Ws[c][kk + t2];
        bf[j][1] = *(const uint32_t*)&Ws[c][kk + t2 + 8];
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
              "{%8, %9}, {%0, %1, %2, %3};\n"
              : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
              : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = m0 + wm * 32 + i * 16 + g, c = n0 + wn * 32 + j * 8 + t2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t rr = r + h * 8;
        if (rr >= M) continue;
        if (c < N) out[rr * N + c] = acc[i][j][2 * h];
        if (c + 1 < N) out[rr * N + c + 1] = acc[i][j][2 * h + 1];
      }
    }
}
)";
  auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  };
  replace("NAME", CudaMmaGemmName(n, k));
  replace("NVAL", std::to_string(n) + "ll");
  replace("KVAL", std::to_string(k) + "ll");
  return s;
}

double CudaMmaGemmErrorBound(const float* a_row, const uint16_t* w_row, int64_t k) {
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += std::fabs((double)a_row[i] * BF16ToFloat(w_row[i]));
  return sum * std::ldexp(1.0, -8);
}

}  // namespace prism
