// Template-tier CPU GEMM for many activation rows over quantized weights (Q8_0, Q4_0 and GGUF's block
// formats) with AVX512-VNNI: weights decoded once into panels of 8-bit values, one column per lane.
#include "backends/cpu/gemm_int8_panels.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics: false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/gemm_int8.h"
#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

#define PRISM_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

constexpr int64_t kPanelWidth = 32;          // weight rows (output columns) per panel: two vectors
constexpr int64_t kSteps = kQuantBlock / 4;  // 4-value steps per 32-value block

// Scales per 32-value block: Q2_K, Q3_K and Q6_K scale every 16 values, the others every 32.
int SubsOf(DType wt) { return wt == DType::Q2_K || wt == DType::Q3_K || wt == DType::Q6_K ? 2 : 1; }

// Formats whose values are below 16 keep them as nibbles in the panels: half the bytes to stream, which
// is what a product of a few rows waits for (the two nibbles of a byte are two columns 16 apart).
bool NibblesOf(DType wt) {
  return wt == DType::Q4_0 || wt == DType::Q4_1 || wt == DType::Q4_K || wt == DType::Q2_K ||
         wt == DType::Q3_K;
}

// Q4_0 and Q8_0 offset every value by a fixed count of its scale (8 and 128), Q6_K and Q3_K by 32 and 4,
// IQ4_NL and IQ4_XS (their table's values + 128) by 128, Q5_0 by 16: their panels keep the scales alone
// and the offsets come out of the integer sums. 0: scales and offsets are kept as f32.
int FixedOffsetOf(DType wt) {
  switch (wt) {
    case DType::Q4_0: return 8;
    case DType::Q8_0: return 128;
    case DType::Q6_K: return 32;
    case DType::Q3_K: return 4;
    case DType::IQ4_NL:
    case DType::IQ4_XS: return 128;
    case DType::Q5_0: return 16;
    default: return 0;
  }
}
// Whose scales are f16 as stored, one per 32 values (the others' are f32: IQ4_XS's are products).
bool HalfScalesOf(DType wt) { return wt == DType::Q4_0 || wt == DType::Q8_0; }

// A panel block (32 values of K x 32 columns): its values, then Subs x kPanelWidth f32 scales, then as many
// f32 offsets; column c's weight is scale * q - offset. The values are kSteps x kPanelWidth x 4 bytes
// (0..255), or for nibbles kSteps x 64 bytes: step s's low nibbles are columns 0-15, its high ones 16-31.
// With a fixed offset (= fixed x scale) no offsets follow; with half scales the kPanelWidth scales are f16.
constexpr int64_t ValueBytes(bool nib) { return kSteps * kPanelWidth * 4 / (nib ? 2 : 1); }
constexpr int64_t PanelBlockBytes(int subs, bool nib, int fixed, bool half) {
  return ValueBytes(nib) + (half ? kPanelWidth * 2 : (fixed != 0 ? 1 : 2) * subs * kPanelWidth * 4);
}

// Activation rows per register tile (6 x 2 accumulators and 12 integer sums).
constexpr int kRows = 6;

// A packed activation block of a row tile: kSteps x rows x 4 value bytes (int8), then the rows' f32
// scales d, then per half (subs of them) d x the sum of that half's values, which multiplies the
// weights' offsets; for a fixed offset instead the i32 -offset x the sum, where the integer sums start
// (the offset taken out exactly, before any rounding). Rows past the end are zero and contribute nothing.
// Rounded per Group blocks (8: per 256 values, as llama.cpp's Q8_K), each block repeats its group's d and
// the float sums are not multiplied by it: the tile applies d once per group.
constexpr int64_t TileBlockBytes(int subs) { return kSteps * kRows * 4 + kRows * 4 * (1 + subs); }

