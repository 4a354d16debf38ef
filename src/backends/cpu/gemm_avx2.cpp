// Template-tier CPU micro-kernels for AVX2 machines: register tiles of 2 activation rows x 4 weight
// rows in 8-wide vectors, weights widened to f32 in registers, and the one-row product's one- and two-stream
// forms (the AVX-512 kernels' rows form and gemv_rows).
#include "backends/cpu/gemm_avx2.h"

#include <immintrin.h>

#include <algorithm>

namespace prism {
namespace {

#define PRISM_AVX2 __attribute__((target("avx2,fma,f16c")))

PRISM_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// 8 plain weights of a row from element kk, as f32.
template <DType T>
PRISM_AVX2 inline __m256 Load8(const uint8_t* row, int64_t kk) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + kk);
  } else {
    __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + kk));
    if constexpr (T == DType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// The 32 raw (unscaled) values of a quantized block as four vectors of 8; returns the block scale.
template <DType T>
PRISM_AVX2 inline __m256 LoadBlock(const uint8_t* blk, __m256 (&v)[4]) {
  const uint8_t* qs = blk + 2;
  if constexpr (T == DType::Q8_0) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
      v[q] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * q))));
  } else {  // q4_0: low nibbles are values 0..15, high nibbles 16..31, both offset by 8
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
    const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
    const __m256i fifteen = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
    v[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(lo, fifteen), eight));
    v[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(hi, fifteen), eight));
    v[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(lo, 4), eight));
    v[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(hi, 4), eight));
  }
  return _mm256_set1_ps(_cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk)));
}

// MR activation rows x NR weight rows into y (rows ldy apart).
template <DType T, int MR, int NR>
PRISM_AVX2 void Tile(const float* a, int64_t lda, const uint8_t* w, int64_t rb, int64_t k, float* y,
                     int64_t ldy) {
  __m256 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t done = k;  // values covered by the vector loop; the rest (plain types only) is scalar
  if constexpr (T == DType::Q8_0 || T == DType::Q4_0) {
    constexpr int64_t kBlockBytes = T == DType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    for (int64_t kk = 0, blk = 0; kk < k; kk += 32, blk += kBlockBytes) {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        __m256 v[4];
        const __m256 d = LoadBlock<T>(w + j * rb + blk, v);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const float* ai = a + i * lda + kk;
          __m256 s = _mm256_mul_ps(_mm256_loadu_ps(ai), v[0]);
          s = _mm256_fmadd_ps(_mm256_loadu_ps(ai + 8), v[1], s);
          s = _mm256_fmadd_ps(_mm256_loadu_ps(ai + 16), v[2], s);
          s = _mm256_fmadd_ps(_mm256_loadu_ps(ai + 24), v[3], s);
          acc[i][j] = _mm256_fmadd_ps(s, d, acc[i][j]);
        }
      }
    }
  } else {
    done = k / 8 * 8;
    for (int64_t kk = 0; kk < done; kk += 8) {
      __m256 wv[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) wv[j] = Load8<T>(w + j * rb, kk);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 av = _mm256_loadu_ps(a + i * lda + kk);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(av, wv[j], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float s = Hsum(acc[i][j]);
      for (int64_t kk = done; kk < k; ++kk) s += a[i * lda + kk] * (float)LoadAsDouble(w + j * rb, T, kk);
      y[i * ldy + j] = s;
    }
}

// One activation row (decode) against one row of plain weights read as a single stream: 64 values (8
// accumulators) per step, software prefetch 4 KiB ahead (the AVX-512 kernels' one-row form). The four-row
// tiles gave each thread four streams that restart at every row: a row of 2-byte weights is often one 4 KiB
// page, where the hardware prefetcher stops.
template <DType T>
PRISM_AVX2 float DotRow(const uint8_t* row, const float* a, int64_t k) {
  constexpr int64_t kAhead = 4096, elem = T == DType::F32 ? 4 : 2;
  __m256 acc[8];
#pragma GCC unroll 8
  for (auto& v : acc) v = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 64 <= k; kk += 64) {
#pragma GCC unroll 4
    for (int line = 0; line < elem; ++line)  // 64 values: elem cache lines
      _mm_prefetch((const char*)row + kk * elem + kAhead + 64 * line, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      acc[j] = _mm256_fmadd_ps(Load8<T>(row, kk + 8 * j), _mm256_loadu_ps(a + kk + 8 * j), acc[j]);
  }
  for (; kk + 8 <= k; kk += 8) acc[0] = _mm256_fmadd_ps(Load8<T>(row, kk), _mm256_loadu_ps(a + kk), acc[0]);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) acc[j] = _mm256_add_ps(acc[j], acc[j + 4]);
  float s = Hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; kk < k; ++kk) s += a[kk] * (float)LoadAsDouble(row, T, kk);
  return s;
}

