// GEMM over K-quant, Q4_1/Q5_x and IQ4 weights on AVX2: blocks decoded in registers for f32 FMA tiles,
// and for Q4_K/Q6_K the q8k form's integer dot products against Q8_K-rounded activations (its
// AVX512-VNNI kernels are gemm_q8k_vnni.cpp's).
#include "backends/cpu/gemm_blocks.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_avx2.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/gemm_q8k_vnni.h"
#include "backends/cpu/k4_scales.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

#define PRISM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PRISM_INLINE __attribute__((always_inline)) inline

PRISM_AVX2 inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// out[l] = d * q[l] + m for 32 small integers q (bytes; signed for the IQ4 lookups), with the
// first 16 values using (d0, m0) and the last 16 (d1, m1).
template <bool Signed>
PRISM_AVX2 inline void Emit32(__m256i q, float d0, float m0, float d1, float m1, float* out) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m256i wide = Signed ? _mm256_cvtepi8_epi32(parts[p]) : _mm256_cvtepu8_epi32(parts[p]);
    const __m256 d = _mm256_set1_ps(p < 2 ? d0 : d1), m = _mm256_set1_ps(p < 2 ? m0 : m1);
    _mm256_storeu_ps(out + 8 * p, _mm256_fmadd_ps(_mm256_cvtepi32_ps(wide), d, m));
  }
}

PRISM_AVX2 inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
PRISM_AVX2 inline __m256i Bytes(int v) { return _mm256_set1_epi8((char)v); }
PRISM_AVX2 inline __m256i Low4(__m256i v) { return _mm256_and_si256(v, Bytes(0xF)); }
PRISM_AVX2 inline __m256i High4(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), Bytes(0xF)); }
// Bits `shift` and up of every byte, kept by `mask`.
PRISM_AVX2 inline __m256i Field(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), Bytes(mask));
}
// 16 packed bytes as the 32-value nibble order: low nibbles (values 0..15), then high (16..31).
PRISM_AVX2 inline __m256i Nibbles16(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i f = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), f), _mm_and_si128(v, f));
}
// Bit j of a little-endian 32-bit word as 0x10 in byte j (the fifth bit of Q5_0/Q5_1).
PRISM_AVX2 inline __m256i FifthBits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), Bytes(0x10));
}
PRISM_AVX2 inline __m256i Iq4Lookup(__m256i idx) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), idx);
}