// Rows [i0, i0 + rows) of the activation (k values each, m rows in all) x blocks [b0, b0 + nb),
// quantized as every int8 form does (QuantizeActivationBlock), or per Group blocks, into tile layout.
template <int Subs, int Fixed, int Group>
void PackTile(const float* a, int64_t k, int64_t m, int64_t i0, int64_t b0, int64_t nb, uint8_t* out) {
  constexpr int MR = kRows;
  std::memset(out, 0, (size_t)(nb * TileBlockBytes(Subs)));
  for (int64_t i = 0; i < MR && i0 + i < m; ++i) {
    float d = 0, id = 0;  // a group's scale, found at its first block
    for (int64_t bi = 0; bi < nb; ++bi) {
      uint8_t* dst = out + bi * TileBlockBytes(Subs);
      alignas(64) int8_t q[kQuantBlock];
      int32_t sum[2];  // per half (two-scale formats) or sum[0] for the whole block
      const float* x = a + (i0 + i) * k + (b0 + bi) * kQuantBlock;
      if constexpr (Group == 1) {
        d = QuantizeActivationBlock(x, q, &sum[0]);
      } else {
        if (bi % Group == 0) d = ActivationScale(x, Group * kQuantBlock, &id);
        RoundActivationBlock(x, id, q, &sum[0]);
      }
      if (Subs == 2) {
        const int32_t whole = sum[0];
        sum[0] = 0;
        for (int64_t j = 0; j < kQuantBlock / 2; ++j) sum[0] += q[j];
        sum[1] = whole - sum[0];
      }
      for (int64_t s = 0; s < kSteps; ++s) std::memcpy(dst + (s * MR + i) * 4, q + 4 * s, 4);
      float* scales = reinterpret_cast<float*>(dst + kSteps * MR * 4);
      scales[i] = d;
      for (int h = 0; h < Subs; ++h)
        if constexpr (Fixed != 0)
          reinterpret_cast<int32_t*>(scales)[MR * (1 + h) + i] = -Fixed * sum[h];
        else
          scales[MR * (1 + h) + i] = (Group == 1 ? d : 1.0f) * (float)sum[h];
    }
  }
}

