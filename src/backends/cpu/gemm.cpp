// Template-tier CPU micro-kernels: Y = A · Wᵀ for an f32 activation A and a weight W in any dtype.
// AVX-512 register-blocked tiles (4 activation rows x 4 weight rows) with weights converted to f32
// in registers, chosen at run time by CPU feature detection; AVX2 (gemm_avx2.cpp) or scalar elsewhere.
#include "backends/cpu/gemm.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cpu/gemm_avx2.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/gemm_blocks.h"
#include "backends/cpu/gemm_int8.h"
#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

constexpr bool IsQuantizedType(DType t) { return t == DType::Q8_0 || t == DType::Q4_0; }

// Byte offset of weight row n for each storage type.
int64_t RowBytes(DType t, int64_t k) { return StorageBytes(t, k); }

float LoadScalar(const uint8_t* row, DType t, int64_t kk) { return (float)LoadAsDouble(row, t, kk); }

void GemmScalar(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
                int64_t n_begin, int64_t n_end) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = RowBytes(wt, k);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* row = wb + n * rb;
    for (int64_t i = 0; i < m; ++i) {
      float s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += a[i * k + kk] * LoadScalar(row, wt, kk);
      y[i * n_total + n] = s;
    }
  }
}

#define PRISM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

// 16 plain (f32/f16/bf16) weights starting at element kk of a row, as f32; mask covers a tail.
template <DType T>
PRISM_AVX512 inline __m512 LoadW16(const uint8_t* row, int64_t kk, __mmask16 mask) {
  if constexpr (T == DType::F32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + kk);
  } else if constexpr (T == DType::F16) {
    __m256i h = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + kk);
    return _mm512_cvtph_ps(h);
  } else {  // bf16
    __m256i h = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + kk);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// One quantized 32-element block as two f32 vectors of raw (unscaled) values; returns the scale.
template <DType T>
PRISM_AVX512 inline __m512 LoadBlock(const uint8_t* blk, __m512* lo, __m512* hi) {
  if constexpr (T == DType::Q8_0) {
    *lo =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
    *hi =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
  } else {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m512i eight = _mm512_set1_epi32(8);
    *lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(b, _mm512_set1_epi32(15)), eight));
    *hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 4), eight));
  }
  return _mm512_set1_ps(_cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk)));
}

// Plain (f32/f16/bf16) weights, 16 at a time with a masked tail. When next is given, the same
// offsets of the next tile's weight rows are prefetched: a row of 2-byte weights is often one 4 KiB
// page, where the hardware prefetcher stops, and a GEMV is a stream of such rows.
template <DType T, int MR, int NR>
PRISM_AVX512 inline void TilePlain(const float* a, int64_t lda, const uint8_t* w, int64_t row_bytes,
                                   int64_t k, __m512 (&acc)[MR][NR], const uint8_t* next) {
  constexpr int64_t elem = T == DType::F32 ? 4 : 2;
  for (int64_t kk = 0; kk < k; kk += 16) {
    __mmask16 mask = k - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - kk)) - 1);
    if (next)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) _mm_prefetch((const char*)next + j * row_bytes + kk * elem, _MM_HINT_T0);
    __m512 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = LoadW16<T>(w + j * row_bytes, kk, mask);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512 av = _mm512_maskz_loadu_ps(mask, a + i * lda + kk);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(av, wv[j], acc[i][j]);
    }
  }
}

