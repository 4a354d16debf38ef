// Template-tier CPU causal attention for x86-64 CPUs without AVX-512 (AVX2 + FMA): attention_kernel.h's
// block kernel over 8 lanes (8 (query, group head) rows per block; a block of at most 4 rows, a decode step's
// group heads, puts 8 keys in the lanes).
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "backends/cpu/attention_block.h"

#define PRISM_AVX2 __attribute__((target("avx2,fma")))

namespace prism {
namespace {

// AVX2's lanes for attention_kernel.h (masks are vectors of all-ones or zero lanes).
struct Lanes256 {
  using F = __m256;
  using M = __m256;
  using T = __m256i;
  static constexpr int kW = 8;
  static constexpr int kAcrossKeysRows = 4;
  static constexpr int kStripVectors = 2;  // P·V strips of 16 columns
  static constexpr bool kMaskedLoadsFree = false;
  static constexpr bool kNarrowColumns = false;
  static bool AcrossKeys(int rows, int64_t) { return rows <= 4; }

  PRISM_AVX2 static F Zero() { return _mm256_setzero_ps(); }
  PRISM_AVX2 static F Set1(float x) { return _mm256_set1_ps(x); }
  PRISM_AVX2 static F Load(const float* p) { return _mm256_loadu_ps(p); }
  PRISM_AVX2 static void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  PRISM_AVX2 static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  PRISM_AVX2 static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  PRISM_AVX2 static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  PRISM_AVX2 static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  PRISM_AVX2 static F Fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  PRISM_AVX2 static T TailOf(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  PRISM_AVX2 static F LoadTail(T t, const float* p) { return _mm256_maskload_ps(p, t); }
  PRISM_AVX2 static void StoreTail(T t, float* p, F x) { _mm256_maskstore_ps(p, t, x); }
  PRISM_AVX2 static F MaxWhere(F m, M mask, F x) { return _mm256_blendv_ps(m, _mm256_max_ps(m, x), mask); }
  PRISM_AVX2 static F Keep(M mask, F x) { return _mm256_and_ps(x, mask); }
  PRISM_AVX2 static __m256i LoadCounts(const int32_t* n) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(n));
  }
  PRISM_AVX2 static M Seen(__m256i nv, int64_t t) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, _mm256_set1_epi32((int32_t)t)));
  }

  // Lanes [0, 8) as int32: which of 8 keys from t0 a row seeing n keys sees is n > t0 + lane.
  PRISM_AVX2 static M Visible(int64_t n, int64_t t0) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)n),
                                                  _mm256_add_epi32(lane, _mm256_set1_epi32((int32_t)t0))));
  }

  PRISM_AVX2 static float ReduceAdd(F x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }

  PRISM_AVX2 static float ReduceMax(F x) {
    x = _mm256_max_ps(x, _mm256_permute2f128_ps(x, x, 0x01));
    x = _mm256_max_ps(x, _mm256_shuffle_ps(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_cvtss_f32(_mm256_max_ps(x, _mm256_shuffle_ps(x, x, _MM_SHUFFLE(2, 3, 0, 1))));
  }

  // 2^x as AVX-512's (degree-7 series of e^((f - 1/2) ln 2) times sqrt(2)), with 2^i put into the exponent
  // bits: 0 below x = -126 (no subnormals), NaN passes through.
  PRISM_AVX2 static F Exp2(F x) {
    const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m256 xc = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 xi = _mm256_floor_ps(xc);
    const __m256 g = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(xc, xi), _mm256_set1_ps(0.5f)),
                                   _mm256_set1_ps(0.6931471805599453f));
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
      p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(c));
    // 2^i for i in [-127, 128): (i + 127) << 23 as float bits; i = -127 gives 0 (masked anyway).
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
    __m256 r = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_set1_ps(1.4142135623730951f)), _mm256_castsi256_ps(e));
    r = _mm256_and_ps(r, normal);
    return _mm256_blendv_ps(r, x, nan);
  }

  // Lane j: the sum of x[j]'s 8 lanes.
  PRISM_AVX2 static F LaneSums(const F* x) {
    const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(x[0], x[1]), _mm256_hadd_ps(x[2], x[3]));
    const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(x[4], x[5]), _mm256_hadd_ps(x[6], x[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
  }
};

}  // namespace
}  // namespace prism

#define PRISM_LANES_TARGET PRISM_AVX2
#include "backends/cpu/attention_kernel.h"

namespace prism {

static_assert(Lanes256::kW == kAvx2AttentionRows);

PRISM_AVX2 void AttentionBlockAvx2(const float* q, const float* k, const float* v, float* out,
                                   const AttentionDims& a, int64_t h, int64_t row0,
                                   std::vector<float>& scratch) {
  AttentionBlockOf<Lanes256>(q, k, v, out, a, h, row0, scratch);
}

}  // namespace prism