// One activation row against two weight rows read in lockstep: a thread's rows cut in two halves, each a
// single sequential stream across its rows, 32 values of each per step, software prefetch 1 KiB ahead in
// each (the AVX-512 kernels' two-row form).
template <DType T>
PRISM_AVX2 void DotTwoRows(const uint8_t* const (&rows)[2], const float* a, int64_t k, float* const (&y)[2]) {
  constexpr int64_t kAhead = 1024, elem = T == DType::F32 ? 4 : 2;
  __m256 acc[2][4];
#pragma GCC unroll 2
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& v : row) v = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 32 <= k; kk += 32)
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s) {
#pragma GCC unroll 2
      for (int line = 0; line < elem / 2; ++line)  // 32 values: elem / 2 cache lines
        _mm_prefetch((const char*)rows[s] + kk * elem + kAhead + 64 * line, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
        acc[s][j] =
            _mm256_fmadd_ps(Load8<T>(rows[s], kk + 8 * j), _mm256_loadu_ps(a + kk + 8 * j), acc[s][j]);
    }
  for (; kk + 8 <= k; kk += 8)
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s)
      acc[s][0] = _mm256_fmadd_ps(Load8<T>(rows[s], kk), _mm256_loadu_ps(a + kk), acc[s][0]);
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s) {
    float sum = Hsum(_mm256_add_ps(_mm256_add_ps(acc[s][0], acc[s][1]), _mm256_add_ps(acc[s][2], acc[s][3])));
    for (int64_t t = kk; t < k; ++t) sum += a[t] * (float)LoadAsDouble(rows[s], T, t);
    *y[s] = sum;
  }
}

template <DType T, int NR>
PRISM_AVX2 void TileRows(int mr, const float* a, int64_t lda, const uint8_t* w, int64_t rb, int64_t k,
                         float* y, int64_t ldy) {
  if (mr == 2) return Tile<T, 2, NR>(a, lda, w, rb, k, y, ldy);
  Tile<T, 1, NR>(a, lda, w, rb, k, y, ldy);
}

template <DType T>
PRISM_AVX2 void Gemm(const float* a, int64_t m, int64_t k, const void* w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end, int64_t gemv_rows) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = StorageBytes(T, k);
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {
    if (m == 1 && gemv_rows == 2) {  // the halves' rows in pairs, an odd count's last row alone
      const int64_t half = (n_end - n_begin) / 2;
      for (int64_t n = n_begin; n < n_begin + half; ++n)
        DotTwoRows<T>({wb + n * rb, wb + (n + half) * rb}, a, k, {y + n, y + n + half});
      if ((n_end - n_begin) % 2) y[n_end - 1] = DotRow<T>(wb + (n_end - 1) * rb, a, k);
      return;
    }
    if (m == 1 && gemv_rows == 1) {
      for (int64_t n = n_begin; n < n_end; ++n) y[n] = DotRow<T>(wb + n * rb, a, k);
      return;
    }
  }
  constexpr int64_t kMBlock = 64;  // activation rows kept hot in cache while weight tiles stream
  for (int64_t m0 = 0; m0 < m; m0 += kMBlock) {
    const int64_t m1 = std::min(m, m0 + kMBlock);
    for (int64_t n = n_begin; n < n_end; n += 4) {
      const int nr = (int)std::min<int64_t>(4, n_end - n);
      for (int64_t i = m0; i < m1; i += 2) {
        const int mr = (int)std::min<int64_t>(2, m1 - i);
        const float* ai = a + i * k;
        const uint8_t* wn = wb + n * rb;
        float* yi = y + i * n_total + n;
        switch (nr) {
          case 4: TileRows<T, 4>(mr, ai, k, wn, rb, k, yi, n_total); break;
          case 3: TileRows<T, 3>(mr, ai, k, wn, rb, k, yi, n_total); break;
          case 2: TileRows<T, 2>(mr, ai, k, wn, rb, k, yi, n_total); break;
          default: TileRows<T, 1>(mr, ai, k, wn, rb, k, yi, n_total); break;
        }
      }
    }
  }
}

}  // namespace

bool GemmAvx2Supported() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}

void GemmRowsAvx2(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
                  int64_t n_begin, int64_t n_end, int64_t gemv_rows) {
  if (n_begin >= n_end || m <= 0) return;
  switch (wt) {
    case DType::F32: return Gemm<DType::F32>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::F16: return Gemm<DType::F16>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::BF16: return Gemm<DType::BF16>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::Q8_0: return Gemm<DType::Q8_0>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::Q4_0: return Gemm<DType::Q4_0>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    default: break;
  }
}

}  // namespace prism
