// Template-tier CPU micro-kernel for quantized weights as AVX512-VNNI integer dot products against
// an activation quantized per 32-element block; weights are repacked once so lanes hold blocks.
#include "backends/cpu/gemm_int8.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/weight_memory.h"
#include "ir/error.h"

namespace prism {
namespace {

constexpr int64_t kGroupBlocks = 16;                          // blocks per group: one per 32-bit lane
constexpr int64_t kGroupValues = kGroupBlocks * kQuantBlock;  // 512
constexpr int64_t kScaleBytes = kGroupBlocks * 2;             // f16 weight scales after the values
// A quantized activation group: 512 signed values, then 16 f32 scales, then 16 i32 block sums.
constexpr int64_t kActGroupBytes = kGroupValues + kGroupBlocks * 4 * 2;

// Weight rows are stored in tiles of 4 (the kernel's NR), interleaved group by group: a tile's bytes,
// and the whole matrix, are then read as one sequential stream, which the hardware prefetcher follows
// (four short row streams per tile left it behind: 5-7 GB/s from DRAM instead of 14).
constexpr int64_t kTileRows = 4;
constexpr int64_t kPrefetchBytes = 4096;  // ahead of the loads (1-16 KiB measured alike, within noise)
constexpr int64_t kFarPrefetchBytes = 4 * kPrefetchBytes;

constexpr int64_t ValueBytes(DType t) { return t == DType::Q8_0 ? kGroupValues : kGroupValues / 2; }

// Position of value kk (0..31) of lane l's block inside a group's value bytes, for 8-bit values.
constexpr int64_t LaneOffset(int64_t l, int64_t kk) { return (kk / 4) * 64 + l * 4 + kk % 4; }

#define PRISM_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

}  // namespace

// q = round(x / d) with d = max|x| / 127 (0 for a block of zeros).
PRISM_VNNI float QuantizeActivationBlock(const float* x, int8_t* q, int32_t* sum) {
  __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
  // A NaN in the block makes its scale NaN (the max above may drop it), so every output it reaches is NaN.
  if (_mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q)) d = NAN;
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
  return d;
}

namespace {

// One activation row into groups: each block quantized by QuantizeActivationBlock, with its sum.
PRISM_VNNI void QuantizeRow(const float* a, int64_t k, int64_t groups, uint8_t* out) {
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
  }
}

constexpr int64_t GroupsOf(int64_t k) { return (k / kQuantBlock + kGroupBlocks - 1) / kGroupBlocks; }

// The m activation rows quantized into groups, in this thread's buffer. Every thread quantizes the
// activation itself: it is small next to the weights it meets.
const uint8_t* QuantizeRows(const float* a, int64_t m, int64_t k) {
  const int64_t groups = GroupsOf(k);
  thread_local std::vector<uint8_t> act;
  act.resize((size_t)(m * groups * kActGroupBytes));
  for (int64_t i = 0; i < m; ++i) QuantizeRow(a + i * k, k, groups, act.data() + i * groups * kActGroupBytes);
  return act.data();
}

// Where row r's group g starts in packed weights.
inline int64_t PackedOffset(int64_t r, int64_t g, int64_t row_bytes, int64_t group_bytes) {
  return r / kTileRows * kTileRows * row_bytes + g * kTileRows * group_bytes + r % kTileRows * group_bytes;
}

