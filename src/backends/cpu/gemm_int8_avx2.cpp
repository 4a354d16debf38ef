// Template-tier CPU GEMM for Q8_0, Q4_0, Q4_K and Q6_K weights on AVX2 machines (see gemm_int8_avx2.h):
// decoding each block to f32 took about 20 vector instructions per 32 weights, more than two cores issue at
// memory speed; byte dot products over tiles of 8 rows take about 5 for Q4_0 and Q4_K (unsigned nibbles),
// 6 for Q8_0 (|w| times a with w's sign) and 12 for Q6_K, the 8 rows' sums reduced together and scaled by
// one vector of their 8 scales.
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
#include "ir/quant_formats.h"

namespace prism {
namespace {

#define PRISM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PRISM_INLINE __attribute__((always_inline)) inline

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

// One row's values of one 32-value block, and a packed tile's bytes per block: the 8 rows' f16 scales, then
// their values. Q4_K's tile per 256-value super-block: the 8 rows' d and dmin (f16), their 6-bit scales and
// mins as bytes (sub-block by sub-block), then 8 sub-blocks of values laid out as Q4_0's.
constexpr int64_t RowBytes(DType t) { return t == DType::Q8_0 ? 32 : 16; }
constexpr int64_t TileBlockBytes(DType t) { return kInt8Avx2TileRows * (2 + RowBytes(t)); }
constexpr int64_t kK4Scales = 4 * kInt8Avx2TileRows, kK4Mins = kK4Scales + 8 * kInt8Avx2TileRows,
                  kK4Values = kK4Mins + 8 * kInt8Avx2TileRows,
                  kK4TileBytes = kK4Values + 8 * kInt8Avx2TileRows * RowBytes(DType::Q4_K);
// Q6_K's tile per super-block: the 8 rows' d (f16) and signed scales (sub-block by sub-block), then per
// 32-value block the 8 rows' low nibbles as Q4_0's and their high 2 bits, 16 bytes a pair of rows (see
// PackKQuant): as many bytes as GGUF's.
constexpr int64_t kK6Scales = 2 * kInt8Avx2TileRows, kK6Values = kK6Scales + 16 * kInt8Avx2TileRows,
                  kK6BlockBytes = kInt8Avx2TileRows * 24, kK6TileBytes = kK6Values + 8 * kK6BlockBytes;
// A tile's bytes over K values.
constexpr int64_t TileBytes(DType t, int64_t k) {
  return t == DType::Q4_K   ? k / kSuperBlock * kK4TileBytes
         : t == DType::Q6_K ? k / kSuperBlock * kK6TileBytes
                            : k / kQuantBlock * TileBlockBytes(t);
}
// The row whose sum lands in lane l of each kernel's reduction: Q8_0's in order (see Q8Tile), the nibble
// kernels' as rows 0 2 4 6 1 3 5 7 (see NibbleDots).
constexpr int LaneRow(DType t, int l) { return t == DType::Q8_0 ? l : l % 4 * 2 + l / 4; }
// Activation bytes per block as each kernel reads them: Q8_0's 32 values; the others' values 0-15 twice,
// then 16-31 twice (one 32-byte load meets two rows' nibbles).
template <DType T>
constexpr int64_t kActBlockBytes = T == DType::Q8_0 ? 32 : 64;

// Rounded activation rows, from one row on: per 32-value block its bytes (kActBlockBytes), its scale d, and
// for Q4_0 8 times the sum of its values (the nibbles' offset), for Q4_K d times that sum (for the mins),
// for Q6_K the sums of its values 0-15 and 16-31 as the low and high 16 bits (for the offset of 32).
// Row i's block b is entry i * blocks + b.
struct ActRows {
  const int8_t* q;
  const int32_t* sums;
  const float* d;
  const float* dsum;
  int64_t blocks;
  ActRows From(int64_t row, int64_t kact) const {
    const int64_t at = row * blocks;
    return {q + at * kact, sums + at, d + at, dsum + at, blocks};
  }
};

// MR rounded activation rows (ActRows, from the first of them) against one packed tile of 8 Q8_0 rows, into
// out[MR][8]. No software prefetch: a thread's tiles are one sequential
// stream, and prefetching it slowed Q4_0's (0.6-1.1 KiB ahead into L1, with or without 2-9 KiB ahead into
// L2, 32768 rows: 14-17 GB/s against 21-27).
template <int MR>
PRISM_AVX2 void Q8Tile(const ActRows& a, const uint8_t* t, float* out) {
  const int8_t* aq = a.q;
  const float* ad = a.d;
  const int64_t blocks = a.blocks;
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

// 8 rows' nibbles of one 32-value block, as packed (16 bytes per row): rows 2p and 2p+1's values 0-15 in
// lo[p] and 16-31 in hi[p], unsigned.
PRISM_AVX2 PRISM_INLINE void Nibbles(const uint8_t* v, __m256i lo[4], __m256i hi[4]) {
  const __m256i nibble = _mm256_set1_epi8(15);
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v) + p);
    lo[p] = _mm256_and_si256(x, nibble);
    hi[p] = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
  }
}