// MR activation rows x NR weight rows; acc[i][j] holds 16 partial sums of y[i, j].
template <DType T, int MR, int NR>
PRISM_AVX512 void Tile(const float* a, int64_t lda, const uint8_t* w, int64_t row_bytes, int64_t k, float* y,
                       int64_t ldy, const uint8_t* next) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  if constexpr (IsQuantizedType(T)) {
    // Whole blocks: the block's dot product in raw values, then one multiply by its scale.
    constexpr int64_t kBlockBytes = T == DType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    for (int64_t kk = 0, blk = 0; kk < k; kk += 32, blk += kBlockBytes) {
      if (next)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) _mm_prefetch((const char*)next + j * row_bytes + blk, _MM_HINT_T0);
      __m512 lo[NR], hi[NR], d[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) d[j] = LoadBlock<T>(w + j * row_bytes + blk, &lo[j], &hi[j]);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        __m512 a0 = _mm512_loadu_ps(a + i * lda + kk), a1 = _mm512_loadu_ps(a + i * lda + kk + 16);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j)
          acc[i][j] = _mm512_fmadd_ps(_mm512_fmadd_ps(a1, hi[j], _mm512_mul_ps(a0, lo[j])), d[j], acc[i][j]);
      }
    }
  } else {
    TilePlain<T, MR, NR>(a, lda, w, row_bytes, k, acc, next);
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

template <DType T, int NR>
PRISM_AVX512 void TileRows(int mr, const float* a, int64_t lda, const uint8_t* w, int64_t rb, int64_t k,
                           float* y, int64_t ldy, const uint8_t* next) {
  switch (mr) {
    case 4: return Tile<T, 4, NR>(a, lda, w, rb, k, y, ldy, next);
    case 3: return Tile<T, 3, NR>(a, lda, w, rb, k, y, ldy, next);
    case 2: return Tile<T, 2, NR>(a, lda, w, rb, k, y, ldy, next);
    default: return Tile<T, 1, NR>(a, lda, w, rb, k, y, ldy, next);
  }
}

// One activation row (decode) against plain weights: one weight row at a time, read as a single
// stream, 128 values (8 accumulators) per step, software prefetch 4 KiB ahead. Four rows at once (the
// tiles above) gave the hardware prefetcher four short streams per thread: from DRAM, on a Zen 5 EPYC,
// 14-27 GB/s on one thread and 27 on two against 30 and 47 this way (f16); 8 accumulators instead of
// 4 read f32 at 41-43 GB/s against 36-37 on two threads.
template <DType T>
PRISM_AVX512 float DotRowPlain(const uint8_t* row, const float* a, int64_t k) {
  constexpr int64_t kAhead = 4096, elem = T == DType::F32 ? 4 : 2;
  __m512 acc[8];
#pragma GCC unroll 8
  for (auto& v : acc) v = _mm512_setzero_ps();
  int64_t kk = 0;
  for (; kk + 128 <= k; kk += 128) {
#pragma GCC unroll 8
    for (int line = 0; line < 2 * elem; ++line)  // 128 values: 2 x elem cache lines
      _mm_prefetch((const char*)row + kk * elem + kAhead + 64 * line, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      acc[j] = _mm512_fmadd_ps(LoadW16<T>(row, kk + 16 * j, 0xffff), _mm512_loadu_ps(a + kk + 16 * j), acc[j]);
  }
  for (; kk < k; kk += 16) {
    const __mmask16 mask = k - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - kk)) - 1);
    acc[0] = _mm512_fmadd_ps(LoadW16<T>(row, kk, mask), _mm512_maskz_loadu_ps(mask, a + kk), acc[0]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) acc[j] = _mm512_add_ps(acc[j], acc[j + 4]);
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// One activation row against two weight rows read in lockstep (gemv_rows 2): a thread's rows cut in two
// halves, each a single sequential stream across its rows, 64 values of each per step, software prefetch
// 1 KiB ahead in each. Two streams per thread are what a plain read needs for the memory's full rate on
// Intel (DefaultGemvRows).
template <DType T>
PRISM_AVX512 void DotTwoRows(const uint8_t* const (&rows)[2], const float* a, int64_t k,
                             float* const (&y)[2]) {
  constexpr int64_t kAhead = 1024, elem = T == DType::F32 ? 4 : 2;
  __m512 acc[2][4];
#pragma GCC unroll 2
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& v : row) v = _mm512_setzero_ps();
  int64_t kk = 0;
  for (; kk + 64 <= k; kk += 64)
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s) {
#pragma GCC unroll 4
      for (int line = 0; line < elem; ++line)  // 64 values: elem cache lines
        _mm_prefetch((const char*)rows[s] + kk * elem + kAhead + 64 * line, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
        acc[s][j] = _mm512_fmadd_ps(LoadW16<T>(rows[s], kk + 16 * j, 0xffff),
                                    _mm512_loadu_ps(a + kk + 16 * j), acc[s][j]);
    }
  for (; kk < k; kk += 16) {
    const __mmask16 mask = k - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - kk)) - 1);
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s)
      acc[s][0] =
          _mm512_fmadd_ps(LoadW16<T>(rows[s], kk, mask), _mm512_maskz_loadu_ps(mask, a + kk), acc[s][0]);
  }
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s)
    *y[s] = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[s][0], acc[s][1]), _mm512_add_ps(acc[s][2], acc[s][3])));
}

