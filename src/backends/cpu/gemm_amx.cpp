// Template-tier CPU GEMM on AMX tiles: 32 x 32 output blocks as four 16 x 16 f32 tiles, activations
// as A tiles read in place from a rounded copy, weights as B tiles repacked once at load.
#include "backends/cpu/gemm_amx.h"

// GCC 12 warns inside its own AVX-512 conversion intrinsics (_mm512_cvtepi32_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/gemm_int8.h"
#include "ir/error.h"

namespace prism {
namespace {

#define PRISM_AMX        \
  __attribute__((target( \
      "amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,f16c,fma")))

constexpr int64_t kTileRows = 16;                    // rows of every tile; columns of a C tile
constexpr int64_t kChunk = 32;                       // K values a tile step covers (one Q8_0 block)
constexpr int64_t kBf16TileBytes = kTileRows * 64;   // 16 pairs of K x 16 columns x 2 bytes
constexpr int64_t kInt8TileBytes = kChunk / 4 * 64;  // 8 quads of K x 16 columns x 4 bytes
constexpr int64_t kInt8BlockBytes = kInt8TileBytes + kTileRows * 4;  // then 16 f32 scales
constexpr int64_t kBlockRows = 32;  // activation rows per register block (two A tiles)

// Cache blocks: a thread takes kNBlock output columns at a time; their weights for kKChunks chunks of
// K (1 MiB of bf16) stay in L2 while every 32-row slice of the activation passes over them, each
// 32 x 32 block of the output accumulating in tiles over the whole slice of K. (Smaller slices of K,
// with the output block reloaded between them, measured slower: 850-940 against 1000-1080 GFLOP/s
// on one core at M=512, N=K=2048.)
constexpr int64_t kNBlock = 256, kKChunks = 64;

}  // namespace

bool AmxUsable() {
  static const bool ok = [] {
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16") ||
        !__builtin_cpu_supports("amx-int8") || !__builtin_cpu_supports("avx512bf16") ||
        !__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq"))
      return false;
    // Linux hands out the 8 KiB tile state only to processes that ask (arch_prctl ARCH_REQ_XCOMP_PERM
    // for XFEATURE_XTILEDATA); without it the first tile instruction raises SIGILL.
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

namespace {

// The tile configuration (palette 1): C tiles 0-3 (16 x 16 f32 or i32), A tiles 4-5 (16 activation
// rows x a_bytes), B tiles 6-7 (b_rows x 64 bytes).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

PRISM_AMX void ConfigureTiles(int a_bytes, int b_rows) {
  TileConfig cfg;
  for (int t = 0; t < 4; ++t) cfg.rows[t] = kTileRows, cfg.colsb[t] = 64;
  for (int t = 4; t < 6; ++t) cfg.rows[t] = kTileRows, cfg.colsb[t] = (uint16_t)a_bytes;
  for (int t = 6; t < 8; ++t) cfg.rows[t] = (uint8_t)b_rows, cfg.colsb[t] = 64;
  // GCC 12 treats ldtilecfg as reading only the first bytes of its operand and drops the stores to
  // the rest: make them visible first.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// Activations are laid out as the A tiles they feed: tile t (rows 16t .. 16t + 15), chunk c is 16
// rows of one chunk's bytes (64 for bf16, 32 for int8), tiles after one another along K, so that
// every tile stream (activations and weights alike) is sequential and a tile load needs no stride.

PRISM_AMX inline __m512 Widen(__m256i bf16) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16));
}

// Rows [r0, r1) of A rounded to bf16 (nearest even, as GemmRowsBf16Dot rounds) into A tiles, rows from
// m on zero. Split (parts = 2): each chunk's hi tile is followed by a lo tile of what rounding left
// out, itself rounded. A value that is not finite goes into lo whole, with hi 0: lo multiplies only the
// weights' hi parts, so inf x w stays inf where hi x w_lo would make inf x 0 = NaN.
PRISM_AMX void RoundActivation(const float* a, int64_t m, int64_t k, int64_t r0, int64_t r1, int64_t chunks,
                               int parts, uint16_t* out) {
  constexpr int64_t kTileValues = kBf16TileBytes / 2;
  constexpr int kNotFinite = 0x01 | 0x08 | 0x10 | 0x80;  // fpclass: quiet NaN, +inf, -inf, signalling NaN
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t c = 0; c < chunks; ++c) {
      uint16_t* dst = out + (((i / kTileRows * chunks + c) * parts) * kTileRows + i % kTileRows) * kChunk;
      if (i >= m) {
        for (int p = 0; p < parts; ++p) _mm512_storeu_si512(dst + p * kTileValues, _mm512_setzero_si512());
        continue;
      }
      const int64_t kk = c * kChunk, left = k - kk;
      __mmask16 m0 = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
      __mmask16 m1 = left >= 32 ? (__mmask16)0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
      __m512 x0 = _mm512_maskz_loadu_ps(m0, a + i * k + kk),
             x1 = _mm512_maskz_loadu_ps(m1, a + i * k + kk + 16);
      if (parts == 1) {
        _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        continue;
      }
      const __m512i hi = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
      const __m512 h0 = Widen(_mm512_castsi512_si256(hi)), h1 = Widen(_mm512_extracti64x4_epi64(hi, 1));
      const __mmask16 odd0 = _mm512_fpclass_ps_mask(h0, kNotFinite),
                      odd1 = _mm512_fpclass_ps_mask(h1, kNotFinite);
      const __m512 l0 = _mm512_mask_mov_ps(_mm512_sub_ps(x0, h0), odd0, x0);
      const __m512 l1 = _mm512_mask_mov_ps(_mm512_sub_ps(x1, h1), odd1, x1);
      _mm512_storeu_si512(
          dst, (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_mov_ps(~odd1, h1), _mm512_maskz_mov_ps(~odd0, h0)));
      _mm512_storeu_si512(dst + kTileValues, (__m512i)_mm512_cvtne2ps_pbh(l1, l0));
    }
}

// Rows [r0, r1) of A quantized block by block (QuantizeActivationBlock) into A tiles, with scales
// [row][block]; rows from m on zero.
PRISM_AMX void QuantizeActivation(const float* a, int64_t m, int64_t k, int64_t r0, int64_t r1, int8_t* q,
                                  float* d) {
  const int64_t blocks = k / kChunk;
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t b = 0; b < blocks; ++b) {
      int8_t* dst = q + ((i / kTileRows * blocks + b) * kTileRows + i % kTileRows) * kChunk;
      if (i < m) {
        d[i * blocks + b] = QuantizeActivationBlock(a + i * k + b * kChunk, dst);
      } else {
        d[i * blocks + b] = 0;
        std::memset(dst, 0, kChunk);
      }
    }
}