// The 8 rows' sums of nibble times activation over one block (av: its values 0-15 twice, then 16-31 twice)
// as 16-bit pairs, rows 0 2 4 6 | 1 3 5 7 (each row's sum the two lanes of one 32-bit lane).
PRISM_AVX2 PRISM_INLINE __m256i NibbleDots(const __m256i lo[4], const __m256i hi[4], const int8_t* av) {
  const __m256i alo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(av)),
                ahi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(av) + 1);
  __m256i s[4];  // 16-bit: row 2p's partial sums in the low half, row 2p+1's in the high half
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p)
    s[p] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[p], alo), _mm256_maddubs_epi16(hi[p], ahi));
  // Each 16-bit lane of s is at most 4 * 15 * 128 in size, so two rounds of pairwise sums stay below 2^15.
  return _mm256_hadd_epi16(_mm256_hadd_epi16(s[0], s[1]), _mm256_hadd_epi16(s[2], s[3]));
}

// Lanes in the kernels' order (rows 0 2 4 6 1 3 5 7) put back in row order.
PRISM_AVX2 PRISM_INLINE void StoreRows(__m256 v, float* out) {
  _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// The same for 8 Q4_0 rows, their nibbles unsigned: 8 times each activation block's sum taken off.
template <int MR>
PRISM_AVX2 void Q4Tile(const ActRows& a, const uint8_t* t, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < a.blocks; ++b, t += TileBlockBytes(DType::Q4_0)) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    __m256i lo[4], hi[4];
    Nibbles(t + 16, lo, hi);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const int64_t at = i * a.blocks + b;
      const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(NibbleDots(lo, hi, a.q + at * 64), ones),
                                           _mm256_set1_epi32(a.sums[at]));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[at])), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) StoreRows(acc[i], out + 8 * i);
}

// The same for 8 Q4_K rows: per 32-value sub-block the pairs' sums times the rows' 6-bit scales (one
// vpmaddwd, exact), times the activation block's scale; per super-block times d, less dmin times the sum
// over sub-blocks of each row's min times the activation block's d * sum.
template <int MR>
PRISM_AVX2 void Q4KTile(const ActRows& a, const uint8_t* t, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  // A sub-block's 8 scale bytes (rows 0 2 4 6 1 3 5 7), each widened to 16 bits and set in both lanes of
  // its row's 32-bit lane: rows 0 2 4 6 from the low 128 bits' copy, 1 3 5 7 from the high one's.
  const __m256i spread = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1, 4, -1, 4,
                                          -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
  for (int64_t sb = 0; sb < a.blocks / 8; ++sb, t += kK4TileBytes) {
    __m256 sub[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) sub[i] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      int64_t scale_bytes;
      std::memcpy(&scale_bytes, t + kK4Scales + 8 * j, 8);
      const __m256i sc = _mm256_shuffle_epi8(_mm256_set1_epi64x(scale_bytes), spread);
      __m256i lo[4], hi[4];
      Nibbles(t + kK4Values + j * 8 * RowBytes(DType::Q4_K), lo, hi);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const int64_t at = i * a.blocks + 8 * sb + j;
        const __m256i dot = _mm256_madd_epi16(NibbleDots(lo, hi, a.q + at * 64), sc);  // below 2^22
        sub[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(a.d[at]), sub[i]);
      }
    }
    __m256 mins[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) mins[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256 mj = _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(t + kK4Mins + 8 * j))));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i)
        mins[i] = _mm256_fmadd_ps(mj, _mm256_set1_ps(a.dsum[i * a.blocks + 8 * sb + j]), mins[i]);
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))),
                 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t) + 1));
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) acc[i] = _mm256_fnmadd_ps(dmin, mins[i], _mm256_fmadd_ps(d, sub[i], acc[i]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) StoreRows(acc[i], out + 8 * i);
}

