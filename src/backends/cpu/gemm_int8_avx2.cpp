// Template-tier CPU GEMM for Q8_0, Q4_0, Q4_K and Q6_K weights on AVX2 machines (see gemm_int8_avx2.h):
// decoding each block to f32 took about 20 vector instructions per 32 weights, more than two cores issue at
// memory speed; byte dot products over tiles of 8 rows take about 4 for Q4_0 and Q4_K (unsigned nibbles),
// 6 for Q8_0 (|w| times a with w's sign) and 9 for Q6_K, and come out as one vector of the 8 rows' sums
// scaled by one vector of their 8 scales. For a prompt, Q6_K's tiles are expanded to signed bytes once each
// rather than unpacked again for every 4 activation rows.
#include "backends/cpu/gemm_int8_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/gemm_int8_avx2_layout.h"
#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

using namespace int8_avx2;

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

// Rounded activation rows, from one row on: per 32-value block its values, its scale d, and for Q4_0 8
// times the sum of its values (the nibbles' offset), for Q4_K d times that sum (for the mins), for Q6_K
// the sums of its values 0-15 and 16-31 as the low and high 16 bits (for the offset of 32). Row i's block
// b is entry i * blocks + b.
struct ActRows {
  const int8_t* q;
  const int32_t* sums;
  const float* d;
  const float* dsum;
  int64_t blocks;
  ActRows From(int64_t row) const {
    const int64_t at = row * blocks;
    return {q + at * kQuantBlock, sums + at, d + at, dsum + at, blocks};
  }
};

// How far ahead a GEMM prefetches its weights by default (GemmRowsInt8Avx2's prefetch 0).
constexpr int64_t kDefaultAhead = 2048;

// 4 activation bytes (values 4g to 4g + 3 of a block) in every 32-bit lane, to meet 8 rows' values 4g to
// 4g + 3 (one 32-bit lane a row): vpmaddubsw then leaves each row's sums in its own lane, and no reduction
// across lanes is needed (vphaddw, at 2 cycles on Zen 3, had been the Q6_K kernel's bound).
PRISM_AVX2 PRISM_INLINE __m256i Four(const int8_t* a) {
  int32_t four;
  std::memcpy(&four, a, 4);
  return _mm256_set1_epi32(four);
}

// Into L1 the weight bytes `ahead` bytes past [t, t + bytes) (none where ahead is 0). A thread's tiles are
// one sequential stream, yet the hardware prefetcher alone left a one-row GEMM on 2 Zen 3 threads at medians
// of 20.5-23.4 GB/s over the four types where 2 KiB ahead read 23.5-27.4 (65536 x 2048, 30 cold runs
// interleaved with the other distances; 1 KiB and 3-4 KiB in between). An earlier measurement, runs not
// interleaved on a host whose bandwidth drifts, had found prefetching slower.
PRISM_AVX2 PRISM_INLINE void PrefetchAhead(const uint8_t* t, int64_t bytes, int64_t ahead) {
  if (ahead)
    for (int64_t o = 0; o < bytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(t + ahead + o), _MM_HINT_T0);
}

// MR rounded activation rows (ActRows, from the first of them) against one packed tile of 8 Q8_0 rows, into
// out[MR][8]: per group of 4 values, the rows' |w| against the 4 broadcast activation bytes given w's signs
// (vpmaddubsw takes one unsigned operand), each product's pair sums widened to 32 bits (two would overflow
// 16). The tile's bytes `ahead` bytes on are prefetched as it goes (PrefetchAhead).
template <int MR>
PRISM_AVX2 void Q8Tile(const ActRows& a, const uint8_t* t, int64_t ahead, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < a.blocks; ++b, t += TileBlockBytes(DType::Q8_0)) {
    PrefetchAhead(t, TileBlockBytes(DType::Q8_0), ahead);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    __m256i w[8], wabs[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      w[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 16) + g);
      wabs[g] = _mm256_sign_epi8(w[g], w[g]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const int64_t at = i * a.blocks + b;
      const int8_t* av = a.q + at * kQuantBlock;
      __m256i p[8];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g)
        p[g] =
            _mm256_madd_epi16(_mm256_maddubs_epi16(wabs[g], _mm256_sign_epi8(Four(av + 4 * g), w[g])), ones);
      const __m256i dot =
          _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3])),
                           _mm256_add_epi32(_mm256_add_epi32(p[4], p[5]), _mm256_add_epi32(p[6], p[7])));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[at])), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// 8 bytes (one per row, signed or below 128) as 16-bit values, each in both halves of its row's 32-bit lane.
PRISM_AVX2 PRISM_INLINE __m256i Twice(const uint8_t* s) {
  const __m256i x = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
  return _mm256_blend_epi16(x, _mm256_slli_epi32(x, 16), 0xAA);
}

