// Template-tier CPU micro-kernel for quantized weights as AVX512-VNNI integer dot products against
// an activation quantized per 32-element block; weights are repacked once so lanes hold 32-value blocks.
#include "backends/cpu/gemm_int8.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/weight_memory.h"
#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

constexpr int64_t kGroupBlocks = 16;                          // blocks per group: one per 32-bit lane
constexpr int64_t kGroupValues = kGroupBlocks * kQuantBlock;  // 512
// A quantized activation group: 512 signed values, then 16 f32 scales, then 16 i32 block sums.
constexpr int64_t kActGroupBytes = kGroupValues + kGroupBlocks * 4 * 2;

// Weight rows are stored in tiles of 4 (the kernel's NR), interleaved group by group: a tile's bytes,
// and the whole matrix, are then read as one sequential stream, which the hardware prefetcher follows
// (four short row streams per tile left it behind: 5-7 GB/s from DRAM instead of 14).
constexpr int64_t kTileRows = 4;

// How far ahead of the loads the kernel prefetches (a template parameter the search varies, see
// Int8PrefetchChoices): into L1 `near` bytes ahead, into L2 `far` bytes ahead (none where 0); none at all
// where near is 0; and whether one activation row reads each thread's rows as two streams (GemvTwoStreams).
// The default follows the CPU's maker, whose prefetchers differ. On AMD it fills L1 alone, 6 KiB ahead: on
// Zen 5 (AMD EPYC, one thread, weights evicted, `prism_gemm_bench 1 8192 2048 30 1 cold`, against a plain
// read of the same bytes beside each repeat) the kernels then read Q8_0, Q4_K and Q6_K at 89-95% of the plain
// read's rate, against 78-84% with 4 KiB into L1 and 16 KiB into L2 and 76-86% with 12-16 KiB into L1 alone.
// On Intel it fills both (4 KiB and 16 KiB ahead): on an Intel Xeon with AMX
// (`prism_gemm_bench 1 N K 10 T cold`, N x K of 2048 x 2048 to 128256 x 2048, one and two threads) Q8_0,
// Q4_0, Q4_K and Q6_K took 5-16% less time than with the L1 fill alone in all 32 cases (at 128256 x 2048 on
// two threads 90-101% of the plain read against 63-94%), and an earlier Intel host's decode gained 12%.
// Later on that Xeon, decode read two streams 512 bytes ahead into L1 and 2 KiB into L2 (kIntelDefault):
// a plain read of 2 GiB there reached 29.8 GB/s as one stream per thread and 34.5 as two, 1 KiB ahead, and
// 4 KiB ahead only 24-30 (prism_roofline_probe's variants); the 1B shape's decode, two threads, went from
// 34.6-35.8 to 37.8-38.8 tokens/s in Q4_K_M (26.5-26.9 to 29.1-30.2 in Q6_K, 23.2 to 24.5-24.7 in Q8_0,
// 41.9-42.5 to 47.2-47.8 in Q4_0; one thread, Q4_K_M, 18.3-18.7 to 20.3-21.0). The other maker's default
// stays a searched value.
struct Prefetch {
  int64_t near, far;
  bool two_streams;
};
constexpr int64_t kIntelDefault = 512 + kInt8PrefetchToL2 + kInt8TwoStreams;
bool PrefetchToL2ByDefault() { return IntelPrefetchers(); }
Prefetch PrefetchOf(int64_t param) {
  if (param == 0) return PrefetchToL2ByDefault() ? PrefetchOf(kIntelDefault) : Prefetch{6144, 0, false};
  if (param == kInt8NoPrefetch) return {0, 0, false};
  const int64_t near = param & (kInt8PrefetchToL2 - 1);
  return {near, param & kInt8PrefetchToL2 ? 4 * near : 0, (param & kInt8TwoStreams) != 0};
}

// A group's values: bytes (Q8_0), nibbles (Q4_0, Q4_K; IQ4_NL's and IQ4_XS's indices into their table), or
// low nibbles and then a plane of their top bits: Q5_K's one 64-byte plane (bit c of a byte for nibble chunk
// c's low nibble, bit 4 + c for its high one). Q6_K's six-bit values in three vectors per four 8-bit chunks
// (values 0-15 of each lane, then 16-31): chunks 0-2 in the vectors' low six bits, chunk 3 in their top two
// bits (its bits 0-1 in the first, 2-3 in the second, 4-5 in the third). Q2_K's and Q3_K's values are 2-bit
// crumbs, four to a byte (bits 2s and 2s + 1 of the byte at chunk c's place in vector c % 2 hold 8-bit chunk
// c = c % 2 + 2s); Q3_K's then one plane of their third bits (bit c for chunk c).
constexpr int64_t ValueBytes(DType t) {
  return t == DType::Q8_0   ? kGroupValues
         : t == DType::Q2_K ? kGroupValues / 4
         : t == DType::Q3_K ? kGroupValues / 4 + 64
         : t == DType::Q6_K ? kGroupValues / 2 + 128
         : t == DType::Q5_K ? kGroupValues / 2 + 64
                            : kGroupValues / 2;
}
// The scales after them: 16 f16 block scales; for IQ4_XS, its 16 six-bit scales less 32 as signed bytes, then
// the two blocks' f16 d; for Q4_K and Q5_K, the two blocks' 16 six-bit scales and 16
// mins as bytes, then their f16 d[2] and dmin[2]; for Q6_K and Q3_K, the signed scales of each lane's values
// 0-15, then of 16-31, then the two blocks' f16 d; for Q2_K, GGUF's scale bytes (the scale in the low
// nibble, the min in the high one) of each lane's values 0-15, then of 16-31, then d[2] and dmin[2].
constexpr int64_t ScaleBytes(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q2_K ? 2 * kGroupBlocks + 4 * 2
         : t == DType::Q6_K || t == DType::Q3_K                   ? 2 * kGroupBlocks + 2 * 2
         : t == DType::IQ4_XS                                     ? kGroupBlocks + 2 * 2
                                                                  : kGroupBlocks * 2;
}
constexpr int64_t GroupBytes(DType t) { return ValueBytes(t) + ScaleBytes(t); }