template <DType T>
PRISM_AVX512 void GemmAvx512(const float* a, int64_t m, int64_t k, const void* w, float* y, int64_t n_total,
                             int64_t n_begin, int64_t n_end, int64_t gemv_rows) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = RowBytes(T, k);
  if constexpr (!IsQuantizedType(T)) {
    if (m == 1 && gemv_rows == 2) {  // the halves' rows in pairs, an odd count's last row alone
      const int64_t half = (n_end - n_begin) / 2;
      for (int64_t n = n_begin; n < n_begin + half; ++n)
        DotTwoRows<T>({wb + n * rb, wb + (n + half) * rb}, a, k, {y + n, y + n + half});
      if ((n_end - n_begin) % 2) y[n_end - 1] = DotRowPlain<T>(wb + (n_end - 1) * rb, a, k);
      return;
    }
    if (m == 1 && gemv_rows == 1) {
      for (int64_t n = n_begin; n < n_end; ++n) y[n] = DotRowPlain<T>(wb + n * rb, a, k);
      return;
    }
    // gemv_rows 4: the tiles below, four weight rows at once
  }
  constexpr int64_t kMBlock = 64;  // activation rows kept hot in cache while weight tiles stream
  for (int64_t m0 = 0; m0 < m; m0 += kMBlock) {
    int64_t m1 = std::min(m, m0 + kMBlock);
    for (int64_t n = n_begin; n < n_end; n += 4) {
      int nr = (int)std::min<int64_t>(4, n_end - n);
      for (int64_t i = m0; i < m1; i += 4) {
        int mr = (int)std::min<int64_t>(4, m1 - i);
        const float* ai = a + i * k;
        const uint8_t* wn = wb + n * rb;
        float* yi = y + i * n_total + n;
        // The last activation tile over these weight rows fetches the next rows ahead.
        // (f32 rows span whole pages, which the hardware prefetcher follows better alone).
        const uint8_t* next = T != DType::F32 && i + 4 >= m1 && n + 4 < n_end ? wn + 4 * rb : nullptr;
        switch (nr) {
          case 4: TileRows<T, 4>(mr, ai, k, wn, rb, k, yi, n_total, next); break;
          case 3: TileRows<T, 3>(mr, ai, k, wn, rb, k, yi, n_total, next); break;
          case 2: TileRows<T, 2>(mr, ai, k, wn, rb, k, yi, n_total, next); break;
          default: TileRows<T, 1>(mr, ai, k, wn, rb, k, yi, n_total, next); break;
        }
      }
    }
  }
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}

enum class Isa { Scalar, Avx2, Avx512 };

// The best micro-kernels this CPU runs, or lower ones named by PRISM_GEMM_ISA (avx2, scalar): the
// fallbacks can then be run and timed on a bigger machine.
Isa ActiveIsa() {
  static const Isa isa = [] {
    Isa best = HasAvx512() ? Isa::Avx512 : GemmAvx2Supported() ? Isa::Avx2 : Isa::Scalar;
    const char* env = std::getenv("PRISM_GEMM_ISA");
    std::string want = env ? env : "";
    if (want == "avx2" && best >= Isa::Avx2) return Isa::Avx2;
    if (want == "scalar") return Isa::Scalar;
    return best;
  }();
  return isa;
}

}  // namespace

bool IntelPrefetchers() {
  static const bool intel = __builtin_cpu_is("intel");
  return intel;
}

