// Template-tier CPU GEMM for Q8_0 and Q4_0 weights on AVX2 machines (see gemm_int8_avx2.h): decoding each
// block to f32 took about 20 vector instructions per 32 weights, more than two cores issue at memory speed;
// a byte dot product takes about 8 (|w| times a with w's sign, pairs summed to 16 then 32 bits).
#include "backends/cpu/gemm_int8_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_avx2.h"

namespace prism {
namespace {

#define PRISM_AVX2 __attribute__((target("avx2,fma,f16c")))

// One 32-value activation block rounded as QuantizeActivationBlock rounds it (d = max|x| / 127, q =
// round-to-nearest-even(x * 127 / max|x|); d NaN for a block holding a NaN); returns d.
PRISM_AVX2 float QuantizeBlock(const float* x, int8_t* q) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps(), unordered = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_loadu_ps(x + 8 * c);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[c]));
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v[c], v[c], _CMP_UNORD_Q));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  const float max = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  const float d = _mm256_movemask_ps(unordered) ? NAN : max / 127.0f;
  const __m256 id = _mm256_set1_ps(max > 0 ? 127.0f / max : 0.0f);
  __m256i i[4];
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
    i[c] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v[c], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  // Packing works within 128-bit lanes: 32-bit groups come out as values 0-3, 8-11, 16-19, 24-27, 4-7, ...
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return d;
}

// A block's 32 weights as signed bytes (Q4_0: low nibbles are values 0-15, high ones 16-31, offset by 8).
template <DType T>
PRISM_AVX2 inline __m256i WeightBytes(const uint8_t* qs) {
  if constexpr (T == DType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  } else {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
  }
}

// MR rounded activation rows (values k apart, scales `blocks` apart) x NR weight rows into y (rows ldy
// apart).
template <DType T, int MR, int NR>
PRISM_AVX2 void Tile(const int8_t* aq, const float* ad, int64_t k, const uint8_t* w, int64_t rb, float* y,
                     int64_t ldy) {
  constexpr int64_t kBlockBytes = T == DType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const int64_t blocks = k / kQuantBlock;
  __m256 acc[MR][4];
#pragma GCC unroll 2
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i av[MR];
#pragma GCC unroll 2
    for (int i = 0; i < MR; ++i) av[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + i * k) + b);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const uint8_t* blk = w + j * rb + b * kBlockBytes;
      // The same block of the next tile's rows: a tile's rows are short streams (1,152 bytes of Q4_0 at K =
      // 2048) that the hardware prefetcher did not follow; decode waited on these loads at 10 GB/s.
      _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * rb), _MM_HINT_T0);
      const __m256i wv = WeightBytes<T>(blk + 2), wabs = _mm256_sign_epi8(wv, wv);
      const float dw = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk));
#pragma GCC unroll 2
      for (int i = 0; i < MR; ++i) {
        const __m256i dot =
            _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(av[i], wv)), ones);  // exact
        acc[i][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * ad[i * blocks + b]), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < MR; ++i) {  // the four rows' sums at once
    const __m256 s =
        _mm256_hadd_ps(_mm256_hadd_ps(acc[i][0], acc[i][1]), _mm256_hadd_ps(acc[i][2], acc[i][3]));
    alignas(16) float out[4];
    _mm_store_ps(out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = out[j];
  }
}

template <DType T, int NR>
PRISM_AVX2 void TileRows(int mr, const int8_t* aq, const float* ad, int64_t k, const uint8_t* w, int64_t rb,
                         float* y, int64_t ldy) {
  if (mr == 2) return Tile<T, 2, NR>(aq, ad, k, w, rb, y, ldy);
  Tile<T, 1, NR>(aq, ad, k, w, rb, y, ldy);
}

template <DType T>
PRISM_AVX2 void Gemm(const float* a, int64_t m, int64_t k, const uint8_t* w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end) {
  const int64_t blocks = k / kQuantBlock, rb = StorageBytes(T, k);
  // Every thread rounds the activation itself: it is small next to the weights it meets.
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d;
  q.resize((size_t)(m * k));
  d.resize((size_t)(m * blocks));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < blocks; ++b)
      d[i * blocks + b] = QuantizeBlock(a + i * k + b * kQuantBlock, q.data() + i * k + b * kQuantBlock);
  for (int64_t n = n_begin; n < n_end; n += 4) {
    const int nr = (int)std::min<int64_t>(4, n_end - n);
    for (int64_t i = 0; i < m; i += 2) {
      const int mr = (int)std::min<int64_t>(2, m - i);
      const int8_t* aq = q.data() + i * k;
      const float* ad = d.data() + i * blocks;
      float* yi = y + i * n_total + n;
      switch (nr) {
        case 4: TileRows<T, 4>(mr, aq, ad, k, w + n * rb, rb, yi, n_total); break;
        case 3: TileRows<T, 3>(mr, aq, ad, k, w + n * rb, rb, yi, n_total); break;
        case 2: TileRows<T, 2>(mr, aq, ad, k, w + n * rb, rb, yi, n_total); break;
        default: TileRows<T, 1>(mr, aq, ad, k, w + n * rb, rb, yi, n_total); break;
      }
    }
  }
}

}  // namespace

bool Int8Avx2Supported(DType wt, int64_t k) {
  return (wt == DType::Q8_0 || wt == DType::Q4_0) && k > 0 && k % kQuantBlock == 0 && GemmAvx2Supported() &&
         std::string_view(GemmIsa()) == "avx2";
}

void GemmRowsInt8Avx2(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                      int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  if (wt == DType::Q8_0) return Gemm<DType::Q8_0>(a, m, k, wb, y, n_total, n_begin, n_end);
  if (wt == DType::Q4_0) return Gemm<DType::Q4_0>(a, m, k, wb, y, n_total, n_begin, n_end);
}

}  // namespace prism