// Position of value kk (0..31) of lane l's block inside a group's value bytes, for 8-bit values.
constexpr int64_t LaneOffset(int64_t l, int64_t kk) { return (kk / 4) * 64 + l * 4 + kk % 4; }

#define PRISM_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

}  // namespace

// q = round(x / d) with d = max|x| / 127 (0 for a block of zeros).
PRISM_VNNI float QuantizeActivationBlock(const float* x, int8_t* q, int32_t* sum) {
  float id = 0;
  const float d = ActivationScale(x, kQuantBlock, &id);
  RoundActivationBlock(x, id, q, sum);
  return d;
}

PRISM_VNNI float ActivationScale(const float* x, int64_t n, float* id) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  const float m = _mm512_reduce_max_ps(amax);
  *id = m > 0 ? 127.0f / m : 0.0f;
  // A NaN in the values makes their scale NaN (the max above may drop it), so every output it reaches is NaN.
  return nan ? NAN : m / 127.0f;
}

PRISM_VNNI void RoundActivationBlock(const float* x, float id, int8_t* q, int32_t* sum) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  __m512i q0 = _mm512_cvtps_epi32(
      _mm512_roundscale_ps(_mm512_mul_ps(x0, _mm512_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT));
  __m512i q1 = _mm512_cvtps_epi32(
      _mm512_roundscale_ps(_mm512_mul_ps(x1, _mm512_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT));
  const __m128i b0 = _mm512_cvtepi32_epi8(q0), b1 = _mm512_cvtepi32_epi8(q1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), b0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), b1);
  // The sum of the bytes stored: for a NaN or an infinity the 32-bit lanes hold INT_MIN, and their sum
  // would overflow.
  if (sum)
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtepi8_epi32(b0), _mm512_cvtepi8_epi32(b1)));
}

namespace {

// A row whose last group holds at most half a group of blocks (K a multiple of 256 but not of 512, or up to
// 8 blocks of 32 past the last whole group) shares that group with its tile neighbour: the even row of a pair
// takes lanes 0-7, the odd one lanes 8-15, and the activation's last group repeats its lanes 0-7 in 8-15.
// Padding the group instead read up to twice the tail's bytes (Q4_K at K = 2816, a Mixtral-shaped expert's
// down projection: 12% more bytes a row than GGUF's, now 2.8%). One thread, weights cold (prism_gemm_bench
// 1 N K 50 1 cold): K = 2816 Q4_K 0.053 -> 0.051 ms, Q6_K 0.072 -> 0.067; K = 1280 Q4_0 0.053 -> 0.043, Q4_K
// 0.053 -> 0.045. Q8_0 keeps its padding: paired, it ran 4-8% slower (0.092-0.097 -> 0.100 ms), not
// explained.
constexpr bool PairedTail(DType t, int64_t k) {
  const int64_t tail = k / kQuantBlock % kGroupBlocks;
  return t != DType::Q8_0 && tail > 0 && tail <= kGroupBlocks / 2;
}

// One activation row into groups: each block quantized by QuantizeActivationBlock, with its sum; a paired
// tail's group repeats its lanes 0-7 in 8-15.
PRISM_VNNI void QuantizeRow(const float* a, int64_t k, int64_t groups, bool paired, uint8_t* out) {
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* values = out + g * kActGroupBytes;
    float* scales = reinterpret_cast<float*>(values + kGroupValues);
    int32_t* sums = reinterpret_cast<int32_t*>(scales + kGroupBlocks);
    std::memset(values, 0, kGroupValues);
    for (int64_t l = 0; l < kGroupBlocks; ++l) {
      int64_t k0 = (g * kGroupBlocks + l) * kQuantBlock;
      scales[l] = 0;
      sums[l] = 0;
      if (k0 >= k) continue;  // padding block: zero values, zero scale
      alignas(16) int8_t q[32];
      scales[l] = QuantizeActivationBlock(a + k0, q, &sums[l]);
      for (int64_t c = 0; c < 8; ++c) std::memcpy(values + LaneOffset(l, c * 4), q + c * 4, 4);
    }
    if (g == groups - 1 && paired) {
      constexpr int64_t kHalf = kGroupBlocks / 2;
      for (int64_t c = 0; c < 8; ++c) std::memcpy(values + c * 64 + kHalf * 4, values + c * 64, kHalf * 4);
      std::memcpy(scales + kHalf, scales, kHalf * sizeof(float));
      std::memcpy(sums + kHalf, sums, kHalf * sizeof(int32_t));
    }
  }
}

constexpr int64_t GroupsOf(int64_t k) { return (k / kQuantBlock + kGroupBlocks - 1) / kGroupBlocks; }

// The m activation rows quantized into groups, in this thread's buffer. Every thread quantizes the
// activation itself: it is small next to the weights it meets.
const uint8_t* QuantizeRows(const float* a, int64_t m, int64_t k, bool paired) {
  const int64_t groups = GroupsOf(k);
  thread_local std::vector<uint8_t> act;
  act.resize((size_t)(m * groups * kActGroupBytes));
  for (int64_t i = 0; i < m; ++i)
    QuantizeRow(a + i * k, k, groups, paired, act.data() + i * groups * kActGroupBytes);
  return act.data();
}

// Where row r's group g starts in packed weights, and the lane its first block takes there.
struct GroupPlace {
  int64_t offset, lane0;
};
inline GroupPlace PlaceOf(const Int8PackedWeight& p, int64_t r, int64_t g) {
  const int64_t gb = GroupBytes(p.type), tile = r / kTileRows * p.tile_bytes + g * kTileRows * gb;
  if (p.paired_tail && g == p.groups - 1) return {tile + r % kTileRows / 2 * gb, r % 2 * kGroupBlocks / 2};
  return {tile + r % kTileRows * gb, 0};
}

// Q5_K's nibble chunk c's top bit moved to bit 4 (bit c of the plane for a low nibble, 4 + c for a high one);
// the rest is masked later. A 16-bit shift moves bits across bytes only into positions the mask drops.
PRISM_VNNI inline __m512i TopBit(__m512i plane, int c, bool high_nibble) {
  return high_nibble ? _mm512_srli_epi16(plane, c) : _mm512_slli_epi16(plane, 4 - c);
}

