// Packs Q8_0, Q4_0, Q4_K and Q6_K weights into the int8-avx2 GEMM's tiles of 8 rows (gemm_int8_avx2.h).
#include <cstring>
#include <string>
#include <string_view>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_avx2.h"
#include "backends/cpu/gemm_int8_avx2.h"
#include "backends/cpu/gemm_int8_avx2_layout.h"
#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

using namespace int8_avx2;

template <DType T, class Block>
void Pack(const Block* src, int64_t n, int64_t blocks, uint8_t* dst) {
  for (int64_t t = 0; t * kInt8Avx2TileRows < n; ++t)
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* out = dst + (t * blocks + b) * TileBlockBytes(T);
      for (int r = 0; r < kInt8Avx2TileRows && t * kInt8Avx2TileRows + r < n; ++r) {  // padding rows stay 0
        const Block& x = src[(t * kInt8Avx2TileRows + r) * blocks + b];
        std::memcpy(out + 2 * r, &x.d, 2);
        // Group h: each row's bytes 4h to 4h + 3 (Q4_0's: its values 4h to 4h + 3 and 4h + 16 to 4h + 19).
        for (int h = 0; h < RowBytes(T) / 4; ++h)
          std::memcpy(out + 2 * kInt8Avx2TileRows + 32 * h + 4 * r, x.qs + 4 * h, 4);
      }
    }
}

// Q4_K and Q6_K: per super-block the rows' header (Q4_K: d, dmin, then the 6-bit scales and mins as bytes,
// sub-block by sub-block; Q6_K: d and the 16 signed scales), then per 32-value block the rows' low nibbles as
// Q4_0's and, for Q6_K, their high 2 bits in two groups of 32 bytes: in the first, row r's byte 4r + i holds
// bits 4-5 of its values i, 4 + i, 8 + i, 12 + i in bits 0-1, 2-3, 4-5, 6-7; the second, values 16 on.
template <DType T, class Block>
void PackKQuant(const Block* src, int64_t n, int64_t super_blocks, uint8_t* dst) {
  constexpr bool k4 = T == DType::Q4_K;
  constexpr int64_t tile_bytes = k4 ? kK4TileBytes : kK6TileBytes, values = k4 ? kK4Values : kK6Values,
                    block_bytes = k4 ? kInt8Avx2TileRows * RowBytes(T) : kK6BlockBytes;
  for (int64_t t = 0; t * kInt8Avx2TileRows < n; ++t)
    for (int64_t b = 0; b < super_blocks; ++b) {
      uint8_t* out = dst + (t * super_blocks + b) * tile_bytes;
      for (int l = 0; l < kInt8Avx2TileRows && t * kInt8Avx2TileRows + l < n; ++l) {  // padding rows stay 0
        const Block& x = src[(t * kInt8Avx2TileRows + l) * super_blocks + b];
        std::memcpy(out + 2 * l, &x.d, 2);
        if constexpr (k4) {
          std::memcpy(out + 2 * kInt8Avx2TileRows + 2 * l, &x.dmin, 2);
          for (int j = 0; j < 8; ++j) {
            int scale, min;
            ScaleMinK4(x.scales, j, &scale, &min);
            out[kK4Scales + 8 * j + l] = (uint8_t)scale;
            out[kK4Mins + 8 * j + l] = (uint8_t)min;
          }
        } else {
          for (int j = 0; j < 16; ++j) out[kK6Scales + 8 * j + l] = (uint8_t)x.scales[j];
        }
      }
      for (int64_t r = 0; r < kInt8Avx2TileRows && t * kInt8Avx2TileRows + r < n; ++r) {
        uint8_t q[kSuperBlock];  // Q4_K 0-15, Q6_K 0-63, in value order
        float scale[kSuperBlock / 16], offset[kSuperBlock / 16];
        BlockFormatInts(T, &src[(t * kInt8Avx2TileRows + r) * super_blocks + b], q, scale, offset);
        for (int j = 0; j < 8; ++j) {
          uint8_t* v = out + values + j * block_bytes;
          const uint8_t* x = q + 32 * j;
          for (int h = 0; h < 4; ++h)
            for (int i = 0; i < 4; ++i) {
              v[32 * h + 4 * r + i] = (uint8_t)((x[4 * h + i] & 15) | (x[16 + 4 * h + i] & 15) << 4);
              if constexpr (!k4) {
                v[128 + 4 * r + i] |= (uint8_t)((x[4 * h + i] >> 4) << (2 * h));
                v[160 + 4 * r + i] |= (uint8_t)((x[16 + 4 * h + i] >> 4) << (2 * h));
              }
            }
        }
      }
    }
}

}  // namespace

bool Int8Avx2Supported(DType wt, int64_t k) {
  const bool blocks = wt == DType::Q4_K || wt == DType::Q6_K   ? k % kSuperBlock == 0
                      : wt == DType::Q8_0 || wt == DType::Q4_0 ? k % kQuantBlock == 0
                                                               : false;
  return blocks && k > 0 && GemmAvx2Supported() && std::string_view(GemmIsa()) == "avx2";
}

Int8Avx2PackedWeight PackForInt8Avx2(const void* w, DType wt, int64_t n, int64_t k) {
  if ((wt != DType::Q8_0 && wt != DType::Q4_0 && wt != DType::Q4_K && wt != DType::Q6_K) ||
      k % BlockElems(wt))
    throw Error("int8-avx2: packs Q8_0, Q4_0, Q4_K or Q6_K over whole blocks, not " +
                std::string(DTypeName(wt)) + " with K = " + std::to_string(k));
  const int64_t blocks = k / kQuantBlock, tiles = (n + kInt8Avx2TileRows - 1) / kInt8Avx2TileRows;
  Int8Avx2PackedWeight p;
  p.type = wt;
  p.n = n;
  p.k = k;
  p.bytes = (size_t)(tiles * TileBytes(wt, k));
  p.data = AllocateWeightMemory(p.bytes, "int8-avx2: packed weights");  // zeroed
  if (wt == DType::Q8_0)
    Pack<DType::Q8_0>(static_cast<const BlockQ8_0*>(w), n, blocks, p.data.get());
  else if (wt == DType::Q4_0)
    Pack<DType::Q4_0>(static_cast<const BlockQ4_0*>(w), n, blocks, p.data.get());
  else if (wt == DType::Q4_K)
    PackKQuant<DType::Q4_K>(static_cast<const BlockQ4_K*>(w), n, k / kSuperBlock, p.data.get());
  else
    PackKQuant<DType::Q6_K>(static_cast<const BlockQ6_K*>(w), n, k / kSuperBlock, p.data.get());
  return p;
}

}  // namespace prism
