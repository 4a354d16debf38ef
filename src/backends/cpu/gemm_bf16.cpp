// Template-tier CPU micro-kernel for bf16 weights as AVX512_BF16 dot products (vdpbf16ps) against an
// activation rounded to bf16 once per call.
#include "backends/cpu/gemm_bf16.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace prism {
namespace {

#define PRISM_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

bool HasBf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return has;
}

// Mask of the first n (<= 32) 16-bit lanes.
inline __mmask32 Lanes(int64_t n) { return n >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << n) - 1); }

// One activation row rounded to bf16 (nearest even), zero-padded to a multiple of 32 values.
PRISM_BF16 void RoundRow(const float* a, int64_t k, uint16_t* out) {
  for (int64_t kk = 0; kk < k; kk += 32) {
    int64_t left = k - kk;
    __mmask16 m0 = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    __mmask16 m1 = left >= 32 ? (__mmask16)0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
    __m512 lo = _mm512_maskz_loadu_ps(m0, a + kk), hi = _mm512_maskz_loadu_ps(m1, a + kk + 16);
    _mm512_storeu_si512(out + kk, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// MR activation rows x NR weight rows; the last partial 32 values of a weight row load masked. When
// next is given, the same offsets of the next tile's weight rows are prefetched (a 2048-value row is
// one 4 KiB page, where the hardware prefetcher stops).
template <int MR, int NR>
PRISM_BF16 void Tile(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t k, float* y, int64_t ldy,
                     const uint16_t* next) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; kk += 32) {
    const __mmask32 mask = Lanes(k - kk);
    if (next)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) _mm_prefetch((const char*)(next + j * k + kk), _MM_HINT_T0);
    __m512bh wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + j * k + kk);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512bh av = (__m512bh)_mm512_loadu_si512(a + i * lda + kk);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, wv[j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

template <int NR>
PRISM_BF16 void TileRows(int mr, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t k, float* y,
                         int64_t ldy, const uint16_t* next) {
  switch (mr) {
    case 4: return Tile<4, NR>(a, lda, w, k, y, ldy, next);
    case 3: return Tile<3, NR>(a, lda, w, k, y, ldy, next);
    case 2: return Tile<2, NR>(a, lda, w, k, y, ldy, next);
    default: return Tile<1, NR>(a, lda, w, k, y, ldy, next);
  }
}

PRISM_BF16 void GemmBf16(const uint16_t* a, int64_t lda, int64_t m, int64_t k, const uint16_t* w, float* y,
                         int64_t n_total, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kMBlock = 64;  // activation rows kept hot in cache while weight tiles stream
  for (int64_t m0 = 0; m0 < m; m0 += kMBlock) {
    int64_t m1 = std::min(m, m0 + kMBlock);
    for (int64_t n = n_begin; n < n_end; n += 4) {
      int nr = (int)std::min<int64_t>(4, n_end - n);
      for (int64_t i = m0; i < m1; i += 4) {
        int mr = (int)std::min<int64_t>(4, m1 - i);
        const uint16_t* ai = a + i * lda;
        const uint16_t* wn = w + n * k;
        float* yi = y + i * n_total + n;
        const uint16_t* next = i + 4 >= m1 && n + 4 < n_end ? wn + 4 * k : nullptr;  // last pass over wn
        switch (nr) {
          case 4: TileRows<4>(mr, ai, lda, wn, k, yi, n_total, next); break;
          case 3: TileRows<3>(mr, ai, lda, wn, k, yi, n_total, next); break;
          case 2: TileRows<2>(mr, ai, lda, wn, k, yi, n_total, next); break;
          default: TileRows<1>(mr, ai, lda, wn, k, yi, n_total, next); break;
        }
      }
    }
  }
}

}  // namespace

bool Bf16DotSupported() { return HasBf16(); }

void GemmRowsBf16Dot(const float* a, int64_t m, int64_t k, const uint16_t* w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0 || k <= 0) return;
  // Every thread rounds the activation itself: it is small next to the weights it meets.
  const int64_t lda = (k + 31) / 32 * 32;
  thread_local std::vector<uint16_t> act;
  act.resize((size_t)(m * lda));
  for (int64_t i = 0; i < m; ++i) RoundRow(a + i * k, k, act.data() + i * lda);
  GemmBf16(act.data(), lda, m, k, w, y, n_total, n_begin, n_end);
}

double Bf16DotErrorBound(const float* a, const uint16_t* w, int64_t k, int64_t n) {
  double s = 0;
  for (int64_t kk = 0; kk < k; ++kk) {
    uint32_t bits = (uint32_t)w[n * k + kk] << 16;
    float wv;
    std::memcpy(&wv, &bits, 4);
    s += std::fabs((double)a[kk] * wv);
  }
  // Activation rounding (2^-8 relative), then f32 accumulation of up to k terms.
  return s * (std::ldexp(1.0, -8) + (double)k * std::ldexp(1.0, -23));
}

}  // namespace prism
