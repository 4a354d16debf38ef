// Element types of Prism tensors, including GGUF block-quantized storage types.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace prism {

enum class DType : uint8_t {
  F32, F16, BF16, I32, I8, U8, Bool, Q8_0, Q4_0,
  // GGUF's other block formats (ir/quant_formats.h): read from files, never produced by Prism.
  Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS
};

// Block-quantized formats store BlockElems() values in BlockBytes() bytes (GGUF layout); the two
// Prism also quantizes to:
//   Q8_0: f16 scale d, then 32 x int8 q; value = d * q.
//   Q4_0: f16 scale d, then 16 bytes; element j < 16 is the low nibble of byte j,
//         element j >= 16 the high nibble of byte j-16; value = d * (nibble - 8).
constexpr int kQuantBlock = 32;
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQuantBlock];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "GGUF block layouts");

bool IsQuantized(DType t);
bool IsFloat(DType t);    // f32, f16, bf16 and the quantized types (they dequantize to float)
bool IsInteger(DType t);  // i32, i8, u8, bool
int BlockElems(DType t);  // 1 for plain types
int BlockBytes(DType t);  // element size for plain types
// Bytes needed for n elements (n must be a multiple of BlockElems for quantized types).
int64_t StorageBytes(DType t, int64_t n);
std::string_view DTypeName(DType t);
DType ParseDType(std::string_view name);  // throws prism::Error on unknown names

// Scalar conversions (round-to-nearest-even), used by the interpreter, loaders and tests.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BF16ToFloat(uint16_t b);
uint16_t FloatToBF16(float f);
// Rounds a value to what a tensor of type t can hold (used to mimic storage in the interpreter).
double RoundToDType(double v, DType t);

// Reference (de)quantization of whole rows; n must be a multiple of kQuantBlock.
void QuantizeQ8_0(const float* src, BlockQ8_0* dst, int64_t n);
void QuantizeQ4_0(const float* src, BlockQ4_0* dst, int64_t n);
float DequantQ8_0(const void* blocks, int64_t i);  // element i of a Q8_0 array
float DequantQ4_0(const void* blocks, int64_t i);  // element i of a Q4_0 array
// Reads element i of a buffer of any dtype as double.
double LoadAsDouble(const void* data, DType t, int64_t i);
// Writes element i of a plain-typed buffer (not quantized).
void StoreFromDouble(void* data, DType t, int64_t i, double v);

}  // namespace prism
