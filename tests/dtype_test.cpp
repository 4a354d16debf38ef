// Tests of dtype conversions and GGUF block quantization round trips.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/dtype.h"
#include "ir/error.h"
#include "ir/host_tensor.h"
#include "ir/quant_formats.h"
#include "test_util.h"

namespace prism {

TEST(DType, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf / nan
    float f = HalfToFloat((uint16_t)h);
    EXPECT_EQ(FloatToHalf(f), (uint16_t)h) << h;
  }
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f / 3)), 0.333251953125f);
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
}

TEST(DType, BF16RoundsToNearestEven) {
  EXPECT_EQ(BF16ToFloat(FloatToBF16(1.0f)), 1.0f);
  EXPECT_EQ(BF16ToFloat(FloatToBF16(1.00390625f)), 1.0f);  // exactly halfway, rounds to even
  EXPECT_EQ(BF16ToFloat(FloatToBF16(1.01171875f)), 1.015625f);
}

TEST(DType, QuantizedBlocksRoundTripWithinHalfAStep) {
  auto x = testing::RandomFloats(4 * kQuantBlock, 7, -3, 3);
  std::vector<BlockQ8_0> q8(4);
  std::vector<BlockQ4_0> q4(4);
  QuantizeQ8_0(x.data(), q8.data(), (int64_t)x.size());
  QuantizeQ4_0(x.data(), q4.data(), (int64_t)x.size());
  for (int b = 0; b < 4; ++b) {
    float d8 = HalfToFloat(q8[b].d), d4 = std::fabs(HalfToFloat(q4[b].d));
    for (int j = 0; j < kQuantBlock; ++j) {
      int64_t i = b * kQuantBlock + j;
      EXPECT_NEAR(DequantQ8_0(q8.data(), i), x[i], d8 * 0.5 + 1e-3);
      EXPECT_NEAR(DequantQ4_0(q4.data(), i), x[i], d4 + 2e-3);  // ggml clamps the side opposite max at 7|d|
    }
  }
  EXPECT_EQ(StorageBytes(DType::Q4_0, 64), 36);
  EXPECT_EQ(StorageBytes(DType::Q8_0, 32), 34);
}

// The integer view of every block format (bytes 0..255, per-16 scales and offsets) holds the same
// values as the reference dequantizer: scale * q - offset, exact in double, is the reference's f32
// value before its one rounding. Random blocks, never zeros.
TEST(DType, BlockFormatIntsEqualTheReferenceValues) {
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS, DType::Q4_1,
                  DType::Q5_0, DType::Q5_1, DType::IQ4_NL}) {
    const int elems = BlockFormatElems(t);
    HostTensor blocks = testing::RandomBlocks(t, {5 * elems}, 17);
    std::vector<uint8_t> q(elems);
    std::vector<float> scale(elems / 16), offset(elems / 16);
    int nonzero = 0;
    for (int b = 0; b < 5; ++b) {
      BlockFormatInts(t, static_cast<const uint8_t*>(blocks.data) + b * BlockFormatBytes(t), q.data(), scale.data(),
                      offset.data());
      for (int j = 0; j < elems; ++j) {
        const double exact = (double)scale[j / 16] * q[j] - (double)offset[j / 16];
        const float ref = DequantBlockFormat(t, blocks.data, (int64_t)b * elems + j);
        ASSERT_LE(std::fabs(exact - ref), std::fabs(ref) * 0x1p-24 + 1e-30)
            << DTypeName(t) << " block " << b << " value " << j << ": q " << (int)q[j];
        nonzero += ref != 0;
      }
    }
    EXPECT_GT(nonzero, elems) << DTypeName(t);
  }
  EXPECT_THROW(BlockFormatInts(DType::F32, nullptr, nullptr, nullptr, nullptr), Error);
}

// The vector kernels' unpacking of a Q4_K/Q5_K block's 12 scale bytes gives every sub-block's scale
// and min as the reference's per-sub-block ScaleMinK4 does, over random bytes (high bits set too).
TEST(DType, UnpackScalesK4MatchesScaleMinK4) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    uint8_t packed[12], out[16];
    for (uint8_t& b : packed) b = (uint8_t)rng();
    UnpackScalesK4(packed, out);
    for (int j = 0; j < 8; ++j) {
      int scale, min;
      ScaleMinK4(packed, j, &scale, &min);
      ASSERT_EQ(out[j], scale) << "trial " << trial << " sub-block " << j;
      ASSERT_EQ(out[8 + j], min) << "trial " << trial << " sub-block " << j;
    }
  }
}

TEST(DType, UnknownNameIsAClearError) {
  EXPECT_EQ(ParseDType("bf16"), DType::BF16);
  EXPECT_THROW(ParseDType("f64"), Error);
}

// A host tensor as floats: f32 copied as it lies, other storage converted.
TEST(DType, HostTensorsReadAsFloats) {
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    EXPECT_EQ(HostTensor::FromFloats({2, 3}, v, dt).ToFloats(), v) << DTypeName(dt);
}

}  // namespace prism