// 8 rows' nibbles of one 32-value block as packed (see Pack, PackKQuant): w[g] holds values 4g to 4g + 3 of
// each row (row r in bytes 4r to 4r + 3), unsigned.
PRISM_AVX2 PRISM_INLINE void Nibbles(const uint8_t* v, __m256i w[8]) {
  const __m256i nibble = _mm256_set1_epi8(15);
#pragma GCC unroll 4
  for (int h = 0; h < 4; ++h) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v) + h);
    w[h] = _mm256_and_si256(x, nibble);
    w[h + 4] = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
  }
}

// Each row's nibbles times one activation block, as two 16-bit partial sums in the row's 32-bit lane (each
// at most 8 * 2 * 15 * 128, below 2^15).
PRISM_AVX2 PRISM_INLINE __m256i NibbleDots(const __m256i w[8], const int8_t* av) {
  __m256i p[8];
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) p[g] = _mm256_maddubs_epi16(w[g], Four(av + 4 * g));
  return _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])),
                          _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7])));
}

// The same for 8 Q4_0 rows, their nibbles unsigned: 8 times each activation block's sum taken off.
template <int MR>
PRISM_AVX2 void Q4Tile(const ActRows& a, const uint8_t* t, int64_t ahead, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < a.blocks; ++b, t += TileBlockBytes(DType::Q4_0)) {
    PrefetchAhead(t, TileBlockBytes(DType::Q4_0), ahead);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    __m256i w[8];
    Nibbles(t + 16, w);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const int64_t at = i * a.blocks + b;
      const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(NibbleDots(w, a.q + at * kQuantBlock), ones),
                                           _mm256_set1_epi32(a.sums[at]));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[at])), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// The same for 8 Q4_K rows: per 32-value sub-block the rows' sums times their 6-bit scales (one vpmaddwd,
// exact), times the activation block's scale; per super-block times d, less dmin times the sum over
// sub-blocks of each row's min times the activation block's d * sum.
template <int MR>
PRISM_AVX2 void Q4KTile(const ActRows& a, const uint8_t* t, int64_t ahead, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < a.blocks / 8; ++sb, t += kK4TileBytes) {
    __m256 sub[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) sub[i] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      PrefetchAhead(t + j * kK4TileBytes / 8, kK4TileBytes / 8, ahead);
      const __m256i sc = Twice(t + kK4Scales + 8 * j);
      __m256i w[8];
      Nibbles(t + kK4Values + j * 8 * RowBytes(DType::Q4_K), w);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const int64_t at = i * a.blocks + 8 * sb + j;
        const __m256i dot = _mm256_madd_epi16(NibbleDots(w, a.q + at * kQuantBlock), sc);  // below 2^22
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
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// Block j of a packed Q6_K tile's super-block t: the 8 rows' values 0-63 (w[g] as Nibbles lays them out: the
// low nibbles, then the high 2 bits set in bits 4-5) and their two sub-blocks' scales (Twice's layout).
PRISM_AVX2 PRISM_INLINE void Q6Block(const uint8_t* t, int j, __m256i w[8], __m256i& s_lo, __m256i& s_hi) {
  const __m256i top = _mm256_set1_epi8(0x30);
  s_lo = Twice(t + kK6Scales + 16 * j), s_hi = Twice(t + kK6Scales + 16 * j + 8);
  const uint8_t* v = t + kK6Values + j * kK6BlockBytes;
  Nibbles(v, w);
#pragma GCC unroll 2
  for (int c = 0; c < 2; ++c) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 128) + c);
    w[4 * c] = _mm256_or_si256(w[4 * c], _mm256_and_si256(_mm256_slli_epi16(h, 4), top));
    w[4 * c + 1] = _mm256_or_si256(w[4 * c + 1], _mm256_and_si256(_mm256_slli_epi16(h, 2), top));
    w[4 * c + 2] = _mm256_or_si256(w[4 * c + 2], _mm256_and_si256(h, top));
    w[4 * c + 3] = _mm256_or_si256(w[4 * c + 3], _mm256_and_si256(_mm256_srli_epi16(h, 2), top));
  }
}

// A Q6_K block's 8 products (Four's groups: 0-3 the first 16-value sub-block, 4-7 the second) times the
// sub-blocks' scales. Two products' pair sums fit 16 bits (at most 2 * 2 * 63 * 128, or 2 * 2 * 255 * 32
// against the expanded tiles); four would not.
PRISM_AVX2 PRISM_INLINE __m256i ScaledSubBlocks(const __m256i p[8], __m256i s_lo, __m256i s_hi) {
  const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), s_lo),
                                      _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), s_lo));
  const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[4], p[5]), s_hi),
                                      _mm256_madd_epi16(_mm256_add_epi16(p[6], p[7]), s_hi));
  return _mm256_add_epi32(lo, hi);
}