// Walks one block of type T as groups of 32 values: sink(is_signed, offset, q, d0, m0, d1, m1) gets
// the group's 32 small integers q (bytes) at value `offset` of the block, whose values are
// d0 * q + m0 (first 16) and d1 * q + m1 (last 16).
template <DType T, class Sink>
PRISM_AVX2 PRISM_INLINE void ForGroups(const uint8_t* p, Sink& sink) {
  if constexpr (T == DType::Q4_1) {
    const auto& x = *reinterpret_cast<const BlockQ4_1*>(p);
    const float d = Half(x.d), m = Half(x.m);
    sink(std::bool_constant<false>{}, 0, Nibbles16(x.qs), d, m, d, m);
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    const uint8_t* qh = T == DType::Q5_0 ? p + 2 : p + 4;
    const __m256i q = _mm256_or_si256(Nibbles16(qh + 4), FifthBits(qh));
    const float d = Half(*reinterpret_cast<const uint16_t*>(p));
    const float m = T == DType::Q5_0 ? -16.0f * d : Half(*reinterpret_cast<const uint16_t*>(p + 2));
    sink(std::bool_constant<false>{}, 0, q, d, m, d, m);
  } else if constexpr (T == DType::IQ4_NL) {
    const auto& x = *reinterpret_cast<const BlockIQ4_NL*>(p);
    const float d = Half(x.d);
    sink(std::bool_constant<true>{}, 0, Iq4Lookup(Nibbles16(x.qs)), d, 0.0f, d, 0.0f);
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    // Halves of 128 values: 32 bytes of 2-bit fields at shifts 0, 2, 4, 6; scales per 16 values.
    const uint8_t* qs = T == DType::Q2_K ? reinterpret_cast<const BlockQ2_K*>(p)->qs
                                         : reinterpret_cast<const BlockQ3_K*>(p)->qs;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i bytes = Load32(qs + 32 * h);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        __m256i q = Field(bytes, 2 * s, 3);
        float d[2], m[2];
        if constexpr (T == DType::Q2_K) {
          const auto& x = *reinterpret_cast<const BlockQ2_K*>(p);
          const float dd = Half(x.d), dm = Half(x.dmin);
          for (int g = 0; g < 2; ++g) {
            const uint8_t sc = x.scales[h * 8 + s * 2 + g];
            d[g] = dd * (float)(sc & 0xF);
            m[g] = -(dm * (float)(sc >> 4));
          }
        } else {  // value = dl * (low + 4 * high - 4)
          const auto& x = *reinterpret_cast<const BlockQ3_K*>(p);
          q = _mm256_or_si256(q, _mm256_slli_epi16(Field(Load32(x.hmask), h * 4 + s, 1), 2));
          const float dd = Half(x.d);
          for (int g = 0; g < 2; ++g) {
            d[g] = dd * (float)ScaleQ3K(x.scales, h * 8 + s * 2 + g);
            m[g] = -4.0f * d[g];
          }
        }
        sink(std::bool_constant<false>{}, 128 * h + 32 * s, q, d[0], m[0], d[1], m[1]);
      }
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    const uint16_t* dm = reinterpret_cast<const uint16_t*>(p);
    const uint8_t* scales = p + 4;
    const uint8_t* qs = T == DType::Q4_K ? reinterpret_cast<const BlockQ4_K*>(p)->qs
                                         : reinterpret_cast<const BlockQ5_K*>(p)->qs;
    const float d = Half(dm[0]), dmin = Half(dm[1]);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = Load32(qs + 32 * c);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;
        int sc, mn;
        ScaleMinK4(scales, j, &sc, &mn);
        __m256i q = half ? High4(bytes) : Low4(bytes);
        if constexpr (T == DType::Q5_K)
          q = _mm256_or_si256(
              q, _mm256_slli_epi16(Field(Load32(reinterpret_cast<const BlockQ5_K*>(p)->qh), j, 1), 4));
        const float d1 = d * (float)sc, m1 = -(dmin * (float)mn);
        sink(std::bool_constant<false>{}, 32 * j, q, d1, m1, d1, m1);
      }
    }
  } else if constexpr (T == DType::Q6_K) {
    const auto& x = *reinterpret_cast<const BlockQ6_K*>(p);
    const float d = Half(x.d);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load32(x.ql + 64 * h), ql1 = Load32(x.ql + 64 * h + 32), qh = Load32(x.qh + 32 * h);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i lo = g == 0 ? Low4(ql0) : g == 1 ? Low4(ql1) : g == 2 ? High4(ql0) : High4(ql1);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(Field(qh, 2 * g, 3), 4));
        const float d0 = d * (float)x.scales[h * 8 + 2 * g], d1 = d * (float)x.scales[h * 8 + 2 * g + 1];
        sink(std::bool_constant<false>{}, 128 * h + 32 * g, q, d0, -32.0f * d0, d1, -32.0f * d1);
      }
    }
  } else if constexpr (T == DType::IQ4_XS) {
    const auto& x = *reinterpret_cast<const BlockIQ4_XS*>(p);
    const float d = Half(x.d);
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x.scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * (float)(ls - 32);
      sink(std::bool_constant<true>{}, 32 * ib, Iq4Lookup(Nibbles16(x.qs + 16 * ib)), dl, 0.0f, dl, 0.0f);
    }
  }
}