// 16 bytes as f32 lanes, signed or not.
PRISM_VNNI inline __m512 Bytes(const uint8_t* p, bool is_signed) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}
// `count` (2 or 4) f16 values as the first f32 lanes; the others undefined.
PRISM_VNNI inline __m512 LoadHalves(const uint8_t* p, int count) {
  uint64_t h = 0;
  std::memcpy(&h, p, 2 * count);
  return _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)));
}

// One group of MR activation rows (at ag, a_row bytes apart) against NR weight rows (at wg, one group apart),
// added to acc. Per group, integer sums per lane (= block), corrected for the weights' offset (Q8_0 stored
// +128, Q4_0 nibbles +8, Q6_K +32; the Q4_K/Q5_K min through the activation's block sums), then scaled in
// f32.
template <DType T, int MR, int NR>
PRISM_VNNI __attribute__((always_inline)) inline void AddGroup(const uint8_t* ag, int64_t a_row,
                                                               const uint8_t* wg, __m512 (&acc)[MR][NR],
                                                               Prefetch ahead,
                                                               [[maybe_unused]] __m512i table) {
  constexpr int64_t kValues = ValueBytes(T), kGroup = GroupBytes(T), w_row = kGroup;
  // Q8_0's bytes and the IQ4 tables' values are stored + 128, Q4_0's nibbles + 8.
  constexpr bool kTable = T == DType::IQ4_NL || T == DType::IQ4_XS;
  constexpr int kOffsetShift = T == DType::Q8_0 || kTable ? 7 : 3;
  // Per lane: the integer sum (Q6_K: over values 0-15; p2 over 16-31, first_sum the activation's 0-15).
  __m512i p[MR][NR], p2[MR][NR], first_sum[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    first_sum[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) p[i][j] = p2[i][j] = _mm512_setzero_si512();
  }
  // The stream ahead, a line per 64 bytes of this group's tile slice: the prefetcher alone stays
  // too close behind the loads. Into L1 just ahead, and into L2 further ahead: L1 can wait on only
  // so many misses at once, too few to cover the memory latency at this core's share of bandwidth.
  // (Prefetching never faults, so lines past the end of the weights are harmless.)
  if (ahead.near > 0)
    for (int64_t l = 0; l < kTileRows * kGroup; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(wg + ahead.near + l), _MM_HINT_T0);
      if (ahead.far > 0) _mm_prefetch(reinterpret_cast<const char*>(wg + ahead.far + l), _MM_HINT_T1);
    }
  if constexpr (T == DType::Q8_0) {
    for (int c = 0; c < 8; ++c) {
      __m512i wv[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_si512(wg + j * w_row + c * 64);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        __m512i av = _mm512_loadu_si512(ag + i * a_row + c * 64);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) p[i][j] = _mm512_dpbusd_epi32(p[i][j], wv[j], av);
      }
    }
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {  // crumbs (Q3_K: third bits from the plane)
    const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4), one = _mm512_set1_epi8(1);
    __m512i plane[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      plane[j] = T == DType::Q3_K ? _mm512_loadu_si512(wg + j * w_row + kGroupValues / 4) : three;
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      __m512i raw[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) raw[j] = _mm512_loadu_si512(wg + j * w_row + v * 64);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int c = v + 2 * s;  // the 8-bit chunk: values 4c..4c+3 of each lane
        __m512i q[NR];
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {  // crumb | (third bit moved from bit c to bit 2): A | (B & C)
          q[j] = _mm512_and_si512(_mm512_srli_epi16(raw[j], 2 * s), three);
          if constexpr (T == DType::Q3_K)
            q[j] = _mm512_ternarylogic_epi32(
                q[j], c <= 2 ? _mm512_slli_epi16(plane[j], 2 - c) : _mm512_srli_epi16(plane[j], c - 2), four,
                0xF8);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const __m512i av = _mm512_loadu_si512(ag + i * a_row + c * 64);
          if (c < 4) first_sum[i] = _mm512_dpbusd_epi32(first_sum[i], one, av);
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) {
            if (c < 4)
              p[i][j] = _mm512_dpbusd_epi32(p[i][j], q[j], av);
            else
              p2[i][j] = _mm512_dpbusd_epi32(p2[i][j], q[j], av);
          }
        }
      }
    }
  } else if constexpr (T == DType::Q6_K) {  // four chunks from three vectors (ValueBytes); offset 32
    const __m512i six = _mm512_set1_epi8(0x3F), top = _mm512_set1_epi8((char)0xC0),
                  bits01 = _mm512_set1_epi8(0x03), bits03 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {  // values 0-15 of each lane (p), then 16-31 (p2)
      __m512i q[4][NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        const uint8_t* v = wg + j * w_row + half * 192;
        const __m512i v0 = _mm512_loadu_si512(v), v1 = _mm512_loadu_si512(v + 64),
                      v2 = _mm512_loadu_si512(v + 128);
        q[0][j] = _mm512_and_si512(v0, six);
        q[1][j] = _mm512_and_si512(v1, six);
        q[2][j] = _mm512_and_si512(v2, six);
        // Chunk 3: bits 0-1 from v0's top bits, 2-3 from v1's, 4-5 from v2's (cleared around them first, so
        // that the 16-bit shift brings nothing into bits 6-7). vpternlog 0xE4: C ? A : B.
        const __m512i low4 =
            _mm512_ternarylogic_epi32(_mm512_srli_epi16(v0, 6), _mm512_srli_epi16(v1, 4), bits01, 0xE4);
        q[3][j] =
            _mm512_ternarylogic_epi32(low4, _mm512_srli_epi16(_mm512_and_si512(v2, top), 2), bits03, 0xE4);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const __m512i av = _mm512_loadu_si512(ag + i * a_row + (4 * half + c) * 64);
          if (half == 0) first_sum[i] = _mm512_dpbusd_epi32(first_sum[i], one, av);
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) {
            if (half == 0)
              p[i][j] = _mm512_dpbusd_epi32(p[i][j], q[c][j], av);
            else
              p2[i][j] = _mm512_dpbusd_epi32(p2[i][j], q[c][j], av);
          }
        }
    }
  } else if constexpr (T == DType::Q5_K) {  // Q4_0's nibbles, top bits from the plane
    const __m512i low = _mm512_set1_epi8(0x0f), top = _mm512_set1_epi8(0x10);
    __m512i plane[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) plane[j] = _mm512_loadu_si512(wg + j * w_row + kGroupValues / 2);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i lo[NR], hi[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        __m512i raw = _mm512_loadu_si512(wg + j * w_row + c * 64);
        // nibble | (top bit from bit 4): vpternlog's A | (B & C)
        lo[j] = _mm512_ternarylogic_epi32(_mm512_and_si512(raw, low), TopBit(plane[j], c, false), top, 0xF8);
        hi[j] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low),
                                          TopBit(plane[j], c, true), top, 0xF8);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        __m512i a0 = _mm512_loadu_si512(ag + i * a_row + c * 64);
        __m512i a1 = _mm512_loadu_si512(ag + i * a_row + (c + 4) * 64);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j)
          p[i][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(p[i][j], lo[j], a0), hi[j], a1);
      }
    }
  } else {  // Q4_0, Q4_K, IQ4: a byte holds value c (low nibble) and value c + 4 chunks (high nibble)
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      __m512i lo[NR], hi[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        __m512i raw = _mm512_loadu_si512(wg + j * w_row + c * 64);
        lo[j] = _mm512_and_si512(raw, low);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        if constexpr (kTable) {
          lo[j] = _mm512_shuffle_epi8(table, lo[j]);
          hi[j] = _mm512_shuffle_epi8(table, hi[j]);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        __m512i a0 = _mm512_loadu_si512(ag + i * a_row + c * 64);
        __m512i a1 = _mm512_loadu_si512(ag + i * a_row + (c + 4) * 64);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j)
          p[i][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(p[i][j], lo[j], a0), hi[j], a1);
      }
    }
  }
  // Lanes 0-7 hold the group's first block of 256 values, 8-15 its second.
  const __m512i first_or_second = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  if constexpr (T == DType::Q4_K ||
                T == DType::Q5_K) {  // lane l: (d scale_l sum(q a) - dmin min_l sum(a)) a's d
    __m512 scale[NR], min[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* s = wg + j * w_row + kValues;
      const __m512 d = LoadHalves(s + 32, 4);  // d0, d1, dmin0, dmin1
      scale[j] = _mm512_mul_ps(Bytes(s, false), _mm512_permutexvar_ps(first_or_second, d));
      min[j] =
          _mm512_mul_ps(Bytes(s + 16, false),
                        _mm512_permutexvar_ps(_mm512_add_epi32(first_or_second, _mm512_set1_epi32(2)), d));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const uint8_t* scales = ag + i * a_row + kGroupValues;
      const __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(scales));
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_loadu_si512(scales + 64));
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm512_fmadd_ps(
            _mm512_fmsub_ps(_mm512_cvtepi32_ps(p[i][j]), scale[j], _mm512_mul_ps(sum, min[j])), da,
            acc[i][j]);
    }
  } else if constexpr (T == DType::Q2_K) {  // lane l: d scale sum(q a) - dmin min sum(a), per 16 values
    __m512 first_scale[NR], second_scale[NR], first_min[NR], second_min[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* s = wg + j * w_row + kValues;
      const __m512 dd = LoadHalves(s + 32, 4);  // d0, d1, dmin0, dmin1
      const __m512 d = _mm512_permutexvar_ps(first_or_second, dd),
                   dmin = _mm512_permutexvar_ps(_mm512_add_epi32(first_or_second, _mm512_set1_epi32(2)), dd);
      const __m512i b0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))),
                    b1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16))),
                    nib = _mm512_set1_epi32(0xF);
      first_scale[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b0, nib)), d);
      second_scale[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b1, nib)), d);
      first_min[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b0, 4)), dmin);
      second_min[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b1, 4)), dmin);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const uint8_t* scales = ag + i * a_row + kGroupValues;
      const __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(scales));
      const __m512 sum0 = _mm512_cvtepi32_ps(first_sum[i]),
                   sum1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(scales + 64), first_sum[i]));
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        const __m512 mins = _mm512_fmadd_ps(sum0, first_min[j], _mm512_mul_ps(sum1, second_min[j]));
        const __m512 dots = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[i][j]), first_scale[j],
                                            _mm512_mul_ps(_mm512_cvtepi32_ps(p2[i][j]), second_scale[j]));
        acc[i][j] = _mm512_fmadd_ps(_mm512_sub_ps(dots, mins), da, acc[i][j]);
      }
    }
  } else if constexpr (T == DType::Q6_K || T == DType::Q3_K) {
    // lane l: d x (scale x sum((q - offset) a)) over each 16 values; the offset 32 (Q6_K) or 4 (Q3_K)
    constexpr int kShift = T == DType::Q6_K ? 5 : 2;
    __m512 first_scale[NR], second_scale[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* s = wg + j * w_row + kValues;
      const __m512 d = _mm512_permutexvar_ps(first_or_second, LoadHalves(s + 32, 2));
      first_scale[j] = _mm512_mul_ps(Bytes(s, true), d);
      second_scale[j] = _mm512_mul_ps(Bytes(s + 16, true), d);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const uint8_t* scales = ag + i * a_row + kGroupValues;
      const __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(scales));
      const __m512i first_offset = _mm512_slli_epi32(first_sum[i], kShift),
                    second_offset = _mm512_slli_epi32(
                        _mm512_sub_epi32(_mm512_loadu_si512(scales + 64), first_sum[i]), kShift);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm512_fmadd_ps(
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(p[i][j], first_offset)), first_scale[j],
                            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(p2[i][j], second_offset)),
                                          second_scale[j])),
            da, acc[i][j]);
    }
  } else {  // lane l: its scale (IQ4_XS: d x (its six-bit scale - 32)) x sum((q - offset) a)
    __m512 dw[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      if constexpr (T == DType::IQ4_XS)
        dw[j] = _mm512_mul_ps(
            Bytes(wg + j * w_row + kValues, true),
            _mm512_permutexvar_ps(first_or_second, LoadHalves(wg + j * w_row + kValues + kGroupBlocks, 2)));
      else
        dw[j] =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + j * w_row + kValues)));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const uint8_t* scales = ag + i * a_row + kGroupValues;
      __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(scales));
      __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(scales + 64), kOffsetShift);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(p[i][j], offset)),
                                    _mm512_mul_ps(dw[j], da), acc[i][j]);
    }
  }
}

