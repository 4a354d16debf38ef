// Reference dequantization of GGUF's Q4_1/Q5_x, K-quant and IQ4 blocks, one element at a time, and
// their integer view (values, per-16 scales and offsets) for integer kernels.
#include "ir/quant_formats.h"

#include <cstring>
#include <string>

#include "ir/error.h"

namespace prism {

const int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

bool IsBlockFormat(DType t) { return BlockFormatElems(t) > 0; }

int BlockFormatElems(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL: return 32;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return kSuperBlock;
    default: return 0;
  }
}

int BlockFormatBytes(DType t) {
  switch (t) {
    case DType::Q4_1: return sizeof(BlockQ4_1);
    case DType::Q5_0: return sizeof(BlockQ5_0);
    case DType::Q5_1: return sizeof(BlockQ5_1);
    case DType::Q2_K: return sizeof(BlockQ2_K);
    case DType::Q3_K: return sizeof(BlockQ3_K);
    case DType::Q4_K: return sizeof(BlockQ4_K);
    case DType::Q5_K: return sizeof(BlockQ5_K);
    case DType::Q6_K: return sizeof(BlockQ6_K);
    case DType::IQ4_NL: return sizeof(BlockIQ4_NL);
    case DType::IQ4_XS: return sizeof(BlockIQ4_XS);
    default: return 0;
  }
}

void FillRandomBlocks(DType t, void* data, int64_t blocks, std::mt19937& rng) {
  // Offsets of the f16 fields (d, and the min where the format has one) and d's magnitude.
  struct Fields {
    int d, min;
    float scale;
  };
  Fields f{};
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1: f = {0, 2, 0.1f}; break;
    case DType::Q5_0: f = {0, -1, 0.1f}; break;
    case DType::IQ4_NL: f = {0, -1, 0.01f}; break;
    case DType::Q2_K: f = {80, 82, 0.1f}; break;
    case DType::Q3_K: f = {108, -1, 0.02f}; break;
    case DType::Q4_K:
    case DType::Q5_K: f = {0, 2, 0.003f}; break;
    case DType::Q6_K: f = {208, -1, 0.001f}; break;
    case DType::IQ4_XS: f = {0, -1, 0.001f}; break;
    default: return;
  }
  uint8_t* bytes = static_cast<uint8_t*>(data);
  const int64_t size = BlockFormatBytes(t);
  for (int64_t i = 0; i < blocks * size; ++i) bytes[i] = (uint8_t)rng();
  std::uniform_real_distribution<float> mag(0.2f, 1.0f);
  auto put = [&](uint8_t* p, float v) {
    const uint16_t h = FloatToHalf(rng() % 2 ? v : -v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < blocks; ++b) {
    put(bytes + b * size + f.d, f.scale * mag(rng));
    if (f.min >= 0) put(bytes + b * size + f.min, f.scale * mag(rng));
  }
}