// A byte shuffle setting bytes a, b of each 128-bit half (c, d of the high one) in the high byte of four
// 16-bit lanes each, the low bytes zero.
PRISM_AVX2 PRISM_INLINE __m256i Spread(char a, char b, char c, char d) {
  return _mm256_setr_epi8(-1, a, -1, a, -1, a, -1, a, -1, b, -1, b, -1, b, -1, b, -1, c, -1, c, -1, c, -1, c,
                          -1, d, -1, d, -1, d, -1, d);
}

// The same for 8 Q6_K rows: per 32-value block each pair of rows' 6-bit values (a nibble and 2 high bits)
// against the activation as unsigned bytes, the 16-bit products summed once in pairs (each at most
// 4 * 63 * 128, below 2^15), times the rows' signed scales of the two 16-value sub-blocks (one vpmaddwd
// each, exact), then 32 times each scale times its sub-block's activation sum taken off.
template <int MR>
PRISM_AVX2 void Q6KTile(const ActRows& a, const uint8_t* t, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  // A block's 16 scale bytes (sub-block 2b's 8 rows, then 2b+1's, rows 0 2 4 6 1 3 5 7) set in the high
  // byte of 16-bit lanes, so that an arithmetic shift widens them: rows (0, 2) of the low sub-block in the
  // low 128 bits' halves and (1, 3) in the high one's, to meet the 16-bit sums of rows 0-3; then rows 4-7.
  const __m256i lo01 = Spread(0, 1, 4, 5), lo23 = Spread(2, 3, 6, 7), hi01 = Spread(8, 9, 12, 13),
                hi23 = Spread(10, 11, 14, 15);
  const __m256i nibble = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30),
                high_shift = _mm256_setr_epi32(4, 4, 4, 4, 0, 0, 0, 0);
  for (int64_t sb = 0; sb < a.blocks / 8; ++sb, t += kK6TileBytes) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    for (int j = 0; j < 8; ++j) {
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + kK6Scales) + j);
      const __m256i sc2 = _mm256_broadcastsi128_si256(sc);
      const __m256i s_lo01 = _mm256_srai_epi16(_mm256_shuffle_epi8(sc2, lo01), 8),
                    s_lo23 = _mm256_srai_epi16(_mm256_shuffle_epi8(sc2, lo23), 8),
                    s_hi01 = _mm256_srai_epi16(_mm256_shuffle_epi8(sc2, hi01), 8),
                    s_hi23 = _mm256_srai_epi16(_mm256_shuffle_epi8(sc2, hi23), 8);
      // Each row's two scales side by side as 16-bit lanes, rows in lane order: against the activation's
      // two sums, one vpmaddwd gives the offset's multiplier.
      const __m256i s_pair = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc, _mm_srli_si128(sc, 8)));
      const uint8_t* v = t + kK6Values + j * kK6BlockBytes;
      __m256i lo[4], hi[4];  // rows 2p and 2p+1: their values 0-15 (lo) and 16-31 (hi), 0-63
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v) + p);
        const __m256i h = _mm256_sllv_epi32(
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 128) + p)),
            high_shift);
        lo[p] = _mm256_or_si256(_mm256_and_si256(x, nibble), _mm256_and_si256(h, top));
        hi[p] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 4), nibble),
                                _mm256_and_si256(_mm256_srli_epi16(h, 2), top));
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const int64_t at = i * a.blocks + 8 * sb + j;
        const __m256i* av = reinterpret_cast<const __m256i*>(a.q + at * 64);
        const __m256i alo = _mm256_loadu_si256(av), ahi = _mm256_loadu_si256(av + 1);
        __m256i m[4], n[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p)
          m[p] = _mm256_maddubs_epi16(lo[p], alo), n[p] = _mm256_maddubs_epi16(hi[p], ahi);
        const __m256i r01 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_hadd_epi16(m[0], m[1]), s_lo01),
                                             _mm256_madd_epi16(_mm256_hadd_epi16(n[0], n[1]), s_hi01));
        const __m256i r23 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_hadd_epi16(m[2], m[3]), s_lo23),
                                             _mm256_madd_epi16(_mm256_hadd_epi16(n[2], n[3]), s_hi23));
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(s_pair, _mm256_set1_epi32(a.sums[at])), 5);
        const __m256i dot = _mm256_sub_epi32(_mm256_hadd_epi32(r01, r23), offset);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(a.d[at])), acc[i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) StoreRows(acc[i], out + 8 * i);
}