// C tiles 0-3, a 32 x 32 block of f32 (ldc floats apart): zeroed (first) or loaded, then stored.
PRISM_AMX inline void BeginBlock(const float* c, int64_t ldc, bool first) {
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    return;
  }
  _tile_loadd(0, c, ldc * 4);
  _tile_loadd(1, c + 16, ldc * 4);
  _tile_loadd(2, c + 16 * ldc, ldc * 4);
  _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
}

PRISM_AMX inline void EndBlock(float* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

// C += the A tiles 4-5 (rows) x the B tiles 6-7 (columns), as bf16 pairs.
PRISM_AMX inline void Bf16Products() {
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// A 32 x 32 block of C = (first) or += two A tile rows (a0, a1: their first chunk) x two weight panels
// (b0, b1), over `chunks` chunks of K. Split: activations and weights come as two bf16 parts each (hi
// tile, then lo tile, chunk by chunk), and C += a_lo w_hi + a_hi w_hi + a_hi w_lo; what is left out,
// a_lo w_lo and the rounding of the lo parts, is within 3 x 2^-16 of each product: near f32 accuracy
// at a third of the bf16 rate.
template <bool Split>
PRISM_AMX void BlockBf16(const uint8_t* a0, const uint8_t* a1, const uint8_t* b0, const uint8_t* b1,
                         int64_t chunks, float* c, int64_t ldc, bool first) {
  constexpr int64_t kStep = (Split ? 2 : 1) * kBf16TileBytes;
  BeginBlock(c, ldc, first);
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t at = i * kStep;
    // The next chunk's weight tiles into L1: a tile load that misses waits on all 16 of its lines, and
    // the tile unit does not run ahead of it.
    for (int64_t l = 0; l < kStep; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(b0 + at + kStep + l), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b1 + at + kStep + l), _MM_HINT_T0);
    }
    if constexpr (Split) {
      _tile_loadd(4, a0 + at + kBf16TileBytes, 64);  // a_lo x w_hi
      _tile_loadd(5, a1 + at + kBf16TileBytes, 64);
      _tile_loadd(6, b0 + at, 64);
      _tile_loadd(7, b1 + at, 64);
      Bf16Products();
      _tile_loadd(4, a0 + at, 64);  // a_hi x w_hi
      _tile_loadd(5, a1 + at, 64);
      Bf16Products();
      _tile_loadd(6, b0 + at + kBf16TileBytes, 64);  // a_hi x w_lo
      _tile_loadd(7, b1 + at + kBf16TileBytes, 64);
      Bf16Products();
    } else {
      _tile_loadd(4, a0 + at, 64);
      _tile_loadd(5, a1 + at, 64);
      _tile_loadd(6, b0 + at, 64);
      _tile_loadd(7, b1 + at, 64);
      Bf16Products();
    }
  }
  EndBlock(c, ldc);
}