// IQ4_NL/IQ4_XS: a nibble indexes the non-linear table (its values + 128), looked up by vpshufb.
PRISM_VNNI inline __m512i Iq4Table() {
  alignas(16) uint8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = (uint8_t)(kIq4NlValues[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// The last group shared by row pairs (PairedTail): NP pairs' groups at wt against the tile's rows from
// position p0 (0..3) on; each row's share is its half of its pair's lanes, into out. Out of line, with its
// own out: the tile's accumulators stay in registers (passed by reference, they had lived in memory: 9%
// slower).
template <DType T, int MR, int NR, int NP>
PRISM_VNNI __attribute__((noinline)) void PairSums(const uint8_t* ag, int64_t a_row, const uint8_t* wt,
                                                   int p0, __m512 (&out)[MR][NR], Prefetch ahead,
                                                   __m512i table) {
  __m512 pacc[MR][NP];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int c = 0; c < NP; ++c) pacc[i][c] = _mm512_setzero_ps();
  AddGroup<T, MR, NP>(ag, a_row, wt, pacc, ahead, table);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const int pos = p0 + j, c = pos / 2 - p0 / 2;
    const __mmask16 half = pos % 2 ? 0xFF00 : 0x00FF;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) out[i][j] = _mm512_maskz_mov_ps(half, pacc[i][c]);
  }
}

