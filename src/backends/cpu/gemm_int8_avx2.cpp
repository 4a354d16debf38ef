// Template-tier CPU GEMM for Q8_0 and Q4_0 weights on AVX2 machines (see gemm_int8_avx2.h): decoding each
// block to f32 took about 20 vector instructions per 32 weights, more than two cores issue at memory speed;
// byte dot products over tiles of 8 rows take about 5 for Q4_0 (unsigned nibbles) and 6 for Q8_0 (|w| times
// a with w's sign), the 8 rows' sums reduced together and scaled by one vector of their 8 scales.
#include "backends/cpu/gemm_int8_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_avx2.h"
#include "ir/error.h"

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

// One row's values of one block, and a packed tile's bytes per block: the 8 rows' f16 scales, then their
// values as stored.
constexpr int64_t RowBytes(DType t) { return t == DType::Q8_0 ? 32 : 16; }
constexpr int64_t TileBlockBytes(DType t) { return kInt8Avx2TileRows * (2 + RowBytes(t)); }
// The row whose sum lands in lane l of each kernel's reduction (see Q8Tile and Q4Tile).
template <DType T>
constexpr int kLaneRow[kInt8Avx2TileRows] = {0, 1, 2, 3, 4, 5, 6, 7};
template <>
constexpr int kLaneRow<DType::Q4_0>[kInt8Avx2TileRows] = {0, 2, 4, 6, 1, 3, 5, 7};
// Activation bytes per block as each kernel reads them: Q8_0's 32 values; Q4_0's values 0-15 twice, then
// 16-31 twice (one 32-byte load meets two rows' nibbles).
template <DType T>
constexpr int64_t kActBlockBytes = T == DType::Q8_0 ? 32 : 64;

// MR rounded activation rows (kActBlockBytes per block, rows `blocks` blocks apart; scales `ad`) against one
// packed tile of 8 Q8_0 rows, into out[MR][8]. No software prefetch: a thread's tiles are one sequential
// stream, and prefetching it slowed Q4_0's (0.6-1.1 KiB ahead into L1, with or without 2-9 KiB ahead into
// L2, 32768 rows: 14-17 GB/s against 21-27).
template <int MR>
PRISM_AVX2 void Q8Tile(const int8_t* aq, const int32_t*, const float* ad, int64_t blocks, const uint8_t* t,
                       float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b, t += TileBlockBytes(DType::Q8_0)) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    __m256i av[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
      av[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq) + i * blocks + b);
    __m256i d[MR][kInt8Avx2TileRows];  // 32-bit partial sums of row r
#pragma GCC unroll 8
    for (int r = 0; r < kInt8Avx2TileRows; ++r) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 16) + r),
                    wabs = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i)
        d[i][r] = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(av[i], w)), ones);  // exact
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      // Pairwise sums: rows 0-3 then 4-7, each 128-bit half's, then the halves added: rows 0-7 in order.
      const __m256i g0 =
          _mm256_hadd_epi32(_mm256_hadd_epi32(d[i][0], d[i][1]), _mm256_hadd_epi32(d[i][2], d[i][3]));
      const __m256i g1 =
          _mm256_hadd_epi32(_mm256_hadd_epi32(d[i][4], d[i][5]), _mm256_hadd_epi32(d[i][6], d[i][7]));
      const __m256i dot =
          _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(ad[i * blocks + b])),
                               acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// The same for 8 Q4_0 rows; `sums` holds 8 times each activation block's sum (the nibbles' offset).
template <int MR>
PRISM_AVX2 void Q4Tile(const int8_t* aq, const int32_t* sums, const float* ad, int64_t blocks,
                       const uint8_t* t, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b, t += TileBlockBytes(DType::Q4_0)) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    __m256i lo[4], hi[4];  // rows 2p and 2p+1: their values 0-15 (lo) and 16-31 (hi), unsigned
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 16) + p);
      lo[p] = _mm256_and_si256(v, nibble);
      hi[p] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256i* av = reinterpret_cast<const __m256i*>(aq + (i * blocks + b) * 64);
      const __m256i alo = _mm256_loadu_si256(av), ahi = _mm256_loadu_si256(av + 1);
      __m256i s[4];  // 16-bit: row 2p's partial sums in the low half, row 2p+1's in the high half
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p)
        s[p] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[p], alo), _mm256_maddubs_epi16(hi[p], ahi));
      // Each 16-bit lane of s is at most 4 * 15 * 128 in size, so two rounds of pairwise sums stay below
      // 2^15; lanes come out as rows 0 2 4 6 | 1 3 5 7, the order of the packed scales.
      const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(s[0], s[1]), _mm256_hadd_epi16(s[2], s[3]));
      const __m256i dot =
          _mm256_sub_epi32(_mm256_madd_epi16(h, ones), _mm256_set1_epi32(sums[i * blocks + b]));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(ad[i * blocks + b])),
                               acc[i]);
    }
  }
  const __m256i natural = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(out + 8 * i, _mm256_permutevar8x32_ps(acc[i], natural));
}

