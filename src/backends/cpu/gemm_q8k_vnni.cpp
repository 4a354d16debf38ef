// The q8k form's kernels on AVX-512 (BW, VNNI): Q4_K and Q6_K weights as stored against Q8_K-rounded
// activations, 64 values per two instructions (pair products, then scaled pair sums), one f32 step per block.
#include "backends/cpu/gemm_q8k_vnni.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics: false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/k4_scales.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

#define PRISM_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c,fma")))
#define PRISM_INLINE __attribute__((always_inline)) inline

PRISM_VNNI PRISM_INLINE __m512i Join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

PRISM_VNNI PRISM_INLINE float Half(uint16_t h) { return _cvtsh_ss(h); }

// Row i0 + i's activation: its int8 values of block b, its scale, and its block's index.
struct ActRow {
  const int8_t* q;
  float d;
  int64_t block;  // index into the per-block arrays
};

template <int MR>
PRISM_VNNI PRISM_INLINE void SetUpRows(const Q8KRows& act, const std::vector<int8_t>& values, int64_t i0,
                                       int64_t blocks, int64_t b, ActRow* a, __m512i* isum) {
  for (int i = 0; i < MR; ++i) {
    a[i].block = (i0 + i) * blocks + b;
    a[i].q = values.data() + a[i].block * kSuperBlock;
    a[i].d = act.d[a[i].block];
    isum[i] = _mm512_setzero_si512();
  }
}

// 64 weight bytes (0..63) times 64 activation bytes, pairs summed in 16 bits, then each pair sum times
// its 16-bit scale and pairs of those summed into the 32-bit lanes of isum (vpdpwssd).
PRISM_VNNI PRISM_INLINE __m512i Accumulate(__m512i isum, __m512i w, const int8_t* a, __m512i scale16) {
  return _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(w, _mm512_loadu_si512(a)), scale16);
}

// One Q4_K weight row against MR activation rows. A 64-value chunk c is 32 bytes (low nibbles: sub-block
// 2c, high: 2c + 1); 64 bytes (chunks 2p, 2p + 1) give sub-blocks 4p and 4p + 2 in their low nibbles and
// 4p + 1 and 4p + 3 in their high ones, met by the activation in that order (Q8KRows::q4k); 16-bit lanes
// 0-15 take the first sub-block's 6-bit scale and 16-31 the second's. Per block, one f32 multiply-add by
// d x the row's scale; the mins through the activation's per-32 sums, accumulated apart.
template <int MR>
PRISM_VNNI void DotQ4K(const BlockQ4_K* row, int64_t blocks, const Q8KRows& act, int64_t i0, float* out,
                       int64_t ldo) {
  __m512 acc[MR];
  __m128 min_acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps(), min_acc[i] = _mm_setzero_ps();
  const __m512i nib = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ4_K& x = row[b];
    // 16-bit lanes 0-7: the scales; 8-15: the mins.
    const __m256i sm = _mm256_cvtepu8_epi16(UnpackScalesK4Vector(x.scales));
    const __m512i sm512 = _mm512_zextsi256_si512(sm);
    ActRow a[MR];
    __m512i isum[MR];
    SetUpRows<MR>(act, act.q4k, i0, blocks, b, a, isum);
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const __m512i bytes = _mm512_loadu_si512(x.qs + 64 * p);
      const __m512i lo = _mm512_and_si512(bytes, nib),
                    hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nib);
      const __m512i scale_lo = _mm512_permutexvar_epi16(
          Join(_mm256_set1_epi16((short)(4 * p)), _mm256_set1_epi16((short)(4 * p + 2))), sm512);
      const __m512i scale_hi = _mm512_permutexvar_epi16(
          Join(_mm256_set1_epi16((short)(4 * p + 1)), _mm256_set1_epi16((short)(4 * p + 3))), sm512);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) isum[i] = Accumulate(isum[i], lo, a[i].q + 128 * p, scale_lo);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) isum[i] = Accumulate(isum[i], hi, a[i].q + 128 * p + 64, scale_hi);
    }
    const float d = Half(x.d), dmin = Half(x.dmin);
    const __m128i mins = _mm256_extracti128_si256(sm, 1);
    for (int i = 0; i < MR; ++i) {
      const __m128i bs =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(act.bsum32.data() + a[i].block * 8));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_set1_ps(d * a[i].d), acc[i]);
      min_acc[i] =
          _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_madd_epi16(mins, bs)), _mm_set1_ps(dmin * a[i].d), min_acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i)
    out[i * ldo] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(_mm512_zextps128_ps512(min_acc[i]));
}