// One block of type T into out (BlockElems(T) floats).
struct StoreSink {
  float* out;
  template <bool S>
  PRISM_AVX2 PRISM_INLINE void operator()(std::bool_constant<S>, int off, __m256i q, float d0, float m0,
                                          float d1, float m1) {
    Emit32<S>(q, d0, m0, d1, m1, out + off);
  }
};
template <DType T>
PRISM_AVX2 void DequantBlock(const uint8_t* p, float* out) {
  StoreSink sink{out};
  ForGroups<T>(p, sink);
}

PRISM_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

constexpr int kNr = 4;  // weight rows per decode tile

// 32 small integers (bytes) as four vectors of 8 floats.
template <bool Signed>
PRISM_AVX2 PRISM_INLINE void Widen32(__m256i q, __m256 (&f)[4]) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p)
    f[p] = _mm256_cvtepi32_ps(Signed ? _mm256_cvtepi8_epi32(parts[p]) : _mm256_cvtepu8_epi32(parts[p]));
}

// Dot products of MR activation rows with one weight row, one group of 32 at a time, without
// dequantizing: acc += d * (a . q) per 16 values, and the offsets m apply to the activation's
// per-16 sums (asum) as scalars: sum(a * (d q + m)) = d (a . q) + m sum(a).
template <int MR>
struct DotSink {
  const float* a;  // activation rows (lda apart) at this block's first value
  int64_t lda;
  const float* asum;  // per-16 sums of the rows (asum_ld apart) at this block's first group
  int64_t asum_ld;
  __m256* acc;    // MR vector accumulators
  float* offset;  // MR scalar accumulators of the m terms
  template <bool S>
  PRISM_AVX2 PRISM_INLINE void operator()(std::bool_constant<S>, int off, __m256i q, float d0, float m0,
                                          float d1, float m1) {
    __m256 f[4];
    Widen32<S>(q, f);
    const __m256 vd0 = _mm256_set1_ps(d0), vd1 = _mm256_set1_ps(d1);
#pragma GCC unroll 2
    for (int i = 0; i < MR; ++i) {
      const float* ai = a + i * lda + off;
      const __m256 s0 =
          _mm256_fmadd_ps(_mm256_loadu_ps(ai + 8), f[1], _mm256_mul_ps(_mm256_loadu_ps(ai), f[0]));
      const __m256 s1 =
          _mm256_fmadd_ps(_mm256_loadu_ps(ai + 24), f[3], _mm256_mul_ps(_mm256_loadu_ps(ai + 16), f[2]));
      acc[i] = _mm256_fmadd_ps(s1, vd1, _mm256_fmadd_ps(s0, vd0, acc[i]));
      const float* si = asum + i * asum_ld + off / 16;
      offset[i] += m0 * si[0] + m1 * si[1];
    }
  }
};

// MR (1 or 2) activation rows x up to kNr weight rows; asum holds the rows' per-16 sums.
template <DType T, int MR>
PRISM_AVX2 void DecodeTile(const float* a, int64_t k, const float* asum, const uint8_t* w, int64_t rb, int nr,
                           float* y, int64_t ldy) {
  const int64_t e = BlockElems(T), block_bytes = BlockBytes(T), groups = k / 16;
  for (int j = 0; j < nr; ++j) {
    __m256 acc[MR];
    float offset[MR];
    for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps(), offset[i] = 0.0f;
    const uint8_t* row = w + j * rb;
    for (int64_t kk = 0; kk < k; kk += e, row += block_bytes) {
      DotSink<MR> sink{a + kk, k, asum + kk / 16, groups, acc, offset};
      ForGroups<T>(row, sink);
    }
    for (int i = 0; i < MR; ++i) y[i * ldy + j] = Hsum(acc[i]) + offset[i];
  }
}

template <DType T>
PRISM_AVX2 void DequantRows(const uint8_t* w, int64_t blocks, float* out) {
  const int64_t block_bytes = BlockBytes(T), e = BlockElems(T);
  for (int64_t b = 0; b < blocks; ++b) DequantBlock<T>(w + b * block_bytes, out + b * e);
}