using TileSums = int32_t[4][kTileRows * kTileRows];

// acc (32 x 32) += one block's integer sums s (C tiles 0-3) x (activation scale x weight scale): da
// holds the 32 rows' scales (ldd apart), dw0/dw1 the two panels' 16 column scales.
PRISM_AMX inline void ScaleBlock(const TileSums& s, const float* da, int64_t ldd, const uint8_t* dw0p,
                                 const uint8_t* dw1p, float (*acc)[kAmxCols]) {
  const __m512 dw0 = _mm512_loadu_ps(reinterpret_cast<const float*>(dw0p));
  const __m512 dw1 = _mm512_loadu_ps(reinterpret_cast<const float*>(dw1p));
#pragma GCC unroll 4
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < kTileRows; ++r) {
      const int64_t row = h * kTileRows + r;
      const __m512 dr = _mm512_set1_ps(da[row * ldd]);
      _mm512_store_ps(&acc[row][0], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[2 * h] + r * 16)),
                                                    _mm512_mul_ps(dw0, dr), _mm512_load_ps(&acc[row][0])));
      _mm512_store_ps(&acc[row][16],
                      _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[2 * h + 1] + r * 16)),
                                      _mm512_mul_ps(dw1, dr), _mm512_load_ps(&acc[row][16])));
    }
}

// The same for int8: per block, exact integer sums of 32 products in the tiles, then C += sum x
// (activation scale x weight scale) in f32, accumulated in a contiguous block that stays in L1 (rows of
// y are often a multiple of 4 KiB apart: all in one cache set). da: the 32 rows' scales from this
// block on (ldd apart).
PRISM_AMX void BlockInt8(const uint8_t* a0, const uint8_t* a1, const float* da, int64_t ldd,
                         const uint8_t* b0, const uint8_t* b1, int64_t blocks, float* c, int64_t ldc,
                         bool first) {
  alignas(64) TileSums s[2];
  alignas(64) float acc[kBlockRows][kAmxCols];
  for (int r = 0; r < kBlockRows; ++r)
    for (int j = 0; j < kAmxCols; j += 16)
      _mm512_store_ps(&acc[r][j], first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + j));
  constexpr int64_t kATileBytes = kTileRows * kChunk;
  for (int64_t i = 0; i < blocks; ++i) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a0 + i * kATileBytes, kChunk);
    _tile_loadd(5, a1 + i * kATileBytes, kChunk);
    _tile_loadd(6, b0 + i * kInt8BlockBytes, 64);
    _tile_loadd(7, b1 + i * kInt8BlockBytes, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
    _tile_stored(0, s[i & 1][0], 64);
    _tile_stored(1, s[i & 1][1], 64);
    _tile_stored(2, s[i & 1][2], 64);
    _tile_stored(3, s[i & 1][3], 64);
    // The previous block's scaling: its sums were stored an iteration ago, so the vector units work on
    // them while the tile unit multiplies this block.
    if (i > 0)
      ScaleBlock(s[(i - 1) & 1], da + i - 1, ldd, b0 + (i - 1) * kInt8BlockBytes + kInt8TileBytes,
                 b1 + (i - 1) * kInt8BlockBytes + kInt8TileBytes, acc);
  }
  if (blocks > 0)
    ScaleBlock(s[(blocks - 1) & 1], da + blocks - 1, ldd,
               b0 + (blocks - 1) * kInt8BlockBytes + kInt8TileBytes,
               b1 + (blocks - 1) * kInt8BlockBytes + kInt8TileBytes, acc);
  for (int r = 0; r < kBlockRows; ++r)
    for (int j = 0; j < kAmxCols; j += 16) _mm512_storeu_ps(c + r * ldc + j, _mm512_load_ps(&acc[r][j]));
}

