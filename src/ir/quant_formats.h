// GGUF's other block formats (Q4_1, Q5_0, Q5_1, the K-quants, IQ4_NL, IQ4_XS): layouts and reference
// dequantization of single elements, the semantics every kernel over them is checked against.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>

#include "ir/dtype.h"

namespace prism {

// Super-block size of the K-quants and IQ4_XS; the others hold 32 values per block.
constexpr int kSuperBlock = 256;

// Layouts, byte for byte as ggml writes them (f16 fields as raw bits). Values are
//   Q4_1/Q5_1: d * q + m;  Q5_0: d * (q - 16);  IQ4_NL: d * kIq4NlValues[q]
//   Q2_K, Q4_K, Q5_K: (d * scale_j) * q - dmin * min_j over sub-blocks j of 16 (Q2_K) or 32
//   Q3_K, Q6_K: (d * (scale_j - 32 or signed scale_j)) * (q - offset) over sub-blocks of 16
//   IQ4_XS: (d * (scale_j - 32)) * kIq4NlValues[q] over sub-blocks of 32
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockIQ4_XS {
  uint16_t d, scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24, "ggml layouts");
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144,
              "ggml layouts");
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210, "ggml layouts");
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136, "ggml layouts");

// The 16 non-uniform levels of IQ4_NL and IQ4_XS.
extern const int8_t kIq4NlValues[16];

// Scale and min of sub-block j (0..7) of a Q4_K/Q5_K block: 6-bit fields packed into 12 bytes.
inline void ScaleMinK4(const uint8_t* q, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// All 8 scales and 8 mins of a Q4_K/Q5_K block as bytes (out[0..7] scales, out[8..15] mins), as
// ggml unpacks the 12 packed bytes: ScaleMinK4 for every j at once (the kernels' in-register form,
// backends/cpu/k4_scales.h, is tested against it).
inline void UnpackScalesK4(const uint8_t* q, uint8_t* out) {
  uint32_t u[4];
  std::memcpy(u, q, 12);
  u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
  const uint32_t aux = u[1] & 0x3f3f3f3f;
  u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
  u[2] = aux;
  u[0] &= 0x3f3f3f3f;
  std::memcpy(out, u, 16);
}
// Signed scale of sub-block j (0..15) of a Q3_K block (6-bit, stored with a +32 offset).
inline int ScaleQ3K(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Fills `blocks` blocks of type t with random bytes whose f16 scales are finite and sized so that
// values stay within a few units (for tests and schedule checks, which never see all zeros).
void FillRandomBlocks(DType t, void* data, int64_t blocks, std::mt19937& rng);

// True for the types this file defines (those with a reference dequantizer here).
bool IsBlockFormat(DType t);
int BlockFormatElems(DType t);
int BlockFormatBytes(DType t);
// Element i of an array of blocks of type t, exactly as ggml's dequantize_row_* computes it.
float DequantBlockFormat(DType t, const void* blocks, int64_t i);

// One block of type t as integers: q[j] in 0..255 for each of its BlockFormatElems(t) values and, per
// 16 values g, a scale and an offset with value j = scale[j / 16] * q[j] - offset[j / 16] (in exact
// arithmetic; DequantBlockFormat is that value rounded to f32 once). The integer kernels' view.
void BlockFormatInts(DType t, const void* block, uint8_t* q, float* scale, float* offset);

}  // namespace prism