// Which gemv_rows 0 means. With the AVX-512 kernels it follows the CPU's maker: one row on AMD (the
// one-row form's comment), two on Intel. On an Intel Xeon with AMX the four rows had read 100-105% of
// a plain read of the same bytes against the one row's 81-96%
// (`prism_gemm_bench 1 8192 2048 10 2 cold f16,bf16,f32`) and decoded the 1B shape in bf16 and f16 5-15%
// faster (three alternations of `prism bench FILE -p 1 -n 32 -t 2 -r 2`); the two rows then decoded it
// faster again (the same, the builds before and after alternated twice): f16 12.0-12.6 -> 13.5-13.7 tokens/s,
// bf16 12.4-12.6 -> 13.5-13.7, f32 6.4 -> 6.7-6.8 (one thread, f16, 6.3 -> 6.9). A plain read there reached
// 34.5 GB/s as two streams per thread 1 KiB ahead, 30 as one.
// With the AVX2 kernels (Zen 3, 2 threads, `prism_gemm_bench 1 8192 2048 10 2 cold f32,f16,bf16` and
// `1 2048 8192 20 2`, five runs on a noisy host) the one row was the slowest form in all runs but one (a
// tie); the two rows read f16 and bf16 weights fastest in 9 of 10 (f16 12.2-21.8 GB/s against the four
// rows' 10.2-16.6), the four rows f32 in 4 of 5 (13.1-20.3 against 12.2-19.2).
int64_t DefaultGemvRows(DType wt) {
  if (ActiveIsa() == Isa::Avx2) return wt == DType::F32 ? 4 : 2;
  return IntelPrefetchers() ? 2 : 1;
}

const char* GemmIsa() {
  switch (ActiveIsa()) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "scalar";
  }
}

bool Avx512TemplatesEnabled() { return ActiveIsa() == Isa::Avx512; }

bool GemmSupports(DType wt, int64_t k) {
  switch (wt) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return k > 0;
    case DType::Q8_0:
    case DType::Q4_0: return k > 0 && k % kQuantBlock == 0;
    default: return IsQuantized(wt) && k > 0 && k % BlockElems(wt) == 0;
  }
}

void GemmRows(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
              int64_t n_begin, int64_t n_end, int64_t gemv_rows) {
  if (gemv_rows != 0 && gemv_rows != 1 && gemv_rows != 2 && gemv_rows != 4)
    throw Error("GemmRows: gemv_rows must be 0, 1, 2 or 4, got " + std::to_string(gemv_rows));
  if (n_begin >= n_end || m <= 0) return;
  if (IsBlockFormat(wt)) {  // K-quants, Q4_1/Q5_x, IQ4: the AVX2 kernels on any x86 with vectors
    if (ActiveIsa() != Isa::Scalar && GemmSupports(wt, k))
      return GemmRowsBlockFormat(a, m, k, w, wt, y, n_total, n_begin, n_end);
    return GemmScalar(a, m, k, w, wt, y, n_total, n_begin, n_end);
  }
  if (gemv_rows == 0) gemv_rows = DefaultGemvRows(wt);
  if (ActiveIsa() == Isa::Avx2 && GemmSupports(wt, k))
    return GemmRowsAvx2(a, m, k, w, wt, y, n_total, n_begin, n_end, gemv_rows);
  if (ActiveIsa() != Isa::Avx512) return GemmScalar(a, m, k, w, wt, y, n_total, n_begin, n_end);
  switch (wt) {
    case DType::F32: return GemmAvx512<DType::F32>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::F16: return GemmAvx512<DType::F16>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::BF16: return GemmAvx512<DType::BF16>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::Q8_0: return GemmAvx512<DType::Q8_0>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    case DType::Q4_0: return GemmAvx512<DType::Q4_0>(a, m, k, w, y, n_total, n_begin, n_end, gemv_rows);
    default: return GemmScalar(a, m, k, w, wt, y, n_total, n_begin, n_end);
  }
}

std::vector<int64_t> GemvRowsChoices(DType wt, int64_t m) {
  if (m != 1 || IsQuantized(wt) || ActiveIsa() == Isa::Scalar) return {};
  std::vector<int64_t> out;
  for (int64_t rows : {4, 2, 1})
    if (rows != DefaultGemvRows(wt)) out.push_back(rows);
  return out;
}

bool RoundedActivationSupported(DType wt, int64_t k) {
  if (!Avx512TemplatesEnabled()) return false;
  return wt == DType::BF16 ? Bf16DotSupported() && k > 0 : Int8DotSupported(wt, k);
}

const char* RoundedActivationName(DType wt) { return wt == DType::BF16 ? "bf16dot" : "int8"; }

double RoundedActivationErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n) {
  if (wt == DType::BF16) return Bf16DotErrorBound(a, static_cast<const uint16_t*>(w), k, n);
  return Int8DotErrorBound(a, w, wt, k, n);
}

}  // namespace prism