// One Q6_K weight row against MR activation rows. Per half (128 values), 64 ql bytes hold values
// 0-63 in their low nibbles and 64-127 in their high ones; the 32 qh bytes give each its top two bits
// (bits 2g, 2g + 1 for 32-value group g), shifted per 256-bit half. Values are 0..63 with offset 32:
// the offset goes through the per-16 activation sums. 16-bit lane j of 64-value chunk t covers
// 16-value group 4t + j / 8, whose signed scale it takes.
template <int MR>
PRISM_VNNI void DotQ6K(const BlockQ6_K* row, int64_t blocks, const Q8KRows& act, int64_t i0, float* out,
                       int64_t ldo) {
  __m512 acc[MR];
  __m256 off_acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps(), off_acc[i] = _mm256_setzero_ps();
  const __m512i nib = _mm512_set1_epi8(0x0F), two = _mm512_set1_epi8(0x03);
  // Per-16-bit-lane shifts of the duplicated qh bytes: groups 0, 1 (chunk 2h) and 2, 3 (chunk 2h + 1).
  const __m512i shift_lo = Join(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
  const __m512i shift_hi = Join(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
  // 16-bit lane j -> group j / 8 of the chunk (plus 4t, added per chunk).
  const __m512i group =
      _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15,
                                         14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                        3);
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ6_K& x = row[b];
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
    const __m512i sc512 = _mm512_zextsi256_si512(sc16);
    ActRow a[MR];
    __m512i isum[MR];
    SetUpRows<MR>(act, act.q, i0, blocks, b, a, isum);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(x.ql + 64 * h);
      const __m256i qh256 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * h));
      const __m512i qh = Join(qh256, qh256);
      const __m512i top[2] = {_mm512_and_si512(_mm512_srlv_epi16(qh, shift_lo), two),
                              _mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), two)};
      const __m512i low[2] = {_mm512_and_si512(ql, nib), _mm512_and_si512(_mm512_srli_epi16(ql, 4), nib)};
#pragma GCC unroll 2
      for (int s = 0; s < 2; ++s) {
        const int t = 2 * h + s;  // 64-value chunk
        const __m512i w = _mm512_or_si512(low[s], _mm512_slli_epi16(top[s], 4));
        const __m512i scale =
            _mm512_permutexvar_epi16(_mm512_add_epi16(group, _mm512_set1_epi16((short)(4 * t))), sc512);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) isum[i] = Accumulate(isum[i], w, a[i].q + 64 * t, scale);
      }
    }
    const float d = Half(x.d);
    for (int i = 0; i < MR; ++i) {
      const __m256i bs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.bsum16.data() + a[i].block * 16));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_set1_ps(d * a[i].d), acc[i]);
      off_acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sc16, bs)),
                                   _mm256_set1_ps(32.0f * d * a[i].d), off_acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i)
    out[i * ldo] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(off_acc[i]));
}

template <DType T, int MR>
void Dot(const uint8_t* row, int64_t blocks, const Q8KRows& act, int64_t i0, float* out, int64_t ldo) {
  if constexpr (T == DType::Q4_K)
    DotQ4K<MR>(reinterpret_cast<const BlockQ4_K*>(row), blocks, act, i0, out, ldo);
  else
    DotQ6K<MR>(reinterpret_cast<const BlockQ6_K*>(row), blocks, act, i0, out, ldo);
}

template <DType T>
void DotRows(const uint8_t* row, int64_t blocks, const Q8KRows& act, int64_t i0, int rows, float* out,
             int64_t ldo) {
  switch (rows) {
    case 4: return Dot<T, 4>(row, blocks, act, i0, out, ldo);
    case 3: return Dot<T, 3>(row, blocks, act, i0, out, ldo);
    case 2: return Dot<T, 2>(row, blocks, act, i0, out, ldo);
    default: return Dot<T, 1>(row, blocks, act, i0, out, ldo);
  }
}

}  // namespace

bool Q8KVnniSupported() { return HasAvx512Vnni() && Avx512TemplatesEnabled(); }

void PrepareQ8KVnni(DType wt, Q8KRows* act) {
  if (wt != DType::Q4_K) return;
  constexpr size_t kPlace[4] = {0, 2, 1, 3};  // where each 32-value piece of 128 goes
  act->q4k.resize(act->q.size());
  for (size_t s = 0; s + 128 <= act->q.size(); s += 128)
    for (size_t piece = 0; piece < 4; ++piece)
      std::memcpy(act->q4k.data() + s + 32 * kPlace[piece], act->q.data() + s + 32 * piece, 32);
}

void DotRowsQ8KVnni(DType wt, const uint8_t* row, int64_t k, const Q8KRows& act, int64_t i0, int rows,
                    float* out, int64_t ldo) {
  if (wt == DType::Q4_K) return DotRows<DType::Q4_K>(row, k / kSuperBlock, act, i0, rows, out, ldo);
  DotRows<DType::Q6_K>(row, k / kSuperBlock, act, i0, rows, out, ldo);
}

}  // namespace prism
