// DType properties, f16/bf16 conversions and reference GGUF block (de)quantization.
#include "ir/dtype.h"

#include <algorithm>
#include <cmath>

#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism {

bool IsQuantized(DType t) { return t == DType::Q8_0 || t == DType::Q4_0 || IsBlockFormat(t); }
bool IsFloat(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || IsQuantized(t);
}
bool IsInteger(DType t) { return !IsFloat(t); }

int BlockElems(DType t) {
  if (IsBlockFormat(t)) return BlockFormatElems(t);
  return IsQuantized(t) ? kQuantBlock : 1;
}

int BlockBytes(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I8: case DType::U8: case DType::Bool: return 1;
    case DType::Q8_0: return sizeof(BlockQ8_0);
    case DType::Q4_0: return sizeof(BlockQ4_0);
    default: return BlockFormatBytes(t);
  }
}

int64_t StorageBytes(DType t, int64_t n) {
  return (n + BlockElems(t) - 1) / BlockElems(t) * BlockBytes(t);
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q2_K: return "q2_k";
    case DType::Q3_K: return "q3_k";
    case DType::Q4_K: return "q4_k";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
    case DType::IQ4_NL: return "iq4_nl";
    case DType::IQ4_XS: return "iq4_xs";
  }
  return "?";
}

DType ParseDType(std::string_view name) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8, DType::U8, DType::Bool,
                  DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS})
    if (DTypeName(t) == name) return t;
  throw Error("unknown dtype '" + std::string(name) +
              "' (known: f32 f16 bf16 i32 i8 u8 bool q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k "
              "iq4_nl iq4_xs)");
}

static uint32_t Bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static float FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

float HalfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal
    float v = std::ldexp((float)mant, -24);
    return sign ? -v : v;
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (mant << 13));
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  uint32_t u = Bits(f), sign = (u >> 16) & 0x8000;
  float a = std::fabs(f);
  if (std::isnan(f)) return (uint16_t)(sign | 0x7e00);
  if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);  // rounds to infinity
  if (a < 6.103515625e-05f) {                             // subnormal half: multiples of 2^-24
    return (uint16_t)(sign | (uint32_t)std::nearbyint(a * 16777216.0f));
  }
  uint32_t au = Bits(a);
  uint32_t exp = (au >> 23) - 112, mant = au & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;  // carry into exponent is correct
  return (uint16_t)(sign | h);
}

float BF16ToFloat(uint16_t b) { return FromBits((uint32_t)b << 16); }

uint16_t FloatToBF16(float f) {
  uint32_t u = Bits(f);
  if (std::isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

double RoundToDType(double v, DType t) {
  switch (t) {
    case DType::F32: return (float)v;
    case DType::F16: return HalfToFloat(FloatToHalf((float)v));
    case DType::BF16: return BF16ToFloat(FloatToBF16((float)v));
    case DType::I32: return (double)(int32_t)std::trunc(v);
    case DType::I8: return (double)(int8_t)std::trunc(v);
    case DType::U8: return (double)(uint8_t)std::trunc(v);
    case DType::Bool: return v != 0 ? 1.0 : 0.0;
    default: return (float)v;  // quantized types hold floats
  }
}

void QuantizeQ8_0(const float* src, BlockQ8_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * kQuantBlock;
    float amax = 0;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    dst[b].d = FloatToHalf(d);
    for (int j = 0; j < kQuantBlock; ++j) dst[b].qs[j] = (int8_t)std::nearbyint(x[j] * id);
  }
}

void QuantizeQ4_0(const float* src, BlockQ4_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * kQuantBlock;
    float amax = 0, max = 0;
    for (int j = 0; j < kQuantBlock; ++j)
      if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
    float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    dst[b].d = FloatToHalf(d);
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      int lo = std::min(15, (int)(x[j] * id + 8.5f));
      int hi = std::min(15, (int)(x[j + kQuantBlock / 2] * id + 8.5f));
      dst[b].qs[j] = (uint8_t)(lo | (hi << 4));
    }
  }
}

float DequantQ8_0(const void* blocks, int64_t i) {
  const BlockQ8_0& b = static_cast<const BlockQ8_0*>(blocks)[i / kQuantBlock];
  return HalfToFloat(b.d) * (float)b.qs[i % kQuantBlock];
}

float DequantQ4_0(const void* blocks, int64_t i) {
  const BlockQ4_0& b = static_cast<const BlockQ4_0*>(blocks)[i / kQuantBlock];
  int j = (int)(i % kQuantBlock);
  int q = j < 16 ? (b.qs[j] & 0xf) : (b.qs[j - 16] >> 4);
  return HalfToFloat(b.d) * (float)(q - 8);
}

double LoadAsDouble(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::F16: return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::BF16: return BF16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::I32: return static_cast<const int32_t*>(data)[i];
    case DType::I8: return static_cast<const int8_t*>(data)[i];
    case DType::U8: case DType::Bool: return static_cast<const uint8_t*>(data)[i];
    case DType::Q8_0: return DequantQ8_0(data, i);
    case DType::Q4_0: return DequantQ4_0(data, i);
    default: return DequantBlockFormat(t, data, i);
  }
}

void StoreFromDouble(void* data, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(data)[i] = (float)v; return;
    case DType::F16: static_cast<uint16_t*>(data)[i] = FloatToHalf((float)v); return;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = FloatToBF16((float)v); return;
    case DType::I32: static_cast<int32_t*>(data)[i] = (int32_t)v; return;
    case DType::I8: static_cast<int8_t*>(data)[i] = (int8_t)v; return;
    case DType::U8: static_cast<uint8_t*>(data)[i] = (uint8_t)v; return;
    case DType::Bool: static_cast<uint8_t*>(data)[i] = v != 0; return;
    default:
      throw Error(std::string("cannot store single elements into quantized type ") +
                  std::string(DTypeName(t)));
  }
}

}  // namespace prism
