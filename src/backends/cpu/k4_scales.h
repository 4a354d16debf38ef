// A Q4_K/Q5_K block's 6-bit scales and mins unpacked in registers, for the AVX2 and AVX-512 q8k kernels.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace prism {

// UnpackScalesK4 (ir/quant_formats.h) on the 32-bit lanes u0, u1, u2 of the 12 scale bytes: bytes 0-7 the
// scales u0 & 0x3f3f3f3f, (u2 & 0x0f0f0f0f) | ((u0 >> 6) & 0x03030303) << 4, bytes 8-15 the mins
// u1 & 0x3f3f3f3f, ((u2 >> 4) & 0x0f0f0f0f) | ((u1 >> 6) & 0x03030303) << 4. Through memory (as the scalar
// form writes them), the 32-bit stores and the wider reload after them stall store forwarding once per
// block. Reads 16 bytes: a block's scales are followed by its quants.
__attribute__((target("avx2"), always_inline)) inline __m128i UnpackScalesK4Vector(const uint8_t* scales) {
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
  const __m128i low6 = _mm_and_si128(u, _mm_set1_epi32(0x3f3f3f3f));  // [s0-3, m0-3, ..]
  const __m128i u2 =
      _mm_srlv_epi32(_mm_shuffle_epi32(u, 0xAA), _mm_set_epi32(0, 0, 4, 0));  // [u2, u2 >> 4, ..]
  const __m128i top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u, 6), _mm_set1_epi32(0x03030303)), 4);
  const __m128i high = _mm_or_si128(_mm_and_si128(u2, _mm_set1_epi32(0x0f0f0f0f)), top);  // [s4-7, m4-7, ..]
  return _mm_unpacklo_epi32(low6, high);
}

}  // namespace prism