template <DType T>
PRISM_AVX2 void Gemm(const float* a, int64_t m, int64_t k, const void* w, float* y, int64_t n_total,
                     int64_t n_begin, int64_t n_end) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = StorageBytes(T, k);
  if (m <= 2) {
    thread_local std::vector<float> asum;
    asum.resize((size_t)(m * k / 16));
    for (int64_t i = 0; i < m * k / 16; ++i) {
      float s = 0;
      for (int t = 0; t < 16; ++t) s += a[i * 16 + t];
      asum[i] = s;
    }
    for (int64_t n = n_begin; n < n_end; n += kNr) {
      const int nr = (int)std::min<int64_t>(kNr, n_end - n);
      if (m == 2)
        DecodeTile<T, 2>(a, k, asum.data(), wb + n * rb, rb, nr, y + n, n_total);
      else
        DecodeTile<T, 1>(a, k, asum.data(), wb + n * rb, rb, nr, y + n, n_total);
    }
    return;
  }
  // Panels of weight rows dequantized once (about 128 KiB of f32), multiplied by every row of A.
  const int64_t panel = std::clamp<int64_t>(32768 / k / kNr * kNr, kNr, 64);
  thread_local std::vector<float> scratch;
  scratch.resize((size_t)(panel * k));
  for (int64_t n = n_begin; n < n_end; n += panel) {
    const int64_t rows = std::min<int64_t>(panel, n_end - n);
    DequantRows<T>(wb + n * rb, rows * (k / BlockElems(T)), scratch.data());
    GemmRows(a, m, k, scratch.data(), DType::F32, y + n, n_total, 0, rows);
  }
}

}  // namespace

void QuantizeQ8K(const float* a, int64_t m, int64_t k, Q8KRows* out) {
  const int64_t blocks = m * k / kSuperBlock;
  out->q.resize((size_t)(m * k));
  out->d.resize((size_t)blocks);
  out->bsum16.resize((size_t)(blocks * 16));
  out->bsum32.resize((size_t)(blocks * 8));
  for (int64_t b = 0; b < blocks; ++b) {
    const float* x = a + b * kSuperBlock;
    float amax = 0;
    bool finite = true;
    for (int t = 0; t < kSuperBlock; ++t) {
      amax = std::max(amax, std::fabs(x[t]));
      finite = finite && std::isfinite(x[t]);
    }
    // A NaN or infinity in the block makes its scale NaN, so the outputs it reaches are NaN too.
    const float iscale = finite && amax > 0 ? 127.0f / amax : 0.0f;
    out->d[b] = finite ? amax / 127.0f : NAN;
    int8_t* q = out->q.data() + b * kSuperBlock;
    for (int g = 0; g < 16; ++g) {
      int32_t sum = 0;
      for (int t = 16 * g; t < 16 * g + 16; ++t) sum += q[t] = (int8_t)std::nearbyint(x[t] * iscale);
      out->bsum16[b * 16 + g] = (int16_t)sum;
    }
    for (int g = 0; g < 8; ++g)
      out->bsum32[b * 8 + g] = (int16_t)(out->bsum16[b * 16 + 2 * g] + out->bsum16[b * 16 + 2 * g + 1]);
  }
}

namespace {

PRISM_AVX2 PRISM_INLINE __m256i Madd16(__m256i u8, const int8_t* s8, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, Load32(reinterpret_cast<const uint8_t*>(s8))), scales);
}

PRISM_AVX2 PRISM_INLINE int32_t HsumI32(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1)));
}

// Group G (0..3) of a Q6_K half: 32 values 0..63, the low 4 bits from ql, the high 2 from qh bits
// 2G, 2G + 1 (shifts by immediates).
template <int G>
PRISM_AVX2 PRISM_INLINE __m256i Q6Values(__m256i ql0, __m256i ql1, __m256i qh) {
  const __m256i lo = G == 0 ? Low4(ql0) : G == 1 ? Low4(ql1) : G == 2 ? High4(ql0) : High4(ql1);
  const __m256i hi = G < 2 ? _mm256_slli_epi16(qh, 4 - 2 * G) : _mm256_srli_epi16(qh, 2 * G - 4);
  return _mm256_or_si256(lo, _mm256_and_si256(hi, Bytes(0x30)));
}