template <DType T>
PRISM_AVX2 void Gemm(const float* a, int64_t m, const Int8Avx2PackedWeight& w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end) {
  constexpr int64_t kAct = kActBlockBytes<T>;
  const int64_t blocks = w.k / kQuantBlock, tile_bytes = blocks * TileBlockBytes(T);
  // Every thread rounds the activation itself: it is small next to the weights it meets.
  thread_local std::vector<int8_t> q;
  thread_local std::vector<int32_t> sums;
  thread_local std::vector<float> d;
  q.resize((size_t)(m * blocks * kAct));
  sums.resize((size_t)(m * blocks));
  d.resize((size_t)(m * blocks));
  for (int64_t i = 0; i < m * blocks; ++i) {
    if constexpr (T == DType::Q8_0) {
      d[i] = QuantizeBlock(a + i * kQuantBlock, q.data() + i * kAct);
    } else {
      alignas(32) int8_t x[kQuantBlock];
      d[i] = QuantizeBlock(a + i * kQuantBlock, x);
      const __m128i lo = _mm_load_si128(reinterpret_cast<const __m128i*>(x)),
                    hi = _mm_load_si128(reinterpret_cast<const __m128i*>(x) + 1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.data() + i * kAct), _mm256_set_m128i(lo, lo));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.data() + i * kAct) + 1, _mm256_set_m128i(hi, hi));
      int32_t sum = 0;
      for (int8_t v : x) sum += v;
      sums[i] = 8 * sum;
    }
  }
  // Q8_0 meets 4 activation rows at a time (one thread, 512 x 2048 x 2048: 74-78 GFLOP/s against 71 at 2);
  // Q4_0 2, its 8 registers of nibbles held across them (97 at 4 against 105).
  constexpr int64_t kRows = T == DType::Q8_0 ? 4 : 2;
  constexpr auto wide = T == DType::Q8_0 ? Q8Tile<4> : Q4Tile<2>;
  constexpr auto two = T == DType::Q8_0 ? Q8Tile<2> : Q4Tile<2>;
  constexpr auto one = T == DType::Q8_0 ? Q8Tile<1> : Q4Tile<1>;
  for (int64_t t = n_begin / kInt8Avx2TileRows; t * kInt8Avx2TileRows < n_end; ++t) {
    const int64_t first = t * kInt8Avx2TileRows, c0 = std::max(n_begin, first),
                  c1 = std::min(n_end, first + kInt8Avx2TileRows);
    const uint8_t* tile = w.data.get() + t * tile_bytes;
    for (int64_t i = 0; i < m;) {
      alignas(32) float out[kRows][kInt8Avx2TileRows];
      const int64_t mr = m - i >= kRows ? kRows : m - i >= 2 ? 2 : 1, at = i * blocks;
      const auto tile_rows = mr == kRows ? wide : mr == 2 ? two : one;
      tile_rows(q.data() + at * kAct, sums.data() + at, d.data() + at, blocks, tile, out[0]);
      for (int64_t r = 0; r < mr; ++r)
        for (int64_t c = c0; c < c1; ++c) y[(i + r) * n_total + c] = out[r][c - first];
      i += mr;
    }
  }
}

template <DType T, class Block>
void Pack(const Block* src, int64_t n, int64_t blocks, uint8_t* dst) {
  for (int64_t t = 0; t * kInt8Avx2TileRows < n; ++t)
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* out = dst + (t * blocks + b) * TileBlockBytes(T);
      for (int l = 0; l < kInt8Avx2TileRows; ++l) {
        const int64_t row = t * kInt8Avx2TileRows + kLaneRow<T>[l], r = row - t * kInt8Avx2TileRows;
        if (row >= n) continue;  // padding rows stay 0
        std::memcpy(out + 2 * l, &src[row * blocks + b].d, 2);
        std::memcpy(out + 2 * kInt8Avx2TileRows + r * RowBytes(T), src[row * blocks + b].qs, RowBytes(T));
      }
    }
}

}  // namespace

bool Int8Avx2Supported(DType wt, int64_t k) {
  return (wt == DType::Q8_0 || wt == DType::Q4_0) && k > 0 && k % kQuantBlock == 0 && GemmAvx2Supported() &&
         std::string_view(GemmIsa()) == "avx2";
}

Int8Avx2PackedWeight PackForInt8Avx2(const void* w, DType wt, int64_t n, int64_t k) {
  if ((wt != DType::Q8_0 && wt != DType::Q4_0) || k % kQuantBlock)
    throw Error("int8-avx2: packs Q8_0 or Q4_0 over whole blocks, not " + std::string(DTypeName(wt)) +
                " with K = " + std::to_string(k));
  const int64_t blocks = k / kQuantBlock, tiles = (n + kInt8Avx2TileRows - 1) / kInt8Avx2TileRows;
  Int8Avx2PackedWeight p;
  p.type = wt;
  p.n = n;
  p.k = k;
  p.bytes = (size_t)(tiles * blocks * TileBlockBytes(wt));
  p.data = AllocateWeightMemory(p.bytes, "int8-avx2: packed weights");  // zeroed
  if (wt == DType::Q8_0)
    Pack<DType::Q8_0>(static_cast<const BlockQ8_0*>(w), n, blocks, p.data.get());
  else
    Pack<DType::Q4_0>(static_cast<const BlockQ4_0*>(w), n, blocks, p.data.get());
  return p;
}

void GemmRowsInt8Avx2(const float* a, int64_t m, const Int8Avx2PackedWeight& w, float* y, int64_t n_total,
                      int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  if (w.type == DType::Q8_0) return Gemm<DType::Q8_0>(a, m, w, y, n_total, n_begin, n_end);
  Gemm<DType::Q4_0>(a, m, w, y, n_total, n_begin, n_end);
}

}  // namespace prism