// The first Rows rows of one packed row tile (a tile's last rows, past m, are skipped rather than
// computed) x one panel slice of nb blocks, stored into y (rows ldy apart) when first, else added to it.
// Integer sums per half (a fixed offset taken out in them), then in f32: times scale x d per half, or
// with Group > 1 times the scale alone, and the group's sum times d into y. Block by block it
// prefetches lines part, part + parts, ... of the slice at `next` (when given) into L2: the panels are read
// once, in pieces a few pages long, and the hardware's prefetchers stop at each page.
template <int Subs, bool Nib, int Fixed, bool Half, int Group, int Rows>
PRISM_VNNI void PanelTile(const uint8_t* at, int64_t nb, const uint8_t* slice, float* y, int64_t ldy,
                          bool first, const uint8_t* next, int part, int parts) {
  constexpr int MR = kRows;
  constexpr int kHalfSteps = kSteps / Subs;
  static_assert(Group == 1 || !Half, "a group's formats have f32 scales");
  __m512 acc[Rows][2];  // with Group > 1 the group's sums, in units of d
#pragma GCC unroll 8
  for (int i = 0; i < Rows; ++i) {
    acc[i][0] = first || Group > 1 ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i * ldy);
    acc[i][1] = first || Group > 1 ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i * ldy + 16);
  }
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  constexpr int64_t kBlock = PanelBlockBytes(Subs, Nib, Fixed, Half);
  for (int64_t bi = 0; bi < nb; ++bi, at += TileBlockBytes(Subs), slice += kBlock) {
    const float* ws = reinterpret_cast<const float*>(slice + ValueBytes(Nib));  // scales, offsets
    if (next)
      for (int64_t line = part * 64; line < kBlock; line += 64 * parts)
        _mm_prefetch(reinterpret_cast<const char*>(next + bi * kBlock + line), _MM_HINT_T1);
    const float* as = reinterpret_cast<const float*>(at + kSteps * MR * 4);  // d, d x sums
    // Each half's integer sums are finished into acc before the next half starts, so one set of
    // them is live: 6 x 2 sums and 6 x 2 accumulators fit the 32 vector registers either way.
#pragma GCC unroll 2
    for (int h = 0; h < Subs; ++h) {
      __m512i p[Rows][2];
#pragma GCC unroll 8
      for (int i = 0; i < Rows; ++i)  // a fixed offset: the sums start at -offset x sum(a)
        p[i][0] = p[i][1] = Fixed != 0
                                ? _mm512_set1_epi32(reinterpret_cast<const int32_t*>(as)[MR * (1 + h) + i])
                                : _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int s = h * kHalfSteps; s < (h + 1) * kHalfSteps; ++s) {
        __m512i w0, w1;
        if constexpr (Nib) {
          const __m512i v = _mm512_load_si512(slice + s * 64);
          w0 = _mm512_and_si512(v, low4);
          w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        } else {
          w0 = _mm512_load_si512(slice + s * 128);
          w1 = _mm512_load_si512(slice + s * 128 + 64);
        }
        const int32_t* four = reinterpret_cast<const int32_t*>(at) + s * MR;
#pragma GCC unroll 8
        for (int i = 0; i < Rows; ++i) {
          const __m512i av = _mm512_set1_epi32(four[i]);
          p[i][0] = _mm512_dpbusd_epi32(p[i][0], w0, av);
          p[i][1] = _mm512_dpbusd_epi32(p[i][1], w1, av);
        }
      }
      // In f32: y += (q . a) * scale * d (the sums hold a fixed offset's share), or minus offset * d *
      // sum(a).
      __m512 s0, s1, o0 = _mm512_setzero_ps(), o1 = _mm512_setzero_ps();
      if constexpr (Half) {
        const __m256i* half = reinterpret_cast<const __m256i*>(slice + ValueBytes(Nib));
        s0 = _mm512_cvtph_ps(_mm256_load_si256(half));
        s1 = _mm512_cvtph_ps(_mm256_load_si256(half + 1));
      } else {
        s0 = _mm512_load_ps(ws + h * kPanelWidth), s1 = _mm512_load_ps(ws + h * kPanelWidth + 16);
      }
      if constexpr (Fixed == 0) {
        const float* off = ws + (Subs + h) * kPanelWidth;
        o0 = _mm512_load_ps(off), o1 = _mm512_load_ps(off + 16);
      }
#pragma GCC unroll 8
      for (int i = 0; i < Rows; ++i) {
        const __m512 d = _mm512_set1_ps(as[i]);
        acc[i][0] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[i][0]), Group > 1 ? s0 : _mm512_mul_ps(s0, d), acc[i][0]);
        acc[i][1] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[i][1]), Group > 1 ? s1 : _mm512_mul_ps(s1, d), acc[i][1]);
        if constexpr (Fixed == 0) {
          const __m512 ds = _mm512_set1_ps(as[MR * (1 + h) + i]);
          acc[i][0] = _mm512_fnmadd_ps(o0, ds, acc[i][0]);
          acc[i][1] = _mm512_fnmadd_ps(o1, ds, acc[i][1]);
        }
      }
    }
    if constexpr (Group > 1) {
      if (bi % Group != Group - 1) continue;
      // The group's last block: its sums times d into y (stored over it at the slice's first group).
      const bool store = first && bi < Group;
#pragma GCC unroll 8
      for (int i = 0; i < Rows; ++i) {
        const __m512 d = _mm512_set1_ps(as[i]);
        for (int v = 0; v < 2; ++v) {
          float* out = y + i * ldy + 16 * v;
          _mm512_storeu_ps(
              out, store ? _mm512_mul_ps(acc[i][v], d) : _mm512_fmadd_ps(acc[i][v], d, _mm512_loadu_ps(out)));
          acc[i][v] = _mm512_setzero_ps();
        }
      }
    }
  }
  if constexpr (Group > 1) return;
#pragma GCC unroll 8
  for (int i = 0; i < Rows; ++i) {
    _mm512_storeu_ps(y + i * ldy, acc[i][0]);
    _mm512_storeu_ps(y + i * ldy + 16, acc[i][1]);
  }
}