// MR activation rows x NR weight rows of one tile (the first at position p0 of its tile, its groups at w)
// over all groups; with a paired tail (kPaired), the last group is its pair's. (A template parameter: as a
// run-time flag, the unpaired tiles ran 2-9% slower.)
template <DType T, int MR, int NR, bool kPaired>
PRISM_VNNI void Tile(const uint8_t* a, int64_t a_row, const uint8_t* w, int64_t groups, int p0, float* y,
                     int64_t ldy, Prefetch ahead) {
  constexpr int64_t kGroup = GroupBytes(T);
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  __m512i table = _mm512_setzero_si512();
  if constexpr (T == DType::IQ4_NL || T == DType::IQ4_XS) table = Iq4Table();
  const int64_t full = groups - (kPaired ? 1 : 0);
  for (int64_t g = 0; g < full; ++g)
    AddGroup<T, MR, NR>(a + g * kActGroupBytes, a_row, w + g * kTileRows * kGroup, acc, ahead, table);
  if constexpr (kPaired) {
    const uint8_t* ag = a + full * kActGroupBytes;
    const uint8_t* wt = w + full * kTileRows * kGroup + (p0 / 2 - p0) * kGroup;  // the first row's pair
    __m512 tail[MR][NR];
    if ((p0 + NR - 1) / 2 == p0 / 2)
      PairSums<T, MR, NR, 1>(ag, a_row, wt, p0, tail, ahead, table);
    else
      PairSums<T, MR, NR, 2>(ag, a_row, wt, p0, tail, ahead, table);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_add_ps(acc[i][j], tail[i][j]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

// One activation row against two whole tiles (at w[0] and w[1], their sums to y[0] and y[1]) read in
// lockstep, group by group: two streams, whose misses the core waits on together (a plain read as one stream
// per thread reached 86% of two streams' rate, see Prefetch). Each tile's sums are Tile<T, 1, 4, kPaired>'s,
// bit for bit.
template <DType T, bool kPaired>
PRISM_VNNI void TwoTiles(const uint8_t* a, const uint8_t* const (&w)[2], int64_t groups, float* const (&y)[2],
                         Prefetch ahead) {
  constexpr int64_t kGroup = GroupBytes(T);
  __m512 acc[2][1][kTileRows];
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s)
#pragma GCC unroll 4
    for (int j = 0; j < kTileRows; ++j) acc[s][0][j] = _mm512_setzero_ps();
  __m512i table = _mm512_setzero_si512();
  if constexpr (T == DType::IQ4_NL || T == DType::IQ4_XS) table = Iq4Table();
  const int64_t full = groups - (kPaired ? 1 : 0);
  for (int64_t g = 0; g < full; ++g)
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s)
      AddGroup<T, 1, kTileRows>(a + g * kActGroupBytes, 0, w[s] + g * kTileRows * kGroup, acc[s], ahead,
                                table);
  for (int s = 0; s < 2; ++s) {
    if constexpr (kPaired) {
      __m512 tail[1][kTileRows];
      PairSums<T, 1, kTileRows, 2>(a + full * kActGroupBytes, 0, w[s] + full * kTileRows * kGroup, 0, tail,
                                   ahead, table);
#pragma GCC unroll 4
      for (int j = 0; j < kTileRows; ++j) acc[s][0][j] = _mm512_add_ps(acc[s][0][j], tail[0][j]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < kTileRows; ++j) y[s][j] = _mm512_reduce_add_ps(acc[s][0][j]);
  }
}

template <DType T, int NR, bool kPaired>
PRISM_VNNI void TileRows(int mr, const uint8_t* a, int64_t a_row, const uint8_t* w, int64_t groups, int p0,
                         float* y, int64_t ldy, Prefetch ahead) {
  switch (mr) {
    case 3: return Tile<T, 3, NR, kPaired>(a, a_row, w, groups, p0, y, ldy, ahead);
    case 2: return Tile<T, 2, NR, kPaired>(a, a_row, w, groups, p0, y, ldy, ahead);
    default: return Tile<T, 1, NR, kPaired>(a, a_row, w, groups, p0, y, ldy, ahead);
  }
}

template <DType T, bool kPaired>
PRISM_VNNI void GemmVnni(const uint8_t* a, int64_t m, const Int8PackedWeight& w, float* y, int64_t n_total,
                         int64_t n_begin, int64_t n_end, Prefetch ahead) {
  const int64_t a_row = w.groups * kActGroupBytes;
  constexpr int64_t kMBlock = 48;  // quantized activation rows kept hot in cache while weight tiles stream
  for (int64_t m0 = 0; m0 < m; m0 += kMBlock) {
    int64_t m1 = std::min(m, m0 + kMBlock);
    for (int64_t n = n_begin, nr; n < n_end; n += nr) {
      nr = std::min<int64_t>(kTileRows - n % kTileRows, n_end - n);  // never across a tile
      const int p0 = (int)(n % kTileRows);  // row n's place in its tile (group 0 as if unpaired: Tile's w)
      const uint8_t* wn = w.data.get() + n / kTileRows * w.tile_bytes + p0 * GroupBytes(T);
      for (int64_t i = m0; i < m1; i += 3) {
        int mr = (int)std::min<int64_t>(3, m1 - i);
        const uint8_t* ai = a + i * a_row;
        float* yi = y + i * n_total + n;
        switch (nr) {
          case 4: TileRows<T, 4, kPaired>(mr, ai, a_row, wn, w.groups, p0, yi, n_total, ahead); break;
          case 3: TileRows<T, 3, kPaired>(mr, ai, a_row, wn, w.groups, p0, yi, n_total, ahead); break;
          case 2: TileRows<T, 2, kPaired>(mr, ai, a_row, wn, w.groups, p0, yi, n_total, ahead); break;
          default: TileRows<T, 1, kPaired>(mr, ai, a_row, wn, w.groups, p0, yi, n_total, ahead); break;
        }
      }
    }
  }
}

// One activation row against rows [n_begin, n_end) as two streams: the whole tiles cut in two halves, read
// in lockstep a tile of each at a time (TwoTiles); partial tiles at either end, and the first half's extra
// tile, one at a time.
template <DType T, bool kPaired>
PRISM_VNNI void GemvTwoStreams(const uint8_t* a, const Int8PackedWeight& w, float* y, int64_t n_begin,
                               int64_t n_end, Prefetch ahead) {
  const int64_t first = (n_begin + kTileRows - 1) / kTileRows, last = n_end / kTileRows;  // whole tiles
  const int64_t pairs = (last - first) / 2, second = last - pairs;
  if (pairs == 0) return GemmVnni<T, kPaired>(a, 1, w, y, 0, n_begin, n_end, ahead);
  for (int64_t t = 0; t < pairs; ++t) {
    const int64_t tiles[2] = {first + t, second + t};
    const uint8_t* const wt[2] = {w.data.get() + tiles[0] * w.tile_bytes,
                                  w.data.get() + tiles[1] * w.tile_bytes};
    float* const yt[2] = {y + tiles[0] * kTileRows, y + tiles[1] * kTileRows};
    TwoTiles<T, kPaired>(a, wt, w.groups, yt, ahead);
  }
  GemmVnni<T, kPaired>(a, 1, w, y, 0, n_begin, first * kTileRows, ahead);
  GemmVnni<T, kPaired>(a, 1, w, y, 0, (first + pairs) * kTileRows, second * kTileRows, ahead);
  GemmVnni<T, kPaired>(a, 1, w, y, 0, last * kTileRows, n_end, ahead);
}

template <DType T>
void GemmVnniOf(const uint8_t* a, int64_t m, const Int8PackedWeight& w, float* y, int64_t n_total,
                int64_t n_begin, int64_t n_end, Prefetch ahead) {
  if (m == 1 && ahead.two_streams)
    return w.paired_tail ? GemvTwoStreams<T, true>(a, w, y, n_begin, n_end, ahead)
                         : GemvTwoStreams<T, false>(a, w, y, n_begin, n_end, ahead);
  if (w.paired_tail) return GemmVnni<T, true>(a, m, w, y, n_total, n_begin, n_end, ahead);
  GemmVnni<T, false>(a, m, w, y, n_total, n_begin, n_end, ahead);
}

// The GGUF super-blocks of n rows of K values, each with where its half of a packed group goes: f(block,
// values, scales, half) for block b of row r, its group's value bytes and scale bytes, and which of the
// group's two super-blocks it is (lanes half * 8 to half * 8 + 7; in a paired tail, the row's half).
template <class Block, class F>
void ForEachSuperBlock(const Block* src, DType t, int64_t n, int64_t k, Int8PackedWeight* p, F&& f) {
  const int64_t blocks = k / kSuperBlock;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const GroupPlace at = PlaceOf(*p, r, b / 2);
      uint8_t* values = p->data.get() + at.offset;
      f(src[r * blocks + b], values, values + ValueBytes(t), b % 2 + at.lane0 / 8);
    }
}

// Q4_K and Q5_K rows into groups of two blocks: lane l holds block l / 8's sub-block l % 8 as Q4_0 holds a
// block (byte j: values j and j + 16; Q5_K's fifth bits in the plane), then the 16 scales, the 16 mins,
// d[2] and dmin[2].
template <class Block>
void PackK45(const Block* src, DType t, int64_t n, int64_t k, Int8PackedWeight* p) {
  ForEachSuperBlock(src, t, n, k, p, [](const Block& x, uint8_t* values, uint8_t* scales, int64_t half) {
    uint8_t unpacked[16];  // 8 scales, 8 mins
    UnpackScalesK4(x.scales, unpacked);
    for (int s = 0; s < 8; ++s) {
      const int64_t lane = half * 8 + s;
      scales[lane] = unpacked[s];
      scales[kGroupBlocks + lane] = unpacked[8 + s];
      // Sub-block s: chunk s / 2's 32 bytes, low nibbles for even s, high for odd.
      const uint8_t* qs = x.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
        values[LaneOffset(lane, j)] =
            (uint8_t)(((qs[j] >> shift) & 0x0F) | (((qs[j + 16] >> shift) & 0x0F) << 4));
        if constexpr (std::is_same_v<Block, BlockQ5_K>) {  // value l's fifth bit: bit s of qh[l]
          uint8_t& plane = values[kGroupValues / 2 + lane * 4 + j % 4];
          plane |= (uint8_t)(((x.qh[j] >> s) & 1) << (j / 4));
          plane |= (uint8_t)(((x.qh[j + 16] >> s) & 1) << (4 + j / 4));
        }
      }
    }
    uint16_t* d = reinterpret_cast<uint16_t*>(scales + 2 * kGroupBlocks);
    d[half] = x.d;
    d[2 + half] = x.dmin;
  });
}