// One weight row (Q4_K or Q6_K) against MR rows of Q8_K activations: integer dot products per
// block (unsigned weights x signed activations, pairs summed in 16 bits, then scaled in 32), one
// float multiply-add per block; the formats' mins/offsets through the activation's per-16/32 sums.
// Each block's weights are decoded once for all MR rows.
template <DType T, int MR>
PRISM_AVX2 void DotRowQ8K(const uint8_t* row, int64_t k, const Q8KRows& act, int64_t i0, float* out,
                          int64_t ldo) {
  const int64_t blocks = k / kSuperBlock;
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i sum[MR];
    const int8_t* aq[MR];
    float ad[MR];
    int64_t ab[MR];
    for (int i = 0; i < MR; ++i) {
      sum[i] = _mm256_setzero_si256();
      ab[i] = (i0 + i) * blocks + b;
      aq[i] = act.q.data() + ab[i] * kSuperBlock;
      ad[i] = act.d[ab[i]];
    }
    float d, offset[MR];
    if constexpr (T == DType::Q4_K) {
      const auto& x = reinterpret_cast<const BlockQ4_K*>(row)[b];
      const __m128i sc = UnpackScalesK4Vector(x.scales);  // bytes 0-7 the scales, 8-15 the mins
      // The 8 scales as 16-bit lanes in both halves; scale j is broadcast by one byte shuffle.
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i bytes = Load32(x.qs + 32 * c), lo = Low4(bytes), hi = High4(bytes);
        const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c))));
        const __m256i shi =
            _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1))));
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i)
          sum[i] = _mm256_add_epi32(sum[i], _mm256_add_epi32(Madd16(lo, aq[i] + 64 * c, slo),
                                                             Madd16(hi, aq[i] + 64 * c + 32, shi)));
      }
      d = Half(x.d);
      const float dmin = Half(x.dmin);
      const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sc, 8));
      for (int i = 0; i < MR; ++i) {
        const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(act.bsum32.data() + ab[i] * 8));
        offset[i] = dmin * (float)HsumI32(_mm_madd_epi16(mins, bs));
      }
    } else {  // Q6_K: 6-bit values 0..63 with offset 32, signed scale per 16
      const auto& x = reinterpret_cast<const BlockQ6_K*>(row)[b];
      // The 16 signed scales as 16-bit lanes; each half's 8 in both 128-bit lanes, so that one byte
      // shuffle puts scale 2g in the low lane and 2g + 1 in the high one.
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
      const __m256i sc_half[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                  _mm256_permute2x128_si256(sc16, sc16, 0x11)};
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = Load32(x.ql + 64 * h), ql1 = Load32(x.ql + 64 * h + 32),
                      qh = Load32(x.qh + 32 * h);
        const __m256i q6[4] = {Q6Values<0>(ql0, ql1, qh), Q6Values<1>(ql0, ql1, qh),
                               Q6Values<2>(ql0, ql1, qh), Q6Values<3>(ql0, ql1, qh)};
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          const __m256i q = q6[g];
          const __m256i scv = _mm256_shuffle_epi8(
              sc_half[h], _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * g + 1))),
                                           _mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * g)))));
#pragma GCC unroll 4
          for (int i = 0; i < MR; ++i)
            sum[i] = _mm256_add_epi32(sum[i], Madd16(q, aq[i] + 128 * h + 32 * g, scv));
        }
      }
      d = Half(x.d);
      for (int i = 0; i < MR; ++i) {
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.bsum16.data() + ab[i] * 16));
        const __m256i p = _mm256_madd_epi16(sc16, bs);
        offset[i] = 32.0f * d *
                    (float)HsumI32(_mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1)));
      }
    }
    for (int i = 0; i < MR; ++i) {
      // sum(a w) = ad * (d * isum - offset): the offset term is one lane's worth, added to lane 0.
      const __m256 v = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(d)),
                                     _mm256_setr_ps(offset[i], 0, 0, 0, 0, 0, 0, 0));
      acc[i] = _mm256_fmadd_ps(v, _mm256_set1_ps(ad[i]), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) out[i * ldo] = Hsum(acc[i]);
}