// PanelTile for the rows a tile holds (the last tile of m rows may hold fewer than kRows).
template <int Subs, bool Nib, int Fixed, bool Half, int Group>
void Tile(int64_t rows, const uint8_t* at, int64_t nb, const uint8_t* slice, float* y, int64_t ldy,
          bool first, const uint8_t* next, int part, int parts) {
  static_assert(kRows == 6, "one case per row count");
  switch (rows) {
    case 6:
      return PanelTile<Subs, Nib, Fixed, Half, Group, 6>(at, nb, slice, y, ldy, first, next, part, parts);
    case 5:
      return PanelTile<Subs, Nib, Fixed, Half, Group, 5>(at, nb, slice, y, ldy, first, next, part, parts);
    case 4:
      return PanelTile<Subs, Nib, Fixed, Half, Group, 4>(at, nb, slice, y, ldy, first, next, part, parts);
    case 3:
      return PanelTile<Subs, Nib, Fixed, Half, Group, 3>(at, nb, slice, y, ldy, first, next, part, parts);
    case 2:
      return PanelTile<Subs, Nib, Fixed, Half, Group, 2>(at, nb, slice, y, ldy, first, next, part, parts);
    default:
      return PanelTile<Subs, Nib, Fixed, Half, Group, 1>(at, nb, slice, y, ldy, first, next, part, parts);
  }
}

// For each slice of K (outermost: its packed activation tiles stay in L2), every row tile passes
// over each of our panels' slice, which stays in L1 or L2 meanwhile.
template <int Subs, bool Nib, int Fixed, bool Half, int Group>
void GemmSlices(const float* a, int64_t m, const uint8_t* panels, int64_t k, float* y, int64_t n_total,
                int64_t n_begin, int64_t n_end, int64_t slice_blocks) {
  constexpr int MR = kRows;
  const int64_t blocks = k / kQuantBlock, tiles = (m + MR - 1) / MR;
  thread_local std::vector<uint8_t> packed;
  packed.resize((size_t)(tiles * std::min(slice_blocks, blocks) * TileBlockBytes(Subs)));
  alignas(64) float edge[MR * kPanelWidth];
  for (int64_t b0 = 0; b0 < blocks; b0 += slice_blocks) {
    const int64_t nb = std::min(slice_blocks, blocks - b0);
    const bool first = b0 == 0;
    for (int64_t t = 0; t < tiles; ++t)
      PackTile<Subs, Fixed, Group>(a, k, m, t * MR, b0, nb, packed.data() + t * nb * TileBlockBytes(Subs));
    auto slice_at = [&](int64_t n0, int64_t b) {
      return panels + (n0 / kPanelWidth * blocks + b) * PanelBlockBytes(Subs, Nib, Fixed, Half);
    };
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kPanelWidth) {
      const int64_t cols = std::min(kPanelWidth, n_end - n0);
      const uint8_t* slice = slice_at(n0, b0);
      const uint8_t* next = n0 + kPanelWidth < n_end     ? slice_at(n0 + kPanelWidth, b0)
                            : b0 + slice_blocks < blocks ? slice_at(n_begin, b0 + slice_blocks)
                                                         : nullptr;
      for (int64_t t = 0; t < tiles; ++t) {
        const uint8_t* at = packed.data() + t * nb * TileBlockBytes(Subs);
        const int64_t rows = std::min<int64_t>(MR, m - t * MR);
        float* yt = y + t * MR * n_total + n0;
        // Each row tile prefetches its share of the next slice's lines, so the memory stays busy
        // while the slice is passed by every tile (Q6_K's products over 10-64 rows from memory took
        // 6-17% less time than with the first tile prefetching all of it).
        const int part = (int)t, parts = (int)tiles;
        if (cols == kPanelWidth) {
          Tile<Subs, Nib, Fixed, Half, Group>(rows, at, nb, slice, yt, n_total, first, next, part, parts);
          continue;
        }
        // A panel's last columns go through a full-width buffer; only its valid part touches y.
        for (int64_t r = 0; r < rows && !first; ++r)
          std::memcpy(edge + r * kPanelWidth, yt + r * n_total, (size_t)cols * sizeof(float));
        Tile<Subs, Nib, Fixed, Half, Group>(rows, at, nb, slice, edge, kPanelWidth, first, next, part, parts);
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(yt + r * n_total, edge + r * kPanelWidth, (size_t)cols * sizeof(float));
      }
    }
  }
}