// Q6_K rows into groups of two blocks: lane l holds block l / 8's values 32 (l % 8) to 32 (l % 8) + 31
// (0..63, stored with offset 32), four 8-bit chunks in three vectors (ValueBytes), with the signed scales of
// their two 16-value halves; then d[2].
void PackQ6K(const BlockQ6_K* src, int64_t n, int64_t k, Int8PackedWeight* p) {
  ForEachSuperBlock(src, DType::Q6_K, n, k, p,
                    [](const BlockQ6_K& x, uint8_t* values, uint8_t* scales, int64_t half) {
                      uint8_t q[kSuperBlock];  // 0..63, in ggml's order
                      float scale[kSuperBlock / 16], offset[kSuperBlock / 16];
                      BlockFormatInts(DType::Q6_K, &x, q, scale, offset);
                      for (int s = 0; s < 8; ++s) {
                        const int64_t lane = half * 8 + s;
                        for (int64_t kk = 0; kk < kQuantBlock; ++kk) {
                          const uint8_t v = q[32 * s + kk];
                          const int64_t c = kk / 4 % 4;  // the chunk within its half
                          uint8_t* vec = values + kk / 16 * 192 + lane * 4 + kk % 4;
                          if (c < 3) {
                            vec[64 * c] |= v;
                          } else {
                            for (int piece = 0; piece < 3; ++piece)
                              vec[64 * piece] |= (uint8_t)(((v >> (2 * piece)) & 3) << 6);
                          }
                        }
                        scales[lane] = (uint8_t)x.scales[2 * s];
                        scales[kGroupBlocks + lane] = (uint8_t)x.scales[2 * s + 1];
                      }
                      reinterpret_cast<uint16_t*>(scales + 2 * kGroupBlocks)[half] = x.d;
                    });
}

