// Template-tier CPU micro-kernels for bf16 weights as AVX512_BF16 dot products (vdpbf16ps) against an
// activation rounded to bf16 once per call: over weight rows as stored, or over weights packed in panels.
#include "backends/cpu/gemm_bf16.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ir/error.h"

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

// MR activation rows (bf16 pairs, lda values apart) x one panel's 32 columns over kps pairs of K; stores
// columns [c0, c1) of the tile.
template <int MR>
PRISM_BF16 void PanelTile(const uint16_t* a, int64_t lda, const uint16_t* panel, int64_t kps, float* y,
                          int64_t ldy, int c0, int c1) {
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < kps; ++kp) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(panel + kp * 64);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(panel + kp * 64 + 32);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + i * lda + 2 * kp, 4);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, w0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, w1);
    }
  }
  const uint32_t cols = (c1 - c0 == 32 ? ~0u : ((1u << (c1 - c0)) - 1)) << c0;
  const __mmask16 lo = (__mmask16)(cols & 0xffff), hi = (__mmask16)(cols >> 16);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, lo, acc[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, hi, acc[i][1]);
  }
}

PRISM_BF16 void GemmPanelsBf16(const uint16_t* a, int64_t lda, int64_t m, const Bf16PanelWeight& w, float* y,
                               int64_t n_total, int64_t n_begin, int64_t n_end) {
  const int64_t kps = (w.k + 1) / 2;
  const uint16_t* packed = reinterpret_cast<const uint16_t*>(w.data.get());
  for (int64_t p = n_begin / kBf16PanelCols; p * kBf16PanelCols < n_end; ++p) {
    const int64_t base = p * kBf16PanelCols;
    const int c0 = (int)(std::max(n_begin, base) - base),
              c1 = (int)(std::min(n_end, base + kBf16PanelCols) - base);
    const uint16_t* panel = packed + p * kps * 64;
    // y's columns start at `base`: the tile's masked stores write [base + c0, base + c1) only.
    for (int64_t i = 0; i < m; i += 8) {
      const uint16_t* ai = a + i * lda;
      float* yi = y + i * n_total + base;
      switch (std::min<int64_t>(8, m - i)) {
        case 8: PanelTile<8>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
        case 7: PanelTile<7>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
        case 6: PanelTile<6>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
        case 5: PanelTile<5>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
        case 4: PanelTile<4>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
        case 3: PanelTile<3>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
        case 2: PanelTile<2>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
        default: PanelTile<1>(ai, lda, panel, kps, yi, n_total, c0, c1); break;
      }
    }
  }
}

// The activation rows rounded to bf16, lda = K rounded up to 32 values (zeros past K).
const uint16_t* RoundedRows(const float* a, int64_t m, int64_t k, int64_t* lda) {
  *lda = (k + 31) / 32 * 32;
  thread_local std::vector<uint16_t> act;
  act.resize((size_t)(m * *lda));
  for (int64_t i = 0; i < m; ++i) RoundRow(a + i * k, k, act.data() + i * *lda);
  return act.data();
}

}  // namespace

bool Bf16DotSupported() { return HasBf16(); }

Bf16PanelWeight PackBf16Panels(const uint16_t* w, int64_t n, int64_t k) {
  if (!HasBf16() || n <= 0 || k <= 0) throw Error("bf16 dot panels: this CPU has no AVX512_BF16");
  Bf16PanelWeight p;
  p.n = n;
  p.k = k;
  p.panels = (n + kBf16PanelCols - 1) / kBf16PanelCols;
  const int64_t kps = (k + 1) / 2;
  p.bytes = (size_t)(p.panels * kps * kBf16PanelCols * 2 * sizeof(uint16_t));
  p.data = AllocateWeightMemory(p.bytes, "bf16 dot panels: packed weights");  // zeroed
  uint16_t* dst = reinterpret_cast<uint16_t*>(p.data.get());
  for (int64_t col = 0; col < n; ++col) {
    uint16_t* panel = dst + (col / kBf16PanelCols) * kps * 64 + (col % kBf16PanelCols) * 2;
    const uint16_t* row = w + col * k;
    for (int64_t kp = 0; kp < k / 2; ++kp) std::memcpy(panel + kp * 64, row + 2 * kp, 4);  // a pair at once
    if (k % 2) panel[(k / 2) * 64] = row[k - 1];
  }
  return p;
}

void GemmBf16Panels(const float* a, int64_t m, const Bf16PanelWeight& w, float* y, int64_t n_total,
                    int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  int64_t lda = 0;
  const uint16_t* act = RoundedRows(a, m, w.k, &lda);
  GemmPanelsBf16(act, lda, m, w, y, n_total, n_begin, n_end);
}

void GemmRowsBf16Dot(const float* a, int64_t m, int64_t k, const uint16_t* w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0 || k <= 0) return;
  // Every thread rounds the activation itself: it is small next to the weights it meets.
  int64_t lda = 0;
  const uint16_t* act = RoundedRows(a, m, k, &lda);
  GemmBf16(act, lda, m, k, w, y, n_total, n_begin, n_end);
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