// MR activation rows x NR weight rows (of one tile, starting at w) over all groups. Per group, integer sums
// per lane (= block), corrected for the weights' offset (Q8_0 stored +128, Q4_0 nibbles +8), then scaled in
// f32.
template <DType T, int MR, int NR>
PRISM_VNNI void Tile(const uint8_t* a, int64_t a_row, const uint8_t* w, int64_t groups, float* y,
                     int64_t ldy) {
  constexpr int64_t kValues = ValueBytes(T), kGroup = kValues + kScaleBytes, w_row = kGroup;
  constexpr int kOffsetShift = T == DType::Q8_0 ? 7 : 3;
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i p[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) p[i][j] = _mm512_setzero_si512();
    const uint8_t* ag = a + g * kActGroupBytes;
    const uint8_t* wg = w + g * kTileRows * kGroup;
    // The stream ahead, a line per 64 bytes of this group's tile slice: the prefetcher alone stays
    // too close behind the loads. Into L1 just ahead, and into L2 further ahead: L1 can wait on only
    // so many misses at once, too few to cover the memory latency at this core's share of bandwidth.
    for (int64_t l = 0; l < kTileRows * kGroup; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(wg + kPrefetchBytes + l), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wg + kFarPrefetchBytes + l), _MM_HINT_T1);
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
    } else {  // a byte holds value c (low nibble) and value c + 4 chunks (high nibble)
      const __m512i low = _mm512_set1_epi8(0x0f);
      for (int c = 0; c < 4; ++c) {
        __m512i lo[NR], hi[NR];
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
          __m512i raw = _mm512_loadu_si512(wg + j * w_row + c * 64);
          lo[j] = _mm512_and_si512(raw, low);
          hi[j] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
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
    __m512 dw[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      dw[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + j * w_row + kValues)));
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
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

template <DType T, int NR>
PRISM_VNNI void TileRows(int mr, const uint8_t* a, int64_t a_row, const uint8_t* w, int64_t groups, float* y,
                         int64_t ldy) {
  switch (mr) {
    case 3: return Tile<T, 3, NR>(a, a_row, w, groups, y, ldy);
    case 2: return Tile<T, 2, NR>(a, a_row, w, groups, y, ldy);
    default: return Tile<T, 1, NR>(a, a_row, w, groups, y, ldy);
  }
}

template <DType T>
PRISM_VNNI void GemmVnni(const uint8_t* a, int64_t m, const Int8PackedWeight& w, float* y, int64_t n_total,
                         int64_t n_begin, int64_t n_end) {
  const int64_t a_row = w.groups * kActGroupBytes;
  constexpr int64_t kMBlock = 48;  // quantized activation rows kept hot in cache while weight tiles stream
  for (int64_t m0 = 0; m0 < m; m0 += kMBlock) {
    int64_t m1 = std::min(m, m0 + kMBlock);
    for (int64_t n = n_begin, nr; n < n_end; n += nr) {
      nr = std::min<int64_t>(kTileRows - n % kTileRows, n_end - n);  // never across a tile
      const uint8_t* wn = w.data.get() + PackedOffset(n, 0, w.row_bytes, ValueBytes(T) + kScaleBytes);
      for (int64_t i = m0; i < m1; i += 3) {
        int mr = (int)std::min<int64_t>(3, m1 - i);
        const uint8_t* ai = a + i * a_row;
        float* yi = y + i * n_total + n;
        switch (nr) {
          case 4: TileRows<T, 4>(mr, ai, a_row, wn, w.groups, yi, n_total); break;
          case 3: TileRows<T, 3>(mr, ai, a_row, wn, w.groups, yi, n_total); break;
          case 2: TileRows<T, 2>(mr, ai, a_row, wn, w.groups, yi, n_total); break;
          default: TileRows<T, 1>(mr, ai, a_row, wn, w.groups, yi, n_total); break;
        }
      }
    }
  }
}

}  // namespace

bool HasAvx512Vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return has;
}

bool Int8DotSupported(DType wt, int64_t k) {
  return HasAvx512Vnni() && (wt == DType::Q8_0 || wt == DType::Q4_0) && k > 0 && k % kQuantBlock == 0;
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
  p.row_bytes = p.groups * (ValueBytes(wt) + kScaleBytes);
  const size_t bytes = p.bytes = (size_t)((n + kTileRows - 1) / kTileRows * kTileRows * p.row_bytes);
  p.data = AllocateWeightMemory(bytes, "int8 dot: packed weights");  // zeroed: padding blocks stay 0
  const int64_t blocks = k / kQuantBlock;
  const uint8_t* src = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t g = b / kGroupBlocks, l = b % kGroupBlocks;
      uint8_t* values = p.data.get() + PackedOffset(r, g, p.row_bytes, ValueBytes(wt) + kScaleBytes);
      uint16_t* scales = reinterpret_cast<uint16_t*>(values + ValueBytes(wt));
      if (wt == DType::Q8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(src) + r * blocks + b;
        scales[l] = blk->d;
        for (int64_t kk = 0; kk < kQuantBlock; ++kk) values[LaneOffset(l, kk)] = (uint8_t)(blk->qs[kk] + 128);
      } else {  // the GGUF byte j holds values j and j + 16: exactly a packed byte of chunk j / 4
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(src) + r * blocks + b;
        scales[l] = blk->d;
        for (int64_t j = 0; j < kQuantBlock / 2; ++j) values[LaneOffset(l, j)] = blk->qs[j];
      }
    }
  }
  return p;
}

void GemmRowsInt8(const float* a, int64_t m, const Int8PackedWeight& w, float* y, int64_t n_total,
                  int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  const uint8_t* act = QuantizeRows(a, m, w.k);
  if (w.type == DType::Q8_0)
    GemmVnni<DType::Q8_0>(act, m, w, y, n_total, n_begin, n_end);
  else
    GemmVnni<DType::Q4_0>(act, m, w, y, n_total, n_begin, n_end);
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