// Each type's kernel over MR activation rows.
template <DType T, int MR>
constexpr auto TileKernel() {
  if constexpr (T == DType::Q8_0) return Q8Tile<MR>;
  if constexpr (T == DType::Q4_0) return Q4Tile<MR>;
  if constexpr (T == DType::Q4_K) return Q4KTile<MR>;
  if constexpr (T == DType::Q6_K) return Q6KTile<MR>;
}

template <DType T>
PRISM_AVX2 void Gemm(const float* a, int64_t m, const Int8Avx2PackedWeight& w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end) {
  constexpr int64_t kAct = kActBlockBytes<T>;
  const int64_t blocks = w.k / kQuantBlock, tile_bytes = TileBytes(T, w.k);
  // Every thread rounds the activation itself: it is small next to the weights it meets.
  thread_local std::vector<int8_t> q;
  thread_local std::vector<int32_t> sums;
  thread_local std::vector<float> d, dsum;
  q.resize((size_t)(m * blocks * kAct));
  sums.resize((size_t)(m * blocks));
  d.resize((size_t)(m * blocks));
  dsum.resize((size_t)(m * blocks));
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
      int32_t low = 0, high = 0;
      for (int l = 0; l < 16; ++l) low += x[l], high += x[l + 16];
      sums[i] = T == DType::Q6_K ? (int32_t)((uint32_t)(uint16_t)low | (uint32_t)(uint16_t)high << 16)
                                 : 8 * (low + high);
      dsum[i] = d[i] * (float)(low + high);
    }
  }
  const ActRows act{q.data(), sums.data(), d.data(), dsum.data(), blocks};
  // 4 activation rows at a time, the tile's unpacked weights held across them (one thread, 512 x 2048 x
  // 2048, GFLOP/s at 4 rows against 2: Q4_0 135 against 108, Q4_K 133 against 108; Q8_0 74-78 against 71).
  constexpr int64_t kRows = 4;
  constexpr auto wide = TileKernel<T, 4>(), two = TileKernel<T, 2>(), one = TileKernel<T, 1>();
  for (int64_t t = n_begin / kInt8Avx2TileRows; t * kInt8Avx2TileRows < n_end; ++t) {
    const int64_t first = t * kInt8Avx2TileRows, c0 = std::max(n_begin, first),
                  c1 = std::min(n_end, first + kInt8Avx2TileRows);
    const uint8_t* tile = w.data.get() + t * tile_bytes;
    for (int64_t i = 0; i < m;) {
      alignas(32) float out[kRows][kInt8Avx2TileRows];
      const int64_t mr = m - i >= kRows ? kRows : m - i >= 2 ? 2 : 1;
      const auto tile_rows = mr == kRows ? wide : mr == 2 ? two : one;
      tile_rows(act.From(i, kAct), tile, out[0]);
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
        const int64_t row = t * kInt8Avx2TileRows + LaneRow(T, l), r = row - t * kInt8Avx2TileRows;
        if (row >= n) continue;  // padding rows stay 0
        std::memcpy(out + 2 * l, &src[row * blocks + b].d, 2);
        std::memcpy(out + 2 * kInt8Avx2TileRows + r * RowBytes(T), src[row * blocks + b].qs, RowBytes(T));
      }
    }
}

