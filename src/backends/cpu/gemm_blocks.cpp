// GEMM over K-quant, Q4_1/Q5_x and IQ4 weights: AVX2 block dequantization feeding f32 FMA tiles.
#include "backends/cpu/gemm_blocks.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/gemm.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

#define PRISM_AVX2 __attribute__((target("avx2,fma,f16c")))

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
// Bits `shift`.. of every byte, `width` bits wide.
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

// One block of type T into out (BlockElems(T) floats).
template <DType T>
PRISM_AVX2 void DequantBlock(const uint8_t* p, float* out) {
  if constexpr (T == DType::Q4_1) {
    const auto& x = *reinterpret_cast<const BlockQ4_1*>(p);
    const float d = Half(x.d), m = Half(x.m);
    Emit32<false>(Nibbles16(x.qs), d, m, d, m, out);
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    const uint8_t* qh = T == DType::Q5_0 ? p + 2 : p + 4;
    const __m256i q = _mm256_or_si256(Nibbles16(qh + 4), FifthBits(qh));
    const float d = Half(*reinterpret_cast<const uint16_t*>(p));
    const float m = T == DType::Q5_0 ? -16.0f * d : Half(*reinterpret_cast<const uint16_t*>(p + 2));
    Emit32<false>(q, d, m, d, m, out);
  } else if constexpr (T == DType::IQ4_NL) {
    const auto& x = *reinterpret_cast<const BlockIQ4_NL*>(p);
    const float d = Half(x.d);
    Emit32<true>(Iq4Lookup(Nibbles16(x.qs)), d, 0.0f, d, 0.0f, out);
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    // Halves of 128 values: 32 bytes of 2-bit fields at shifts 0, 2, 4, 6; scales per 16 values.
    const uint8_t* qs = T == DType::Q2_K ? reinterpret_cast<const BlockQ2_K*>(p)->qs
                                         : reinterpret_cast<const BlockQ3_K*>(p)->qs;
    for (int h = 0; h < 2; ++h) {
      const __m256i bytes = Load32(qs + 32 * h);
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
        Emit32<false>(q, d[0], m[0], d[1], m[1], out + 128 * h + 32 * s);
      }
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    const uint16_t* dm = reinterpret_cast<const uint16_t*>(p);
    const uint8_t* scales = p + 4;
    const uint8_t* qs = T == DType::Q4_K ? reinterpret_cast<const BlockQ4_K*>(p)->qs
                                         : reinterpret_cast<const BlockQ5_K*>(p)->qs;
    const float d = Half(dm[0]), dmin = Half(dm[1]);
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = Load32(qs + 32 * c);
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;
        int sc, mn;
        ScaleMinK4(scales, j, &sc, &mn);
        __m256i q = half ? High4(bytes) : Low4(bytes);
        if constexpr (T == DType::Q5_K)
          q = _mm256_or_si256(
              q, _mm256_slli_epi16(Field(Load32(reinterpret_cast<const BlockQ5_K*>(p)->qh), j, 1), 4));
        const float d1 = d * (float)sc, m1 = -(dmin * (float)mn);
        Emit32<false>(q, d1, m1, d1, m1, out + 32 * j);
      }
    }
  } else if constexpr (T == DType::Q6_K) {
    const auto& x = *reinterpret_cast<const BlockQ6_K*>(p);
    const float d = Half(x.d);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load32(x.ql + 64 * h), ql1 = Load32(x.ql + 64 * h + 32), qh = Load32(x.qh + 32 * h);
      for (int g = 0; g < 4; ++g) {
        const __m256i lo = g == 0 ? Low4(ql0) : g == 1 ? Low4(ql1) : g == 2 ? High4(ql0) : High4(ql1);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(Field(qh, 2 * g, 3), 4));
        const float d0 = d * (float)x.scales[h * 8 + 2 * g], d1 = d * (float)x.scales[h * 8 + 2 * g + 1];
        Emit32<false>(q, d0, -32.0f * d0, d1, -32.0f * d1, out + 128 * h + 32 * g);
      }
    }
  } else if constexpr (T == DType::IQ4_XS) {
    const auto& x = *reinterpret_cast<const BlockIQ4_XS*>(p);
    const float d = Half(x.d);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x.scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * (float)(ls - 32);
      Emit32<true>(Iq4Lookup(Nibbles16(x.qs + 16 * ib)), dl, 0.0f, dl, 0.0f, out + 32 * ib);
    }
  }
}

PRISM_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

constexpr int kNr = 4;       // weight rows per tile
constexpr int kChunk = 256;  // values dequantized into L1 per row before they are used

// MR (1 or 2) activation rows x up to kNr weight rows, chunk by chunk.
template <DType T, int MR>
PRISM_AVX2 void DecodeTile(const float* a, int64_t k, const uint8_t* w, int64_t rb, int nr, float* y,
                           int64_t ldy) {
  constexpr int E = T == DType::Q4_1 || T == DType::Q5_0 || T == DType::Q5_1 || T == DType::IQ4_NL ? 32 : 256;
  const int64_t block_bytes = BlockBytes(T);
  alignas(32) float buf[kNr][kChunk];
  __m256 acc[MR][kNr];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNr; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int j = nr; j < kNr; ++j) std::fill(buf[j], buf[j] + kChunk, 0.0f);
  for (int64_t kk = 0; kk < k; kk += kChunk) {
    const int len = (int)std::min<int64_t>(kChunk, k - kk);
    for (int j = 0; j < nr; ++j) {
      const uint8_t* blk = w + j * rb + kk / E * block_bytes;
      for (int e = 0; e < len; e += E, blk += block_bytes) DequantBlock<T>(blk, buf[j] + e);
    }
    for (int e = 0; e < len; e += 8) {
      __m256 av[MR];
#pragma GCC unroll 2
      for (int i = 0; i < MR; ++i) av[i] = _mm256_loadu_ps(a + i * k + kk + e);
#pragma GCC unroll 4
      for (int j = 0; j < kNr; ++j) {
        const __m256 wv = _mm256_load_ps(buf[j] + e);
#pragma GCC unroll 2
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(av[i], wv, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < nr; ++j) y[i * ldy + j] = Hsum(acc[i][j]);
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
    for (int64_t n = n_begin; n < n_end; n += kNr) {
      const int nr = (int)std::min<int64_t>(kNr, n_end - n);
      if (m == 2)
        DecodeTile<T, 2>(a, k, wb + n * rb, rb, nr, y + n, n_total);
      else
        DecodeTile<T, 1>(a, k, wb + n * rb, rb, nr, y + n, n_total);
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

}  // namespace prism
