// Template-tier CPU GEMM for many activation rows: 6 x 32 register tiles over K-major weight panels,
// each activation value broadcast against two vectors of 16 columns.
#include "backends/cpu/gemm_panels.h"

// GCC 12 warns inside its own AVX-512 conversion intrinsics (_mm512_cvtph_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ir/error.h"

namespace prism {
namespace {

#define PRISM_PANELS __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
  return has;
}

// 16 weights of a panel row as f32.
template <DType T>
PRISM_PANELS inline __m512 Load16(const uint8_t* p) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// MR activation rows x the 32 columns of one panel, over k values of K, added to y (MR rows of 32)
// unless first (then stored).
template <DType T, int MR>
PRISM_PANELS void Tile(const float* a, int64_t lda, const uint8_t* panel, int64_t k, float* y, bool first) {
  constexpr int64_t kRowBytes = kPanelCols * (T == DType::F32 ? 4 : 2);
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i * kPanelCols);
    acc[i][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i * kPanelCols + 16);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const uint8_t* row = panel + kk * kRowBytes;
    __m512 w0 = Load16<T>(row), w1 = Load16<T>(row + kRowBytes / 2);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512 av = _mm512_set1_ps(a[i * lda + kk]);
      acc[i][0] = _mm512_fmadd_ps(av, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(y + i * kPanelCols, acc[i][0]);
    _mm512_storeu_ps(y + i * kPanelCols + 16, acc[i][1]);
  }
}

template <DType T>
PRISM_PANELS void Gemm(const float* a, int64_t m, const PanelPackedWeight& w, float* y, int64_t n_total,
                       int64_t n_begin, int64_t n_end) {
  const int64_t k = w.k, row_bytes = kPanelCols * (T == DType::F32 ? 4 : 2), panel_bytes = k * row_bytes;
  // Blocks: 96 activation rows share a panel; 256 values of K keep that slice of the panel in L1
  // while every 6-row tile of the block passes over it.
  constexpr int64_t kMBlock = 96, kKBlock = 256;
  alignas(64) float sums[kMBlock * kPanelCols];
  for (int64_t m0 = 0; m0 < m; m0 += kMBlock) {
    int64_t m1 = std::min(m, m0 + kMBlock);
    for (int64_t n = n_begin, cols; n < n_end; n += cols) {
      const int64_t p = n / kPanelCols, first = n % kPanelCols;  // a split may start inside a panel
      cols = std::min(kPanelCols - first, n_end - n);
      for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
        const int64_t kb = std::min(kKBlock, k - k0);
        const uint8_t* panel = w.data.get() + p * panel_bytes + k0 * row_bytes;
        for (int64_t i = m0; i < m1; i += 6) {
          const int mr = (int)std::min<int64_t>(6, m1 - i);
          const float* ai = a + i * k + k0;
          float* si = sums + (i - m0) * kPanelCols;
          switch (mr) {
            case 6: Tile<T, 6>(ai, k, panel, kb, si, k0 == 0); break;
            case 5: Tile<T, 5>(ai, k, panel, kb, si, k0 == 0); break;
            case 4: Tile<T, 4>(ai, k, panel, kb, si, k0 == 0); break;
            case 3: Tile<T, 3>(ai, k, panel, kb, si, k0 == 0); break;
            case 2: Tile<T, 2>(ai, k, panel, kb, si, k0 == 0); break;
            default: Tile<T, 1>(ai, k, panel, kb, si, k0 == 0); break;
          }
        }
      }
      for (int64_t i = m0; i < m1; ++i)  // only the panel's columns in [n, n + cols) are kept
        std::memcpy(y + i * n_total + n, sums + (i - m0) * kPanelCols + first, (size_t)cols * sizeof(float));
    }
  }
}

}  // namespace

bool PanelGemmSupported(DType wt) {
  return HasAvx512() && (wt == DType::F32 || wt == DType::F16 || wt == DType::BF16);
}

PanelPackedWeight PackPanels(const void* w, DType wt, int64_t n, int64_t k) {
  if (!PanelGemmSupported(wt) || n <= 0 || k <= 0)
    throw Error("panel gemm: weights of type " + std::string(DTypeName(wt)) +
                " cannot be packed on this CPU");
  PanelPackedWeight p;
  p.type = wt;
  p.n = n;
  p.k = k;
  p.panels = (n + kPanelCols - 1) / kPanelCols;
  const int64_t elem = wt == DType::F32 ? 4 : 2;
  const size_t bytes = p.bytes = (size_t)(p.panels * k * kPanelCols * elem);
  p.data = {static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)), std::free};
  if (!p.data)
    throw Error("panel gemm: cannot allocate " + std::to_string(bytes) + " bytes for packed weights");
  std::memset(p.data.get(), 0, bytes);
  const uint8_t* src = static_cast<const uint8_t*>(w);
  for (int64_t col = 0; col < n; ++col) {
    uint8_t* dst = p.data.get() + (col / kPanelCols * k * kPanelCols + col % kPanelCols) * elem;
    for (int64_t kk = 0; kk < k; ++kk)
      std::memcpy(dst + kk * kPanelCols * elem, src + (col * k + kk) * elem, elem);
  }
  return p;
}

void GemmPanels(const float* a, int64_t m, const PanelPackedWeight& w, float* y, int64_t n_total,
                int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  switch (w.type) {
    case DType::F32: return Gemm<DType::F32>(a, m, w, y, n_total, n_begin, n_end);
    case DType::F16: return Gemm<DType::F16>(a, m, w, y, n_total, n_begin, n_end);
    default: return Gemm<DType::BF16>(a, m, w, y, n_total, n_begin, n_end);
  }
}

}  // namespace prism