// Q4_K and Q6_K: per super-block the lanes' header (Q4_K: d, dmin, then the 6-bit scales and mins as bytes,
// sub-block by sub-block; Q6_K: d and the 16 signed scales), then per 32-value block the rows' low nibbles as
// Q4_0's (byte l: values l and l + 16) and, for Q6_K, per pair of rows 16 bytes of high bits: byte l holds
// bits 4-5 of row 2p's values l and l + 16 in bits 0-1 and 2-3, row 2p+1's in bits 4-5 and 6-7.
template <DType T, class Block>
void PackKQuant(const Block* src, int64_t n, int64_t super_blocks, uint8_t* dst) {
  constexpr bool k4 = T == DType::Q4_K;
  constexpr int64_t tile_bytes = k4 ? kK4TileBytes : kK6TileBytes, values = k4 ? kK4Values : kK6Values,
                    block_bytes = k4 ? kInt8Avx2TileRows * RowBytes(T) : kK6BlockBytes;
  for (int64_t t = 0; t * kInt8Avx2TileRows < n; ++t)
    for (int64_t b = 0; b < super_blocks; ++b) {
      uint8_t* out = dst + (t * super_blocks + b) * tile_bytes;
      for (int l = 0; l < kInt8Avx2TileRows; ++l) {
        const int64_t row = t * kInt8Avx2TileRows + LaneRow(T, l);
        if (row >= n) continue;  // padding rows stay 0
        const Block& x = src[row * super_blocks + b];
        std::memcpy(out + 2 * l, &x.d, 2);
        if constexpr (k4) {
          std::memcpy(out + 2 * kInt8Avx2TileRows + 2 * l, &x.dmin, 2);
          for (int j = 0; j < 8; ++j) {
            int scale, min;
            ScaleMinK4(x.scales, j, &scale, &min);
            out[kK4Scales + 8 * j + l] = (uint8_t)scale;
            out[kK4Mins + 8 * j + l] = (uint8_t)min;
          }
        } else {
          for (int j = 0; j < 16; ++j) out[kK6Scales + 8 * j + l] = (uint8_t)x.scales[j];
        }
      }
      for (int64_t r = 0; r < kInt8Avx2TileRows && t * kInt8Avx2TileRows + r < n; ++r) {
        uint8_t q[kSuperBlock];  // Q4_K 0-15, Q6_K 0-63, in value order
        float scale[kSuperBlock / 16], offset[kSuperBlock / 16];
        BlockFormatInts(T, &src[(t * kInt8Avx2TileRows + r) * super_blocks + b], q, scale, offset);
        for (int j = 0; j < 8; ++j) {
          uint8_t* v = out + values + j * block_bytes;
          const uint8_t* x = q + 32 * j;
          for (int l = 0; l < 16; ++l) {
            v[16 * r + l] = (uint8_t)((x[l] & 15) | (x[l + 16] & 15) << 4);
            if constexpr (!k4)
              v[128 + 16 * (r / 2) + l] |= (uint8_t)(((x[l] >> 4) | (x[l + 16] >> 4) << 2) << (4 * (r % 2)));
          }
        }
      }
    }
}

}  // namespace

bool Int8Avx2Supported(DType wt, int64_t k) {
  const bool blocks = wt == DType::Q4_K || wt == DType::Q6_K   ? k % kSuperBlock == 0
                      : wt == DType::Q8_0 || wt == DType::Q4_0 ? k % kQuantBlock == 0
                                                               : false;
  return blocks && k > 0 && GemmAvx2Supported() && std::string_view(GemmIsa()) == "avx2";
}

Int8Avx2PackedWeight PackForInt8Avx2(const void* w, DType wt, int64_t n, int64_t k) {
  if ((wt != DType::Q8_0 && wt != DType::Q4_0 && wt != DType::Q4_K && wt != DType::Q6_K) ||
      k % BlockElems(wt))
    throw Error("int8-avx2: packs Q8_0, Q4_0, Q4_K or Q6_K over whole blocks, not " +
                std::string(DTypeName(wt)) + " with K = " + std::to_string(k));
  const int64_t blocks = k / kQuantBlock, tiles = (n + kInt8Avx2TileRows - 1) / kInt8Avx2TileRows;
  Int8Avx2PackedWeight p;
  p.type = wt;
  p.n = n;
  p.k = k;
  p.bytes = (size_t)(tiles * TileBytes(wt, k));
  p.data = AllocateWeightMemory(p.bytes, "int8-avx2: packed weights");  // zeroed
  if (wt == DType::Q8_0)
    Pack<DType::Q8_0>(static_cast<const BlockQ8_0*>(w), n, blocks, p.data.get());
  else if (wt == DType::Q4_0)
    Pack<DType::Q4_0>(static_cast<const BlockQ4_0*>(w), n, blocks, p.data.get());
  else if (wt == DType::Q4_K)
    PackKQuant<DType::Q4_K>(static_cast<const BlockQ4_K*>(w), n, k / kSuperBlock, p.data.get());
  else
    PackKQuant<DType::Q6_K>(static_cast<const BlockQ6_K*>(w), n, k / kSuperBlock, p.data.get());
  return p;
}

void GemmRowsInt8Avx2(const float* a, int64_t m, const Int8Avx2PackedWeight& w, float* y, int64_t n_total,
                      int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  if (w.type == DType::Q8_0) return Gemm<DType::Q8_0>(a, m, w, y, n_total, n_begin, n_end);
  if (w.type == DType::Q4_0) return Gemm<DType::Q4_0>(a, m, w, y, n_total, n_begin, n_end);
  if (w.type == DType::Q4_K) return Gemm<DType::Q4_K>(a, m, w, y, n_total, n_begin, n_end);
  Gemm<DType::Q6_K>(a, m, w, y, n_total, n_begin, n_end);
}

}  // namespace prism