// Which products a GEMM's tiles take: bf16 pairs (bf16 weights), bf16 pairs of split values (f32 and
// f16 weights), int8 quads (Q8_0, Q4_0).
enum class Kind { Bf16, Split, Int8 };

Kind KindOf(DType wt) {
  return wt == DType::BF16 ? Kind::Bf16 : wt == DType::F32 || wt == DType::F16 ? Kind::Split : Kind::Int8;
}

template <Kind K>
PRISM_AMX void Gemm(const uint8_t* act, const float* da, int64_t rows, const AmxPackedWeight& w, float* y,
                    int64_t m, int64_t n_total, int64_t n_begin, int64_t n_end) {
  constexpr bool Int8 = K == Kind::Int8;
  // A weight panel's bytes per chunk, and an A tile row's.
  constexpr int64_t kStep = Int8 ? kInt8BlockBytes : K == Kind::Split ? 2 * kBf16TileBytes : kBf16TileBytes;
  constexpr int64_t kAStep = Int8               ? kTileRows * kChunk
                             : K == Kind::Split ? 2 * kBf16TileBytes
                                                : kBf16TileBytes;
  const int64_t panel_bytes = w.chunks * kStep, a_tile_row = w.chunks * kAStep;
  alignas(64) float edge[kBlockRows * kAmxCols];
  for (int64_t nb0 = n_begin; nb0 < n_end; nb0 += kNBlock) {
    const int64_t nb1 = std::min(n_end, nb0 + kNBlock);
    for (int64_t c0 = 0; c0 < w.chunks; c0 += kKChunks) {
      const int64_t chunks = std::min(kKChunks, w.chunks - c0);
      const bool first = c0 == 0;
      for (int64_t m0 = 0; m0 < rows; m0 += kBlockRows)
        for (int64_t n0 = nb0; n0 < nb1; n0 += kAmxCols) {
          const uint8_t* b0 = w.data.get() + n0 / kTileRows * panel_bytes + c0 * kStep;
          const uint8_t* a0 = act + m0 / kTileRows * a_tile_row + c0 * kAStep;
          // Whole blocks accumulate in y; a block over its edge (rows past m, columns past nb1) in a
          // buffer whose valid part is copied in and out.
          const int64_t valid_rows = std::min(kBlockRows, m - m0), valid_cols = std::min(kAmxCols, nb1 - n0);
          const bool whole = valid_rows == kBlockRows && valid_cols == kAmxCols;
          float* c = whole ? y + m0 * n_total + n0 : edge;
          const int64_t ldc = whole ? n_total : kAmxCols;
          if (!whole && !first)
            for (int64_t r = 0; r < valid_rows; ++r)
              std::memcpy(edge + r * kAmxCols, y + (m0 + r) * n_total + n0,
                          (size_t)valid_cols * sizeof(float));
          if constexpr (Int8)
            BlockInt8(a0, a0 + a_tile_row, da + m0 * w.chunks + c0, w.chunks, b0, b0 + panel_bytes, chunks, c,
                      ldc, first);
          else if constexpr (K == Kind::Split)
            BlockBf16<true>(a0, a0 + a_tile_row, b0, b0 + panel_bytes, chunks, c, ldc, first);
          else
            BlockBf16<false>(a0, a0 + a_tile_row, b0, b0 + panel_bytes, chunks, c, ldc, first);
          if (!whole)
            for (int64_t r = 0; r < valid_rows; ++r)
              std::memcpy(y + (m0 + r) * n_total + n0, edge + r * kAmxCols,
                          (size_t)valid_cols * sizeof(float));
        }
    }
  }
}

}  // namespace

bool AmxGemmSupported(DType wt, int64_t k) {
  if (k <= 0 || !AmxUsable()) return false;
  if (wt == DType::BF16 || wt == DType::F32 || wt == DType::F16) return true;
  return (wt == DType::Q8_0 || wt == DType::Q4_0) && k % kQuantBlock == 0;
}

double AmxErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n) {
  if (wt == DType::BF16) return Bf16DotErrorBound(a, static_cast<const uint16_t*>(w), k, n);
  if (wt == DType::Q8_0 || wt == DType::Q4_0) return Int8DotErrorBound(a, w, wt, k, n);
  double s = 0;
  for (int64_t kk = 0; kk < k; ++kk) s += std::fabs((double)a[kk] * LoadAsDouble(w, wt, n * k + kk));
  // Split products (3 x 2^-16 of each, below 2^-14), then f32 accumulation of 3 terms per value.
  return s * (std::ldexp(1.0, -14) + 3.0 * (double)k * std::ldexp(1.0, -24));
}

AmxPackedWeight PackForAmx(const void* w, DType wt, int64_t n, int64_t k) {
  if (!AmxGemmSupported(wt, k))
    throw Error("amx: weights of type " + std::string(DTypeName(wt)) + " with K=" + std::to_string(k) +
                " cannot be packed on this CPU");
  AmxPackedWeight p;
  p.type = wt;
  p.n = n;
  p.k = k;
  p.chunks = (k + kChunk - 1) / kChunk;
  p.panels = (n + kAmxCols - 1) / kAmxCols * (kAmxCols / kTileRows);
  const Kind kind = KindOf(wt);
  const int parts = kind == Kind::Split ? 2 : 1;
  const int64_t panel_bytes = p.chunks * (kind == Kind::Int8 ? kInt8BlockBytes : parts * kBf16TileBytes);
  p.bytes = (size_t)(p.panels * panel_bytes);
  p.data = AllocateWeightMemory(p.bytes, "amx: packed weights");  // zeroed: padding stays 0
  uint8_t* out = p.data.get();
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* panel = out + r / kTileRows * panel_bytes;
    const int64_t j = r % kTileRows;
    if (kind != Kind::Int8) {  // tile row q holds K values 2q, 2q + 1 of each column
      uint16_t* dst = reinterpret_cast<uint16_t*>(panel);
      for (int64_t kk = 0; kk < k; ++kk) {
        uint16_t* at =
            dst + (kk / kChunk * parts) * (kBf16TileBytes / 2) + (kk % kChunk / 2) * 32 + j * 2 + kk % 2;
        if (kind == Kind::Bf16) {
          *at = static_cast<const uint16_t*>(w)[r * k + kk];
          continue;
        }
        // Split: hi + lo (exact for f16 weights; f32 ones lose what lies below 16 bits). As for the
        // activations, a weight that is not finite goes into lo whole.
        const float v = (float)LoadAsDouble(w, wt, r * k + kk);
        const uint16_t hi = FloatToBF16(v);
        const bool finite = std::isfinite(BF16ToFloat(hi));
        at[0] = finite ? hi : 0;
        at[kBf16TileBytes / 2] = finite ? FloatToBF16(v - BF16ToFloat(hi)) : hi;
      }
      continue;
    }
    for (int64_t b = 0; b < p.chunks; ++b) {  // tile row q holds K values 4q .. 4q + 3 of each column
      uint8_t* blk = panel + b * kInt8BlockBytes;
      int8_t v[kQuantBlock];
      uint16_t d;
      if (wt == DType::Q8_0) {
        const auto* src = static_cast<const BlockQ8_0*>(w) + r * p.chunks + b;
        d = src->d;
        std::memcpy(v, src->qs, kQuantBlock);
      } else {  // the GGUF byte i holds values i (low nibble) and i + 16 (high nibble), stored +8
        const auto* src = static_cast<const BlockQ4_0*>(w) + r * p.chunks + b;
        d = src->d;
        for (int64_t i = 0; i < kQuantBlock / 2; ++i) {
          v[i] = (int8_t)((src->qs[i] & 0x0f) - 8);
          v[i + kQuantBlock / 2] = (int8_t)((src->qs[i] >> 4) - 8);
        }
      }
      for (int64_t kk = 0; kk < kQuantBlock; ++kk) blk[kk / 4 * 64 + j * 4 + kk % 4] = (uint8_t)v[kk];
      reinterpret_cast<float*>(blk + kInt8TileBytes)[j] = HalfToFloat(d);
    }
  }
  return p;
}

int64_t AmxActivationRows(int64_t m) { return (m + kBlockRows - 1) / kBlockRows * kBlockRows; }