// Q3_K (and Q2_K) rows into groups of two blocks: lane l holds block l / 8's values 32 (l % 8) to 32 (l % 8)
// + 31 (0..7, stored with offset 4) as crumbs and a plane of third bits, with the signed scales of their two
// 16-value halves; then d[2]. Q2_K likewise, without the plane: its scale bytes as GGUF's, then d[2] and
// dmin[2].
template <DType T, class Block>
void PackCrumbs(const Block* src, int64_t n, int64_t k, Int8PackedWeight* p) {
  ForEachSuperBlock(src, T, n, k, p, [](const Block& x, uint8_t* values, uint8_t* scales, int64_t half) {
    uint8_t q[kSuperBlock];
    float scale[kSuperBlock / 16], offset[kSuperBlock / 16];
    BlockFormatInts(T, &x, q, scale, offset);  // Q3_K: q = value + 4; in ggml's order
    uint8_t* plane = values + kGroupValues / 4;
    for (int s = 0; s < 8; ++s) {
      const int64_t lane = half * 8 + s;
      const uint8_t* v = q + 32 * s;
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        const int64_t c = j / 4, at = lane * 4 + j % 4;
        values[(c % 2) * 64 + at] |= (uint8_t)((v[j] & 3) << (2 * (c / 2)));
        if constexpr (T == DType::Q3_K) plane[at] |= (uint8_t)(((v[j] >> 2) & 1) << c);
      }
      if constexpr (T == DType::Q3_K) {
        scales[lane] = (uint8_t)(int8_t)ScaleQ3K(x.scales, 2 * s);
        scales[kGroupBlocks + lane] = (uint8_t)(int8_t)ScaleQ3K(x.scales, 2 * s + 1);
      } else {
        scales[lane] = x.scales[2 * s];
        scales[kGroupBlocks + lane] = x.scales[2 * s + 1];
      }
    }
    uint16_t* d = reinterpret_cast<uint16_t*>(scales + 2 * kGroupBlocks);
    d[half] = x.d;
    if constexpr (T == DType::Q2_K) d[2 + half] = x.dmin;
  });
}

// IQ4_XS rows into groups of two blocks: lane l holds block l / 8's sub-block l % 8 as Q4_0 holds a block
// (its 16 index bytes as stored), then the 16 scales less 32 as signed bytes, then d[2].
void PackIq4Xs(const BlockIQ4_XS* src, int64_t n, int64_t k, Int8PackedWeight* p) {
  ForEachSuperBlock(
      src, DType::IQ4_XS, n, k, p, [](const BlockIQ4_XS& x, uint8_t* values, uint8_t* scales, int64_t half) {
        for (int s = 0; s < 8; ++s) {
          const int64_t lane = half * 8 + s;
          for (int64_t j = 0; j < kQuantBlock / 2; ++j) values[LaneOffset(lane, j)] = x.qs[16 * s + j];
          const int ls = ((x.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((x.scales_h >> (2 * s)) & 3) << 4);
          scales[lane] = (uint8_t)(int8_t)(ls - 32);
        }
        reinterpret_cast<uint16_t*>(scales + kGroupBlocks)[half] = x.d;
      });
}

}  // namespace

bool HasAvx512Vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return has;
}

bool Int8DotSupported(DType wt, int64_t k) {
  if (wt == DType::Q2_K || wt == DType::Q3_K || wt == DType::Q4_K || wt == DType::Q5_K || wt == DType::Q6_K ||
      wt == DType::IQ4_XS)
    return HasAvx512Vnni() && k > 0 && k % kSuperBlock == 0;
  return HasAvx512Vnni() && (wt == DType::Q8_0 || wt == DType::Q4_0 || wt == DType::IQ4_NL) && k > 0 &&
         k % kQuantBlock == 0;
}