// The same for 8 Q6_K rows: per 32-value block the rows' 6-bit values (a nibble and 2 high bits) as
// unsigned bytes against the activation, each 16-value sub-block's pair sums times the rows' signed scales
// (vpmaddwd, exact), less 32 times each scale times its sub-block's activation sum.
template <int MR>
PRISM_AVX2 void Q6KTile(const ActRows& a, const uint8_t* t, int64_t ahead, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < a.blocks / 8; ++sb, t += kK6TileBytes) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    for (int j = 0; j < 8; ++j) {
      PrefetchAhead(t + j * kK6TileBytes / 8, kK6TileBytes / 8, ahead);
      __m256i w[8], s_lo, s_hi;
      Q6Block(t, j, w, s_lo, s_hi);
      // Each row's two scales side by side, times 32: against the activation's two sums, the offset.
      const __m128i sc16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + kK6Scales + 16 * j));
      const __m256i s_pair =
          _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc16, _mm_srli_si128(sc16, 8))), 5);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const int64_t at = i * a.blocks + 8 * sb + j;
        const int8_t* av = a.q + at * kQuantBlock;
        __m256i p[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) p[g] = _mm256_maddubs_epi16(w[g], Four(av + 4 * g));
        const __m256i dot = _mm256_sub_epi32(ScaledSubBlocks(p, s_lo, s_hi),
                                             _mm256_madd_epi16(s_pair, _mm256_set1_epi32(a.sums[at])));
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(a.d[at])), acc[i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// A Q6_K tile expanded once for a prompt's many activation rows (Q6KTile unpacks each block again for every
// MR of them, about 12 of its 36 vector instructions per row and block): per super-block the 8 rows' d as
// f32, then per 32-value block their values less 32 as signed bytes (w[g] as Q6Block lays them out), the
// sub-blocks' scales, and 128 times the sum over the block of each value times its scale (`offset`). Against
// the activation plus 128 (unsigned, as vpmaddubsw takes it), the signed values can be its memory operand;
// each product pair is at most 2 * 255 * 32, two of them below 2^15, and the offset takes the 128 back off.
struct Q6Expanded {
  __m256i w[8], s_lo, s_hi, offset;
};
struct Q6ExpandedSuper {
  __m256 d;
  Q6Expanded block[8];
};

PRISM_AVX2 void ExpandQ6Tile(const uint8_t* t, int64_t super_blocks, Q6ExpandedSuper* x) {
  const __m256i ones = _mm256_set1_epi8(1), bias = _mm256_set1_epi8(32);
  for (int64_t sb = 0; sb < super_blocks; ++sb, t += kK6TileBytes) {
    x[sb].d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    for (int j = 0; j < 8; ++j) {
      Q6Expanded& e = x[sb].block[j];
      __m256i w[8];
      Q6Block(t, j, w, e.s_lo, e.s_hi);
      __m256i offset = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        e.w[g] = _mm256_sub_epi8(w[g], bias);
        offset = _mm256_add_epi32(
            offset, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, e.w[g]), g < 4 ? e.s_lo : e.s_hi));
      }
      e.offset = _mm256_slli_epi32(offset, 7);
    }
  }
}

