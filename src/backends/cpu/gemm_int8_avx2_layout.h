// The int8-avx2 GEMM's packed tile layout, shared by its packing (gemm_int8_avx2_pack.cpp) and its kernels
// (gemm_int8_avx2.cpp): bytes per block and super-block, and where each part of a tile lies.
#pragma once

#include <cstdint>

#include "backends/cpu/gemm_int8_avx2.h"
#include "ir/dtype.h"
#include "ir/quant_formats.h"

namespace prism::int8_avx2 {

// One row's values of one 32-value block, and a packed tile's bytes per block: the 8 rows' f16 scales, then
// their values in groups of 32 bytes, group h holding each row's bytes 4h to 4h + 3 (Q8_0: 8 groups, its
// values 4h to 4h + 3; Q4_0: 4 groups, its values 4h to 4h + 3 and 4h + 16 to 4h + 19 as nibbles). Q4_K's
// tile per 256-value super-block: the 8 rows' d and dmin (f16), their 6-bit scales and mins as bytes
// (sub-block by sub-block), then 8 sub-blocks of values laid out as Q4_0's. Rows in order throughout.
constexpr int64_t RowBytes(DType t) { return t == DType::Q8_0 ? 32 : 16; }
constexpr int64_t TileBlockBytes(DType t) { return kInt8Avx2TileRows * (2 + RowBytes(t)); }
constexpr int64_t kK4Scales = 4 * kInt8Avx2TileRows, kK4Mins = kK4Scales + 8 * kInt8Avx2TileRows,
                  kK4Values = kK4Mins + 8 * kInt8Avx2TileRows,
                  kK4TileBytes = kK4Values + 8 * kInt8Avx2TileRows * RowBytes(DType::Q4_K);
// Q6_K's tile per super-block: the 8 rows' d (f16) and signed scales (sub-block by sub-block), then per
// 32-value block the 8 rows' low nibbles as Q4_0's and their high 2 bits in two groups of 32 bytes (see
// PackKQuant in gemm_int8_avx2_pack.cpp): as many bytes as GGUF's.
constexpr int64_t kK6Scales = 2 * kInt8Avx2TileRows, kK6Values = kK6Scales + 16 * kInt8Avx2TileRows,
                  kK6BlockBytes = kInt8Avx2TileRows * 24, kK6TileBytes = kK6Values + 8 * kK6BlockBytes;
// A tile's bytes over K values.
constexpr int64_t TileBytes(DType t, int64_t k) {
  return t == DType::Q4_K   ? k / kSuperBlock * kK4TileBytes
         : t == DType::Q6_K ? k / kSuperBlock * kK6TileBytes
                            : k / kQuantBlock * TileBlockBytes(t);
}

}  // namespace prism::int8_avx2