// One storage block of the weights as integers, with scales and offsets per 16 values.
void DecodeBlock(const uint8_t* block, DType wt, uint8_t* q, float* scale, float* offset) {
  if (wt == DType::Q8_0 || wt == DType::Q4_0) {
    const float d = HalfToFloat(wt == DType::Q8_0 ? reinterpret_cast<const BlockQ8_0*>(block)->d
                                                  : reinterpret_cast<const BlockQ4_0*>(block)->d);
    for (int j = 0; j < kQuantBlock; ++j)
      if (wt == DType::Q8_0) {
        q[j] = (uint8_t)(reinterpret_cast<const BlockQ8_0*>(block)->qs[j] + 128);
      } else {  // the GGUF byte j holds values j (low nibble) and j + 16 (high nibble)
        const uint8_t b = reinterpret_cast<const BlockQ4_0*>(block)->qs[j % 16];
        q[j] = j < 16 ? b & 0x0f : b >> 4;
      }
    scale[0] = scale[1] = d;
    offset[0] = offset[1] = d * (wt == DType::Q8_0 ? 128 : 8);
    return;
  }
  BlockFormatInts(wt, block, q, scale, offset);
}

int64_t StorageElems(DType wt) { return IsBlockFormat(wt) ? BlockFormatElems(wt) : kQuantBlock; }

}  // namespace

bool Int8PanelsSupported(DType wt, int64_t k) {
  const bool type_ok = wt == DType::Q8_0 || wt == DType::Q4_0 || IsBlockFormat(wt);
  return HasAvx512Vnni() && type_ok && k > 0 && k % StorageElems(wt) == 0;
}

int64_t Int8PanelsMinRows(DType wt) { return NibblesOf(wt) ? 2 : 6; }

std::vector<int64_t> Int8PanelSliceChoices(int64_t k) {
  std::vector<int64_t> v = {16, 32};
  if (k / kQuantBlock > kInt8PanelSlice) v.push_back(k / kQuantBlock);  // all of K in one slice
  return v;
}

size_t Int8PanelBytes(DType wt, int64_t n, int64_t k) {
  return (size_t)((n + kPanelWidth - 1) / kPanelWidth * (k / kQuantBlock) *
                  PanelBlockBytes(SubsOf(wt), NibblesOf(wt), FixedOffsetOf(wt), HalfScalesOf(wt)));
}

void PackPanelsInt8(const void* w, DType wt, int64_t n, int64_t k, uint8_t* out) {
  if (!Int8PanelsSupported(wt, k))
    throw Error("int8 panels: weights of type " + std::string(DTypeName(wt)) +
                " with K=" + std::to_string(k) + " cannot be packed on this CPU");
  const int subs = SubsOf(wt);
  const bool nib = NibblesOf(wt);
  const int fixed = FixedOffsetOf(wt);
  const bool half = HalfScalesOf(wt);
  std::memset(out, 0, Int8PanelBytes(wt, n, k));  // nibbles are or-ed in
  const int64_t blocks = k / kQuantBlock, elems = StorageElems(wt);
  const int64_t row_bytes = StorageBytes(wt, k), block_bytes = StorageBytes(wt, elems);
  std::vector<uint8_t> q((size_t)elems);
  std::vector<float> scale((size_t)elems / 16), offset((size_t)elems / 16);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t sb = 0; sb < k / elems; ++sb) {
      DecodeBlock(static_cast<const uint8_t*>(w) + r * row_bytes + sb * block_bytes, wt, q.data(),
                  scale.data(), offset.data());
      for (int64_t j0 = 0; j0 < elems; j0 += kQuantBlock) {
        const int64_t b = (sb * elems + j0) / kQuantBlock, c = r % kPanelWidth;
        uint8_t* dst = out + (r / kPanelWidth * blocks + b) * PanelBlockBytes(subs, nib, fixed, half);
        for (int64_t kk = 0; kk < kQuantBlock; ++kk) {
          const int64_t at = (kk / 4 * kPanelWidth + c) * 4 + kk % 4;  // in the byte layout
          if (!nib) {
            dst[at] = q[j0 + kk];
          } else {
            if (q[j0 + kk] > 15)
              throw Error("int8 panels: a " + std::string(DTypeName(wt)) + " value above 15");
            const int64_t step = at / 128, in = at % 128;
            dst[step * 64 + in % 64] |= (uint8_t)(q[j0 + kk] << (in < 64 ? 0 : 4));
          }
        }
        if (half) {
          reinterpret_cast<uint16_t*>(dst + ValueBytes(nib))[c] = FloatToHalf(scale[j0 / 16]);
          continue;
        }
        float* fs = reinterpret_cast<float*>(dst + ValueBytes(nib));
        for (int h = 0; h < subs; ++h) {
          // With one scale per 32 values, both 16-value halves carry the same one: take the first.
          fs[h * kPanelWidth + c] = scale[j0 / 16 + h];
          if (!fixed)
            fs[(subs + h) * kPanelWidth + c] = offset[j0 / 16 + h];
          else if (const float o = offset[j0 / 16 + h], want = (float)fixed * scale[j0 / 16 + h];
                   std::isnan(want) ? !std::isnan(o) : o != want)
            throw Error("int8 panels: a " + std::string(DTypeName(wt)) + " offset not " +
                        std::to_string(fixed) + " x its scale");
        }
      }
    }
}