// MR activation rows, their bytes plus 128 (a.q read as unsigned), against an expanded Q6_K tile.
template <int MR>
PRISM_AVX2 void Q6KExpandedTile(const ActRows& a, const Q6ExpandedSuper* x, float* out) {
  __m256 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < a.blocks / 8; ++sb) {
    for (int j = 0; j < 8; ++j) {
      const Q6Expanded& e = x[sb].block[j];
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const int64_t at = i * a.blocks + 8 * sb + j;
        const int8_t* av = a.q + at * kQuantBlock;
        __m256i p[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) p[g] = _mm256_maddubs_epi16(Four(av + 4 * g), e.w[g]);
        const __m256i dot = _mm256_sub_epi32(ScaledSubBlocks(p, e.s_lo, e.s_hi), e.offset);
        acc[i] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(x[sb].d, _mm256_set1_ps(a.d[at])), acc[i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
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
                     int64_t n_begin, int64_t n_end, int64_t prefetch) {
  const int64_t blocks = w.k / kQuantBlock, tile_bytes = TileBytes(T, w.k);
  // Every thread rounds the activation itself: it is small next to the weights it meets.
  thread_local std::vector<int8_t> q;
  thread_local std::vector<int32_t> sums;
  thread_local std::vector<float> d, dsum;
  q.resize((size_t)(m * blocks * kQuantBlock));
  sums.resize((size_t)(m * blocks));
  d.resize((size_t)(m * blocks));
  dsum.resize((size_t)(m * blocks));
  for (int64_t i = 0; i < m * blocks; ++i) {
    int8_t* x = q.data() + i * kQuantBlock;
    d[i] = QuantizeBlock(a + i * kQuantBlock, x);
    if constexpr (T == DType::Q8_0) continue;
    int32_t low = 0, high = 0;
    for (int l = 0; l < 16; ++l) low += x[l], high += x[l + 16];
    sums[i] = T == DType::Q6_K ? (int32_t)((uint32_t)(uint16_t)low | (uint32_t)(uint16_t)high << 16)
                               : 8 * (low + high);
    dsum[i] = d[i] * (float)(low + high);
  }
  // 4 activation rows at a time, the tile's unpacked weights held across them (one thread, 512 x 2048 x
  // 2048, GFLOP/s at 4 rows against 2: Q4_0 135 against 108, Q4_K 133 against 108; Q8_0 74-78 against 71).
  constexpr int64_t kRows = 4;
  // Q6_K over more rows than one pass takes: each tile expanded once (Q6KExpandedTile), the activation's
  // bytes plus 128.
  const bool expand = T == DType::Q6_K && m > kRows;
  thread_local std::vector<uint8_t> expanded_bytes;  // aligned by hand: a vector of the struct was not
  Q6ExpandedSuper* expanded = nullptr;
  if (expand) {
    expanded_bytes.resize((size_t)(blocks / 8) * sizeof(Q6ExpandedSuper) + alignof(Q6ExpandedSuper));
    expanded = reinterpret_cast<Q6ExpandedSuper*>(
        (reinterpret_cast<uintptr_t>(expanded_bytes.data()) + alignof(Q6ExpandedSuper) - 1) &
        ~(uintptr_t)(alignof(Q6ExpandedSuper) - 1));
    for (int8_t& x : q) x = (int8_t)((uint8_t)x ^ 0x80);
  }
  const ActRows act{q.data(), sums.data(), d.data(), dsum.data(), blocks};
  const int64_t ahead = prefetch == 0 ? kDefaultAhead : prefetch == kInt8NoPrefetch ? 0 : prefetch;
  constexpr auto wide = TileKernel<T, 4>(), two = TileKernel<T, 2>(), one = TileKernel<T, 1>();
  for (int64_t t = n_begin / kInt8Avx2TileRows; t * kInt8Avx2TileRows < n_end; ++t) {
    const int64_t first = t * kInt8Avx2TileRows, c0 = std::max(n_begin, first),
                  c1 = std::min(n_end, first + kInt8Avx2TileRows);
    const uint8_t* tile = w.data.get() + t * tile_bytes;
    for (int64_t i = 0; i < m;) {
      alignas(32) float out[kRows][kInt8Avx2TileRows];
      const int64_t mr = m - i >= kRows ? kRows : m - i >= 2 ? 2 : 1;
      const auto tile_rows = mr == kRows ? wide : mr == 2 ? two : one;
      if (expand) {
        if (i == 0) ExpandQ6Tile(tile, blocks / 8, expanded);
        (mr == kRows ? Q6KExpandedTile<kRows>
         : mr == 2   ? Q6KExpandedTile<2>
                     : Q6KExpandedTile<1>)(act.From(i), expanded, out[0]);
      } else {
        tile_rows(act.From(i), tile, i == 0 ? ahead : 0, out[0]);  // later passes find the tile in cache
      }
      for (int64_t r = 0; r < mr; ++r)
        for (int64_t c = c0; c < c1; ++c) y[(i + r) * n_total + c] = out[r][c - first];
      i += mr;
    }
  }
}

}  // namespace

void GemmRowsInt8Avx2(const float* a, int64_t m, const Int8Avx2PackedWeight& w, float* y, int64_t n_total,
                      int64_t n_begin, int64_t n_end, int64_t prefetch) {
  if (prefetch < 0) throw Error("int8-avx2: a prefetch distance of " + std::to_string(prefetch) + " bytes");
  if (n_begin >= n_end || m <= 0) return;
  if (w.type == DType::Q8_0) return Gemm<DType::Q8_0>(a, m, w, y, n_total, n_begin, n_end, prefetch);
  if (w.type == DType::Q4_0) return Gemm<DType::Q4_0>(a, m, w, y, n_total, n_begin, n_end, prefetch);
  if (w.type == DType::Q4_K) return Gemm<DType::Q4_K>(a, m, w, y, n_total, n_begin, n_end, prefetch);
  Gemm<DType::Q6_K>(a, m, w, y, n_total, n_begin, n_end, prefetch);
}

std::vector<int64_t> Int8Avx2PrefetchChoices(DType wt, int64_t k) {
  if (!Int8Avx2Supported(wt, k)) return {};
  return {kInt8NoPrefetch, 1024, 4096};
}

}  // namespace prism