template <DType T>
void GemmQ8K(const float* a, int64_t m, int64_t k, const void* w, float* y, int64_t n_total, int64_t n_begin,
             int64_t n_end) {
  thread_local Q8KRows act;
  QuantizeQ8K(a, m, k, &act);
  const bool vnni = Q8KVnniSupported();
  if (vnni) PrepareQ8KVnni(T, &act);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = StorageBytes(T, k);
  constexpr int64_t kMBlock = 64;  // activation rows kept hot while the weight rows stream past
  for (int64_t m0 = 0; m0 < m; m0 += kMBlock) {
    const int64_t m1 = std::min(m, m0 + kMBlock);
    for (int64_t n = n_begin; n < n_end; ++n)
      for (int64_t i = m0; i < m1; i += 4) {
        const uint8_t* wr = wb + n * rb;
        float* yi = y + i * n_total + n;
        if (vnni) {
          DotRowsQ8KVnni(T, wr, k, act, i, (int)std::min<int64_t>(4, m1 - i), yi, n_total);
          continue;
        }
        switch (std::min<int64_t>(4, m1 - i)) {
          case 4: DotRowQ8K<T, 4>(wr, k, act, i, yi, n_total); break;
          case 3: DotRowQ8K<T, 3>(wr, k, act, i, yi, n_total); break;
          case 2: DotRowQ8K<T, 2>(wr, k, act, i, yi, n_total); break;
          default: DotRowQ8K<T, 1>(wr, k, act, i, yi, n_total); break;
        }
      }
  }
}

template <class F>
void Dispatch(DType wt, F&& f) {
  switch (wt) {
    case DType::Q4_1: return f.template operator()<DType::Q4_1>();
    case DType::Q5_0: return f.template operator()<DType::Q5_0>();
    case DType::Q5_1: return f.template operator()<DType::Q5_1>();
    case DType::Q2_K: return f.template operator()<DType::Q2_K>();
    case DType::Q3_K: return f.template operator()<DType::Q3_K>();
    case DType::Q4_K: return f.template operator()<DType::Q4_K>();
    case DType::Q5_K: return f.template operator()<DType::Q5_K>();
    case DType::Q6_K: return f.template operator()<DType::Q6_K>();
    case DType::IQ4_NL: return f.template operator()<DType::IQ4_NL>();
    case DType::IQ4_XS: return f.template operator()<DType::IQ4_XS>();
    default: return;
  }
}

}  // namespace

void GemmRowsBlockFormat(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                         int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  Dispatch(wt, [&]<DType T>() { Gemm<T>(a, m, k, w, y, n_total, n_begin, n_end); });
}

void DequantizeBlocksAvx2(const void* w, DType wt, int64_t blocks, float* out) {
  Dispatch(wt, [&]<DType T>() { DequantRows<T>(static_cast<const uint8_t*>(w), blocks, out); });
}

bool BlockQ8KSupported(DType wt, int64_t k) {
  return GemmAvx2Supported() && (wt == DType::Q4_K || wt == DType::Q6_K) && k > 0 && k % kSuperBlock == 0;
}

void GemmRowsBlockQ8K(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y,
                      int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  if (wt == DType::Q4_K) return GemmQ8K<DType::Q4_K>(a, m, k, w, y, n_total, n_begin, n_end);
  if (wt == DType::Q6_K) return GemmQ8K<DType::Q6_K>(a, m, k, w, y, n_total, n_begin, n_end);
}

double BlockQ8KErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n) {
  return Int8DotErrorBound(a, w, wt, k, n, kSuperBlock);
}

}  // namespace prism