namespace {

// Low nibble for j < 16, high nibble of byte j - 16 otherwise (the 32-value blocks' order).
int Nibble32(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

// 5-bit value j of a Q5_0/Q5_1 block: its nibble plus bit j of qh as the fifth bit.
int Five32(const uint8_t* qh, const uint8_t* qs, int j) {
  const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
  return Nibble32(qs, j) | (int)(((h >> j) & 1) << 4);
}

// Nibble of element j (0..255) of a Q4_K/Q5_K/IQ4_XS-ordered super-block: 64-value chunks of 32
// bytes, low nibbles first.
int NibbleK(const uint8_t* qs, int j) {
  const uint8_t b = qs[j / 64 * 32 + j % 32];
  return (j % 64) < 32 ? b & 0xF : b >> 4;
}

}  // namespace

float DequantBlockFormat(DType t, const void* blocks, int64_t i) {
  const int64_t b = i / BlockFormatElems(t);
  const int j = (int)(i % BlockFormatElems(t));
  const uint8_t* p = static_cast<const uint8_t*>(blocks) + b * BlockFormatBytes(t);
  switch (t) {
    case DType::Q4_1: {
      const BlockQ4_1& x = *reinterpret_cast<const BlockQ4_1*>(p);
      return (float)Nibble32(x.qs, j) * HalfToFloat(x.d) + HalfToFloat(x.m);
    }
    case DType::Q5_0: {
      const BlockQ5_0& x = *reinterpret_cast<const BlockQ5_0*>(p);
      return (float)(Five32(x.qh, x.qs, j) - 16) * HalfToFloat(x.d);
    }
    case DType::Q5_1: {
      const BlockQ5_1& x = *reinterpret_cast<const BlockQ5_1*>(p);
      return (float)Five32(x.qh, x.qs, j) * HalfToFloat(x.d) + HalfToFloat(x.m);
    }
    case DType::IQ4_NL: {
      const BlockIQ4_NL& x = *reinterpret_cast<const BlockIQ4_NL*>(p);
      return HalfToFloat(x.d) * (float)kIq4NlValues[Nibble32(x.qs, j)];
    }
    case DType::Q2_K: {  // halves of 128: 4 shifts x 2 groups of 16 bytes
      const BlockQ2_K& x = *reinterpret_cast<const BlockQ2_K*>(p);
      const int half = j / 128, r = j % 128, shift = 2 * (r / 32), g = (r % 32) / 16, l = r % 16;
      const uint8_t sc = x.scales[half * 8 + (r / 32) * 2 + g];
      const int q = (x.qs[half * 32 + g * 16 + l] >> shift) & 3;
      const float dl = HalfToFloat(x.d) * (float)(sc & 0xF), ml = HalfToFloat(x.dmin) * (float)(sc >> 4);
      return dl * (float)q - ml;
    }
    case DType::Q3_K: {
      const BlockQ3_K& x = *reinterpret_cast<const BlockQ3_K*>(p);
      const int half = j / 128, r = j % 128, shift = 2 * (r / 32), g = (r % 32) / 16, l = r % 16;
      const int low = (x.qs[half * 32 + g * 16 + l] >> shift) & 3;
      const bool high = x.hmask[g * 16 + l] & (1 << (half * 4 + r / 32));
      const float dl = HalfToFloat(x.d) * (float)ScaleQ3K(x.scales, half * 8 + (r / 32) * 2 + g);
      return dl * (float)(low - (high ? 0 : 4));
    }
    case DType::Q4_K: {
      const BlockQ4_K& x = *reinterpret_cast<const BlockQ4_K*>(p);
      int sc, mn;
      ScaleMinK4(x.scales, j / 32, &sc, &mn);
      const float d1 = HalfToFloat(x.d) * (float)sc, m1 = HalfToFloat(x.dmin) * (float)mn;
      return d1 * (float)NibbleK(x.qs, j) - m1;
    }
    case DType::Q5_K: {
      const BlockQ5_K& x = *reinterpret_cast<const BlockQ5_K*>(p);
      int sc, mn;
      ScaleMinK4(x.scales, j / 32, &sc, &mn);
      const float d1 = HalfToFloat(x.d) * (float)sc, m1 = HalfToFloat(x.dmin) * (float)mn;
      const int q = NibbleK(x.qs, j) + (((x.qh[j % 32] >> (j / 32)) & 1) << 4);
      return d1 * (float)q - m1;
    }
    case DType::Q6_K: {  // halves of 128: 4 groups of 32 from 64 ql bytes and 32 qh bytes
      const BlockQ6_K& x = *reinterpret_cast<const BlockQ6_K*>(p);
      const int half = j / 128, r = j % 128, g = r / 32, l = r % 32;
      const uint8_t* ql = x.ql + half * 64;
      const uint8_t b = ql[l + 32 * (g % 2)];
      const int lo4 = g < 2 ? b & 0xF : b >> 4;
      const int hi2 = (x.qh[half * 32 + l] >> (2 * g)) & 3;
      const float dl = HalfToFloat(x.d) * (float)x.scales[half * 8 + l / 16 + 2 * g];
      return dl * (float)((lo4 | (hi2 << 4)) - 32);
    }
    case DType::IQ4_XS: {
      const BlockIQ4_XS& x = *reinterpret_cast<const BlockIQ4_XS*>(p);
      const int ib = j / 32, jj = j % 32;
      const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x.scales_h >> (2 * ib)) & 3) << 4);
      const float dl = HalfToFloat(x.d) * (float)(ls - 32);
      return dl * (float)kIq4NlValues[Nibble32(x.qs + ib * 16, jj)];
    }
    default: return 0;
  }
}