bool Int8PanelsGroupSupported(DType wt, int64_t k) {
  return Int8PanelsSupported(wt, k) && IsBlockFormat(wt) && BlockFormatElems(wt) == kSuperBlock;
}

void GemmPanelsInt8(const float* a, int64_t m, const uint8_t* panels, DType wt, int64_t k, float* y,
                    int64_t n_total, int64_t n_begin, int64_t n_end, int64_t slice_blocks,
                    int64_t act_block) {
  if (n_begin >= n_end || m <= 0) return;
  if (slice_blocks < 0) throw Error("int8 panels: a slice of " + std::to_string(slice_blocks) + " blocks");
  const int64_t sb = slice_blocks > 0 ? slice_blocks : kInt8PanelSlice;
  if (n_begin % kPanelWidth != 0)
    throw Error("int8 panels: a thread's columns must start at a panel, not at " + std::to_string(n_begin));
  const bool nib = NibblesOf(wt);
  const int subs = SubsOf(wt), fixed = FixedOffsetOf(wt);
  const bool half = HalfScalesOf(wt);
  auto run = [&](auto slices) { slices(a, m, panels, k, y, n_total, n_begin, n_end, sb); };
  if (act_block == kSuperBlock) {
    constexpr int kGroup = kSuperBlock / kQuantBlock;
    if (!Int8PanelsGroupSupported(wt, k) || sb % kGroup != 0)
      throw Error("int8 panels: activations rounded per 256 values over " + std::string(DTypeName(wt)) +
                  " weights, K=" + std::to_string(k) + ", in slices of " + std::to_string(sb) + " blocks");
    if (fixed == 128)
      run(GemmSlices<1, false, 128, false, kGroup>);
    else if (fixed == 32)
      run(GemmSlices<2, false, 32, false, kGroup>);
    else if (fixed == 4)
      run(GemmSlices<2, true, 4, false, kGroup>);
    else if (subs == 1 && nib)
      run(GemmSlices<1, true, 0, false, kGroup>);
    else if (subs == 1)
      run(GemmSlices<1, false, 0, false, kGroup>);
    else
      run(GemmSlices<2, true, 0, false, kGroup>);
    return;
  }
  if (act_block != kQuantBlock)
    throw Error("int8 panels: activations rounded per " + std::to_string(act_block) + " values");
  if (fixed == 8)
    run(GemmSlices<1, true, 8, true, 1>);
  else if (fixed == 128 && half)
    run(GemmSlices<1, false, 128, true, 1>);
  else if (fixed == 128)
    run(GemmSlices<1, false, 128, false, 1>);
  else if (fixed == 16)
    run(GemmSlices<1, false, 16, false, 1>);
  else if (fixed == 32)
    run(GemmSlices<2, false, 32, false, 1>);
  else if (fixed == 4)
    run(GemmSlices<2, true, 4, false, 1>);
  else if (subs == 1 && nib)
    run(GemmSlices<1, true, 0, false, 1>);
  else if (subs == 1)
    run(GemmSlices<1, false, 0, false, 1>);
  else if (nib)
    run(GemmSlices<2, true, 0, false, 1>);
  else
    run(GemmSlices<2, false, 0, false, 1>);
}

}  // namespace prism