void AmxActivationFit(AmxActivation* act, int64_t m, const AmxPackedWeight& w) {
  const int64_t rows = AmxActivationRows(m);
  const Kind kind = KindOf(w.type);
  const size_t bytes = (size_t)(rows * w.chunks * kChunk) * (kind == Kind::Int8    ? 1
                                                             : kind == Kind::Split ? 4
                                                                                   : 2);
  if (act->values.size() < bytes) act->values.resize(bytes);
  if (kind == Kind::Int8 && act->scales.size() < (size_t)(rows * w.chunks))
    act->scales.resize((size_t)(rows * w.chunks));
}

PRISM_AMX void AmxActivationRound(const float* a, int64_t m, const AmxPackedWeight& w, int part, int parts,
                                  AmxActivation* act) {
  // Whole tiles of 16 rows each: a share never splits a tile.
  const int64_t tiles = AmxActivationRows(m) / kTileRows;
  const int64_t r0 = tiles * part / parts * kTileRows, r1 = tiles * (part + 1) / parts * kTileRows;
  const Kind kind = KindOf(w.type);
  if (kind == Kind::Int8)
    QuantizeActivation(a, m, w.k, r0, r1, reinterpret_cast<int8_t*>(act->values.data()), act->scales.data());
  else
    RoundActivation(a, m, w.k, r0, r1, w.chunks, kind == Kind::Split ? 2 : 1,
                    reinterpret_cast<uint16_t*>(act->values.data()));
}

PRISM_AMX void GemmAmxRounded(const AmxActivation& act, int64_t m, const AmxPackedWeight& w, float* y,
                              int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  if (n_begin % kAmxCols != 0)
    throw Error("amx: a thread's columns must start at a multiple of 32, not at " + std::to_string(n_begin));
  const int64_t rows = AmxActivationRows(m);
  const uint8_t* values = act.values.data();
  switch (KindOf(w.type)) {
    case Kind::Int8:
      ConfigureTiles(kChunk, kChunk / 4);
      Gemm<Kind::Int8>(values, act.scales.data(), rows, w, y, m, n_total, n_begin, n_end);
      break;
    case Kind::Split:
      ConfigureTiles(64, kTileRows);
      Gemm<Kind::Split>(values, nullptr, rows, w, y, m, n_total, n_begin, n_end);
      break;
    case Kind::Bf16:
      ConfigureTiles(64, kTileRows);
      Gemm<Kind::Bf16>(values, nullptr, rows, w, y, m, n_total, n_begin, n_end);
      break;
  }
  _tile_release();  // the tile state is large: leave it unused between calls
}

void GemmAmx(const float* a, int64_t m, const AmxPackedWeight& w, float* y, int64_t n_total, int64_t n_begin,
             int64_t n_end) {
  if (n_begin >= n_end || m <= 0) return;
  thread_local AmxActivation act;
  AmxActivationFit(&act, m, w);
  AmxActivationRound(a, m, w, 0, 1, &act);
  GemmAmxRounded(act, m, w, y, n_total, n_begin, n_end);
}

PRISM_AMX double AmxPeakLoop(bool int8, int64_t iters) {
  ConfigureTiles(64, kTileRows);
  alignas(64) static const uint8_t zeros[kBf16TileBytes] = {};
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  // Six accumulators: the latency of one tile product is more than four times its issue interval.
  if (int8) {
    for (int64_t i = 0; i < iters; ++i) {
      _tile_dpbssd(0, 6, 7);
      _tile_dpbssd(1, 6, 7);
      _tile_dpbssd(2, 6, 7);
      _tile_dpbssd(3, 6, 7);
      _tile_dpbssd(4, 6, 7);
      _tile_dpbssd(5, 6, 7);
    }
  } else {
    for (int64_t i = 0; i < iters; ++i) {
      _tile_dpbf16ps(0, 6, 7);
      _tile_dpbf16ps(1, 6, 7);
      _tile_dpbf16ps(2, 6, 7);
      _tile_dpbf16ps(3, 6, 7);
      _tile_dpbf16ps(4, 6, 7);
      _tile_dpbf16ps(5, 6, 7);
    }
  }
  _tile_release();
  return (double)iters * 6 * kTileRows * kTileRows * (int8 ? 64 : 32) * 2;
}

}  // namespace prism