void BlockFormatInts(DType t, const void* block, uint8_t* q, float* scale, float* offset) {
  const uint8_t* p = static_cast<const uint8_t*>(block);
  const int n = BlockFormatElems(t);
  // Formats with one scale per 32 values write it to both 16-value halves.
  auto per32 = [&](int sub, float s, float o) {
    scale[2 * sub] = scale[2 * sub + 1] = s;
    offset[2 * sub] = offset[2 * sub + 1] = o;
  };
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1: {
      const uint16_t* dm = reinterpret_cast<const uint16_t*>(p);  // d, m lead both layouts
      for (int j = 0; j < n; ++j)
        q[j] = (uint8_t)(t == DType::Q4_1 ? Nibble32(reinterpret_cast<const BlockQ4_1*>(p)->qs, j)
                                          : Five32(reinterpret_cast<const BlockQ5_1*>(p)->qh,
                                                   reinterpret_cast<const BlockQ5_1*>(p)->qs, j));
      return per32(0, HalfToFloat(dm[0]), -HalfToFloat(dm[1]));
    }
    case DType::Q5_0: {
      const BlockQ5_0& x = *reinterpret_cast<const BlockQ5_0*>(p);
      for (int j = 0; j < n; ++j) q[j] = (uint8_t)Five32(x.qh, x.qs, j);
      return per32(0, HalfToFloat(x.d), 16 * HalfToFloat(x.d));
    }
    case DType::IQ4_NL: {
      const BlockIQ4_NL& x = *reinterpret_cast<const BlockIQ4_NL*>(p);
      for (int j = 0; j < n; ++j) q[j] = (uint8_t)(kIq4NlValues[Nibble32(x.qs, j)] + 128);
      return per32(0, HalfToFloat(x.d), 128 * HalfToFloat(x.d));
    }
    case DType::Q2_K:
    case DType::Q3_K:
      for (int j = 0; j < n; ++j) {
        const int half = j / 128, r = j % 128, shift = 2 * (r / 32), g = (r % 32) / 16, l = r % 16;
        if (t == DType::Q2_K) {
          const BlockQ2_K& x = *reinterpret_cast<const BlockQ2_K*>(p);
          q[j] = (uint8_t)((x.qs[half * 32 + g * 16 + l] >> shift) & 3);
          const uint8_t sc = x.scales[j / 16];  // half * 8 + (r / 32) * 2 + g
          scale[j / 16] = HalfToFloat(x.d) * (float)(sc & 0xF);
          offset[j / 16] = HalfToFloat(x.dmin) * (float)(sc >> 4);
        } else {
          const BlockQ3_K& x = *reinterpret_cast<const BlockQ3_K*>(p);
          const bool high = x.hmask[g * 16 + l] & (1 << (half * 4 + r / 32));
          q[j] = (uint8_t)(((x.qs[half * 32 + g * 16 + l] >> shift) & 3) + (high ? 4 : 0));
          scale[j / 16] = HalfToFloat(x.d) * (float)ScaleQ3K(x.scales, j / 16);
          offset[j / 16] = 4 * scale[j / 16];
        }
      }
      return;
    case DType::Q4_K:
    case DType::Q5_K: {
      const uint16_t* dm = reinterpret_cast<const uint16_t*>(p);  // d, dmin, then the 12 scale bytes
      const uint8_t* scales = p + 4;
      for (int j = 0; j < n; ++j) {
        if (t == DType::Q4_K) {
          q[j] = (uint8_t)NibbleK(reinterpret_cast<const BlockQ4_K*>(p)->qs, j);
        } else {
          const BlockQ5_K& x = *reinterpret_cast<const BlockQ5_K*>(p);
          q[j] = (uint8_t)(NibbleK(x.qs, j) + (((x.qh[j % 32] >> (j / 32)) & 1) << 4));
        }
      }
      for (int sub = 0; sub < 8; ++sub) {
        int sc, mn;
        ScaleMinK4(scales, sub, &sc, &mn);
        per32(sub, HalfToFloat(dm[0]) * (float)sc, HalfToFloat(dm[1]) * (float)mn);
      }
      return;
    }
    case DType::Q6_K: {
      const BlockQ6_K& x = *reinterpret_cast<const BlockQ6_K*>(p);
      for (int j = 0; j < n; ++j) {
        const int half = j / 128, g = (j % 128) / 32, l = j % 32;
        const uint8_t b = x.ql[half * 64 + l + 32 * (g % 2)];
        q[j] = (uint8_t)((g < 2 ? b & 0xF : b >> 4) | (((x.qh[half * 32 + l] >> (2 * g)) & 3) << 4));
      }
      for (int g = 0; g < 16; ++g) {  // scale index half * 8 + l / 16 + 2 * group is j / 16
        scale[g] = HalfToFloat(x.d) * (float)x.scales[g];
        offset[g] = 32 * scale[g];
      }
      return;
    }
    case DType::IQ4_XS: {
      const BlockIQ4_XS& x = *reinterpret_cast<const BlockIQ4_XS*>(p);
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x.scales_h >> (2 * ib)) & 3) << 4);
        const float dl = HalfToFloat(x.d) * (float)(ls - 32);
        for (int jj = 0; jj < 32; ++jj)
          q[32 * ib + jj] = (uint8_t)(kIq4NlValues[Nibble32(x.qs + ib * 16, jj)] + 128);
        per32(ib, dl, 128 * dl);
      }
      return;
    }
    default: throw Error("BlockFormatInts: " + std::string(DTypeName(t)) + " is not a block format");
  }
}

}  // namespace prism