Int8PackedWeight PackForInt8Dot(const void* w, DType wt, int64_t n, int64_t k) {
  if (!Int8DotSupported(wt, k))
    throw Error("int8 dot: weights of type " + std::string(DTypeName(wt)) + " with K=" + std::to_string(k) +
                " cannot be packed on this CPU");
  Int8PackedWeight p;
  p.type = wt;
  p.n = n;
  p.k = k;
  p.groups = GroupsOf(k);
  p.paired_tail = PairedTail(wt, k);
  p.tile_bytes = (kTileRows * p.groups - (p.paired_tail ? kTileRows / 2 : 0)) * GroupBytes(wt);
  const size_t bytes = p.bytes = (size_t)((n + kTileRows - 1) / kTileRows * p.tile_bytes);
  p.data = AllocateWeightMemory(bytes, "int8 dot: packed weights");  // zeroed: padding blocks stay 0
  const uint8_t* src = static_cast<const uint8_t*>(w);
  if (wt == DType::Q4_K) {
    PackK45(static_cast<const BlockQ4_K*>(w), wt, n, k, &p);
    return p;
  }
  if (wt == DType::Q5_K) {
    PackK45(static_cast<const BlockQ5_K*>(w), wt, n, k, &p);
    return p;
  }
  if (wt == DType::Q2_K) {
    PackCrumbs<DType::Q2_K>(static_cast<const BlockQ2_K*>(w), n, k, &p);
    return p;
  }
  if (wt == DType::Q3_K) {
    PackCrumbs<DType::Q3_K>(static_cast<const BlockQ3_K*>(w), n, k, &p);
    return p;
  }
  if (wt == DType::Q6_K) {
    PackQ6K(static_cast<const BlockQ6_K*>(w), n, k, &p);
    return p;
  }
  if (wt == DType::IQ4_XS) {
    PackIq4Xs(static_cast<const BlockIQ4_XS*>(w), n, k, &p);
    return p;
  }
  const int64_t blocks = k / kQuantBlock;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const GroupPlace at = PlaceOf(p, r, b / kGroupBlocks);
      const int64_t l = b % kGroupBlocks + at.lane0;
      uint8_t* values = p.data.get() + at.offset;
      uint16_t* scales = reinterpret_cast<uint16_t*>(values + ValueBytes(wt));
      if (wt == DType::Q8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(src) + r * blocks + b;
        scales[l] = blk->d;
        for (int64_t kk = 0; kk < kQuantBlock; ++kk) values[LaneOffset(l, kk)] = (uint8_t)(blk->qs[kk] + 128);
      } else {  // the GGUF byte j holds values j and j + 16: exactly a packed byte of chunk j / 4
        static_assert(sizeof(BlockQ4_0) == sizeof(BlockIQ4_NL), "IQ4_NL's block is Q4_0's: d, then 16 bytes");
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(src) + r * blocks + b;
        scales[l] = blk->d;
        for (int64_t j = 0; j < kQuantBlock / 2; ++j) values[LaneOffset(l, j)] = blk->qs[j];
      }
    }
  }
  return p;
}

void GemmRowsInt8(const float* a, int64_t m, const Int8PackedWeight& w, float* y, int64_t n_total,
                  int64_t n_begin, int64_t n_end, int64_t prefetch) {
  if (n_begin >= n_end || m <= 0) return;
  if (prefetch < 0 || prefetch >= 2 * kInt8TwoStreams)
    throw Error("int8 rows: a prefetch distance of " + std::to_string(prefetch) + " bytes");
  const Prefetch ahead = PrefetchOf(prefetch);
  const uint8_t* act = QuantizeRows(a, m, w.k, w.paired_tail);
  switch (w.type) {
    case DType::Q8_0: return GemmVnniOf<DType::Q8_0>(act, m, w, y, n_total, n_begin, n_end, ahead);
    case DType::Q4_K: return GemmVnniOf<DType::Q4_K>(act, m, w, y, n_total, n_begin, n_end, ahead);
    case DType::Q5_K: return GemmVnniOf<DType::Q5_K>(act, m, w, y, n_total, n_begin, n_end, ahead);
    case DType::Q6_K: return GemmVnniOf<DType::Q6_K>(act, m, w, y, n_total, n_begin, n_end, ahead);
    case DType::Q3_K: return GemmVnniOf<DType::Q3_K>(act, m, w, y, n_total, n_begin, n_end, ahead);
    case DType::Q2_K: return GemmVnniOf<DType::Q2_K>(act, m, w, y, n_total, n_begin, n_end, ahead);
    case DType::IQ4_NL: return GemmVnniOf<DType::IQ4_NL>(act, m, w, y, n_total, n_begin, n_end, ahead);
    case DType::IQ4_XS: return GemmVnniOf<DType::IQ4_XS>(act, m, w, y, n_total, n_begin, n_end, ahead);
    default: return GemmVnniOf<DType::Q4_0>(act, m, w, y, n_total, n_begin, n_end, ahead);
  }
}

std::vector<int64_t> Int8PrefetchChoices(DType wt, int64_t k) {
  if (!Int8DotSupported(wt, k)) return {};
  // The other maker's default, and on Intel its one stream 4 KiB + 16 KiB ahead (the default before).
  if (PrefetchToL2ByDefault()) return {kInt8NoPrefetch, 3072, 12288, 6144, 4096 + kInt8PrefetchToL2};
  return {kInt8NoPrefetch, 3072, 12288, 4096 + kInt8PrefetchToL2, kIntelDefault};
}

std::string Int8PrefetchName(int64_t prefetch) {
  return std::to_string(prefetch & (kInt8PrefetchToL2 - 1)) + (prefetch & kInt8PrefetchToL2 ? "+l2" : "") +
         (prefetch & kInt8TwoStreams ? "+2streams" : "");
}

std::optional<int64_t> Int8PrefetchFromName(std::string_view name) {
  int64_t ahead = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), ahead);
  if (ec != std::errc() || ahead < 0 || ahead >= kInt8PrefetchToL2) return std::nullopt;
  std::string_view rest(end, name.data() + name.size());
  for (const auto& [suffix, flag] : {std::pair{"+l2", kInt8PrefetchToL2}, {"+2streams", kInt8TwoStreams}})
    if (rest.starts_with(suffix)) ahead += flag, rest.remove_prefix(std::string_view(suffix).size());
  if (!rest.empty()) return std::nullopt;
  return ahead;
}

double Int8DotErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n, int64_t block) {
  double bound = 0;
  for (int64_t b = 0; b < k; b += block) {
    double amax = 0, wsum = 0;
    for (int64_t kk = b; kk < b + block; ++kk) {
      amax = std::max(amax, (double)std::fabs(a[kk]));
      wsum += std::fabs(LoadAsDouble(w, wt, n * k + kk));
    }
    bound += wsum * amax / 127 / 2;
  }
  return bound;
}

}  // namespace prism
