// Template-tier CPU GEMM for many activation rows: 12 x 32 register tiles (8 or 14 rows where the search
// finds them faster) over K-major weight panels, each activation value broadcast against two vectors of 16
// columns.
#include "backends/cpu/gemm_panels.h"

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_int8_panels.h"
#include "backends/cpu/weight_memory.h"

// GCC 12 warns inside its own AVX-512 conversion intrinsics (_mm512_cvtph_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ir/error.h"

namespace prism {
namespace {

#define PRISM_PANELS __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
  return has;
}

// 16 weights of a panel row as f32.
template <DType T>
PRISM_PANELS inline __m512 Load16(const uint8_t* p) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Register tile: MR activation rows x the 32 columns of a panel, 2 x MR accumulators: kMR by default, or
// another of PanelTileRowsChoices (a template parameter the search times; 14 leaves one of the 32 vector
// registers for the activation's broadcast past the two weight vectors).
constexpr int kMR = 12, kMaxMR = 14;
// Blocks: a block of activation rows (at most kMaxMBlock rows x kKBlock values of K, packed tile by tile)
// stays in L2, and each panel's kKBlock x 32 slice (converted to f32) stays in L1 while every tile of the
// row block passes over it; those tiles meanwhile prefetch the next slice into L2 (the hardware prefetcher,
// which follows a stream within one 4 KiB page, left the first tile of each slice waiting on memory).
// Weights are so read from memory, and converted, once per row block: twice for a 512-token prompt. On an
// Intel Xeon with AMX, two threads, the 1B shape's products at 512 rows (`prism_gemm_bench 512 N K 5 2
// warm f32`) ran at 59-65% of the f32 FMA peak with 516-row blocks, no prefetch and the rows read where
// they lie, and at 71-82% so (one thread 73-80%); the tile alone, its data in L1, at 92%.
constexpr int64_t kMaxMBlock = 256, kKBlock = 256;
// A row-major activation is packed into tiles where K is longer than kPackFromK and the thread's columns
// span at least kPackFromPanels panels; else its rows are read where they lie (packing them cost as much as
// the products over a convolution's 27 taps, and each thread packs the whole block for its own panels).
constexpr int64_t kPackFromK = 64, kPackFromPanels = 8;
// Weights of a panel slice as f32, 16 at a time.
template <DType T>
PRISM_PANELS void ToF32(const uint8_t* src, int64_t count, float* dst) {
  constexpr int64_t elem = T == DType::F32 ? 4 : 2;
  for (int64_t i = 0; i < count; i += 16) _mm512_store_ps(dst + i, Load16<T>(src + i * elem));
}

// MR activation rows x 32 weight columns (f32, K-major) over kb values of K, stored into y (rows ldy apart)
// when first, else added to it; the 32 values of `bias` (if any) added as it is stored. While it runs it
// prefetches `ahead_lines` (at most 2 kb) lines from `ahead` into L2, one or two a step. Row i's value kk is
// ap[i * row_step + kk * k_step]: tiles packed K-major (kPacked: row_step 1 and k_step MR known here, so
// that each broadcast is one load at a fixed offset), or rows read where they lie (row_step their stride,
// k_step 1).
template <int MR, bool kPacked>
PRISM_PANELS void Tile(const float* ap, int64_t row_step, int64_t k_step, const float* w, int64_t kb,
                       float* y, int64_t ldy, bool first, const float* bias, const uint8_t* ahead,
                       int64_t ahead_lines) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i * ldy);
    acc[i][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i * ldy + 16);
  }
  for (int64_t kk = 0; kk < kb; ++kk) {
    if (kk < ahead_lines) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + kk * 64), _MM_HINT_T1);
      if (kk + kb < ahead_lines)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + (kk + kb) * 64), _MM_HINT_T1);
    }
    __m512 w0 = _mm512_load_ps(w + kk * kPanelCols), w1 = _mm512_load_ps(w + kk * kPanelCols + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      __m512 av = _mm512_set1_ps(kPacked ? ap[kk * MR + i] : ap[i * row_step + kk * k_step]);
      acc[i][0] = _mm512_fmadd_ps(av, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, w1, acc[i][1]);
    }
  }
  if (bias) {
    const __m512 b0 = _mm512_loadu_ps(bias), b1 = _mm512_loadu_ps(bias + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm512_add_ps(acc[i][0], b0);
      acc[i][1] = _mm512_add_ps(acc[i][1], b1);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(y + i * ldy, acc[i][0]);
    _mm512_storeu_ps(y + i * ldy + 16, acc[i][1]);
  }
}

// The same tiles from a K-major A (PanelActivation): a tile's MR rows within one group are MR consecutive
// values of each of its K rows.
template <int MR>
PRISM_PANELS void PackKMajor(const float* a, PanelActivation l, int64_t k, int64_t m0, int64_t m1, int64_t k0,
                             int64_t kb, float* ap) {
  for (int64_t i0 = m0; i0 < m1; i0 += MR, ap += kb * MR) {
    const int64_t r = l.first + i0, g = r / l.group, p = r % l.group, rows = std::min<int64_t>(MR, m1 - i0);
    if (p + rows <= l.group) {
      const float* src = a + (g * k + k0) * l.group + p;
      const __mmask16 valid = (__mmask16)((1u << rows) - 1);
      for (int64_t kk = 0; kk < kb; ++kk)
        _mm512_mask_storeu_ps(ap + kk * MR, (__mmask16)((1u << MR) - 1),
                              _mm512_maskz_loadu_ps(valid, src + kk * l.group));
      continue;
    }
    for (int i = 0; i < MR; ++i) {  // the tile crosses into the next group
      const int64_t ri = r + i, gi = ri / l.group, pi = ri % l.group;
      const float* src = i < rows ? a + (gi * k + k0) * l.group + pi : nullptr;
      for (int64_t kk = 0; kk < kb; ++kk) ap[kk * MR + i] = src ? src[kk * l.group] : 0.0f;
    }
  }
}

template <DType T, int MR>
PRISM_PANELS void Gemm(const float* a, int64_t m, const PanelPackedWeight& w, float* y, int64_t n_total,
                       int64_t n_begin, int64_t n_end, PanelActivation layout, const float* bias) {
  const int64_t k = w.k, elem = T == DType::F32 ? 4 : 2, panel_bytes = k * kPanelCols * elem;
  // A row block is whole tiles: at most kMaxMBlock rows rounded up to MR.
  alignas(64) static thread_local float apack[(kMaxMBlock + kMaxMR) * kKBlock], wconv[kKBlock * kPanelCols];
  alignas(64) float edge[MR * kPanelCols];
  const int64_t p_first = n_begin / kPanelCols, p_last = (n_end - 1) / kPanelCols,
                panels = p_last - p_first + 1;
  // Whole tiles of a row-major A over a short K or few panels are read where they lie; the rest is packed.
  const bool direct = layout.group == 0 && (k <= kPackFromK || panels < kPackFromPanels);
  // Equal row blocks, whole tiles each.
  const int64_t blocks = (m + kMaxMBlock - 1) / kMaxMBlock;
  const int64_t m_block = ((m + blocks - 1) / blocks + MR - 1) / MR * MR;
  for (int64_t m0 = 0; m0 < m; m0 += m_block) {
    const int64_t m1 = std::min(m, m0 + m_block);
    for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
      const int64_t kb = std::min(kKBlock, k - k0);
      const bool first = k0 == 0;
      const int64_t m_whole = direct ? m0 + (m1 - m0) / MR * MR : m0;
      if (layout.group > 0)
        PackKMajor<MR>(a, layout, k, m0, m1, k0, kb, apack);
      else if (m_whole < m1)
        PackActivationTiles<MR>(a, k, m_whole, m1, k0, kb, apack + (m_whole - m0) * kb);
      const int64_t tiles = (m1 - m0 + MR - 1) / MR;
      for (int64_t p = p_first; p <= p_last; ++p) {
        const uint8_t* slice = w.data.get() + p * panel_bytes + k0 * kPanelCols * elem;
        // The slice met next (the next panel's, else the first panel's at the next block of K, else the
        // first block's), prefetched into L2 a share at a time by the tiles passing over this one.
        const int64_t next_k0 = p < p_last ? k0 : k0 + kb < k ? k0 + kb : 0;
        const uint8_t* ahead =
            w.data.get() + (p < p_last ? p + 1 : p_first) * panel_bytes + next_k0 * kPanelCols * elem;
        const int64_t ahead_lines = std::min(kKBlock, k - next_k0) * kPanelCols * elem / 64,
                      share = std::min(2 * kb, (ahead_lines + tiles - 1) / tiles);
        const float* wf = reinterpret_cast<const float*>(slice);  // f32 weights are read in place
        if constexpr (T != DType::F32) {
          ToF32<T>(slice, kb * kPanelCols, wconv);
          wf = wconv;
        }
        // Columns of this panel that are ours: a split may start or end inside a panel.
        const int64_t c0 = std::max<int64_t>(0, n_begin - p * kPanelCols),
                      c1 = std::min<int64_t>(kPanelCols, n_end - p * kPanelCols);
        // The bias after the last block of K; a partial panel's from a copy (its columns past ours unread).
        const float* pb = bias && k0 + kb == k ? bias + p * kPanelCols : nullptr;
        alignas(64) float bias_edge[kPanelCols] = {};
        if (pb && (c0 != 0 || c1 != kPanelCols)) {
          std::memcpy(bias_edge + c0, pb + c0, (size_t)(c1 - c0) * sizeof(float));
          pb = bias_edge;
        }
        for (int64_t i = m0; i < m1; i += MR) {
          const bool in_place = i < m_whole;
          // This tile's share of the next slice (none once the earlier tiles have covered it).
          const int64_t done = std::min(ahead_lines, (i - m0) / MR * share),
                        lines = std::min(share, ahead_lines - done);
          const float* ap = in_place ? a + i * k + k0 : apack + (i - m0) * kb;
          const int64_t row_step = in_place ? k : 1, k_step = in_place ? 1 : MR;
          float* yt = y + i * n_total + p * kPanelCols;
          const int64_t rows = std::min<int64_t>(MR, m1 - i);
          auto tile = [&](float* out, int64_t ld) {
            if (in_place)
              Tile<MR, false>(ap, row_step, k_step, wf, kb, out, ld, first, pb, ahead + done * 64, lines);
            else
              Tile<MR, true>(ap, row_step, k_step, wf, kb, out, ld, first, pb, ahead + done * 64, lines);
          };
          if (rows == MR && c0 == 0 && c1 == kPanelCols) {
            tile(yt, n_total);
            continue;
          }
          // A partial tile goes through a full-size buffer; only its valid part touches y.
          for (int64_t r = 0; r < rows && !first; ++r)
            std::memcpy(edge + r * kPanelCols + c0, yt + r * n_total + c0, (size_t)(c1 - c0) * sizeof(float));
          tile(edge, kPanelCols);
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(yt + r * n_total + c0, edge + r * kPanelCols + c0, (size_t)(c1 - c0) * sizeof(float));
        }
      }
    }
  }
}

template <DType T>
void GemmFloat(const float* a, int64_t m, const PanelPackedWeight& w, float* y, int64_t n_total,
               int64_t n_begin, int64_t n_end, PanelActivation layout, int64_t tile_rows, const float* bias) {
  switch (tile_rows) {
    case 0:
    case kMR: return Gemm<T, kMR>(a, m, w, y, n_total, n_begin, n_end, layout, bias);
    case 8: return Gemm<T, 8>(a, m, w, y, n_total, n_begin, n_end, layout, bias);
    case kMaxMR: return Gemm<T, kMaxMR>(a, m, w, y, n_total, n_begin, n_end, layout, bias);
    default:
      throw Error("panel gemm: register tile of " + std::to_string(tile_rows) +
                  " rows (8, 12 or 14 are built)");
  }
}

}  // namespace

bool PanelGemmSupported(DType wt) {
  if (IsQuantized(wt)) return Avx512TemplatesEnabled() && Int8PanelsSupported(wt, BlockElems(wt));
  return HasAvx512() && Avx512TemplatesEnabled() &&
         (wt == DType::F32 || wt == DType::F16 || wt == DType::BF16);
}

PanelPackedWeight PackPanels(const void* w, DType wt, int64_t n, int64_t k) {
  if (!PanelGemmSupported(wt) || n <= 0 || k <= 0)
    throw Error("panel gemm: weights of type " + std::string(DTypeName(wt)) +
                " cannot be packed on this CPU");
  PanelPackedWeight p;
  p.type = wt;
  p.n = n;
  p.k = k;
  p.panels = (n + kPanelCols - 1) / kPanelCols;
  if (IsQuantized(wt)) {
    if (k % BlockElems(wt) != 0) throw Error("panel gemm: K=" + std::to_string(k) + " is not whole blocks");
    p.bytes = Int8PanelBytes(wt, n, k);
    p.data = AllocateWeightMemory(p.bytes, "int8 panels: packed weights");
    PackPanelsInt8(w, wt, n, k, p.data.get());
    return p;
  }
  const int64_t elem = wt == DType::F32 ? 4 : 2;
  const size_t bytes = p.bytes = (size_t)(p.panels * k * kPanelCols * elem);
  p.data = AllocateWeightMemory(bytes, "panel gemm: packed weights");
  const uint8_t* src = static_cast<const uint8_t*>(w);
  for (int64_t col = 0; col < n; ++col) {
    uint8_t* dst = p.data.get() + (col / kPanelCols * k * kPanelCols + col % kPanelCols) * elem;
    for (int64_t kk = 0; kk < k; ++kk)
      std::memcpy(dst + kk * kPanelCols * elem, src + (col * k + kk) * elem, elem);
  }
  return p;
}

std::vector<int64_t> PanelTileRowsChoices(DType wt) {
  if (IsQuantized(wt) || !PanelGemmSupported(wt)) return {};
  return {8, kMaxMR};
}

void GemmPanels(const float* a, int64_t m, const PanelPackedWeight& w, float* y, int64_t n_total,
                int64_t n_begin, int64_t n_end, PanelActivation layout, int64_t param, const float* bias) {
  if (n_begin >= n_end || m <= 0) return;
  switch (w.type) {
    case DType::F32: return GemmFloat<DType::F32>(a, m, w, y, n_total, n_begin, n_end, layout, param, bias);
    case DType::F16: return GemmFloat<DType::F16>(a, m, w, y, n_total, n_begin, n_end, layout, param, bias);
    case DType::BF16: return GemmFloat<DType::BF16>(a, m, w, y, n_total, n_begin, n_end, layout, param, bias);
    default:
      if (layout.group > 0) throw Error("panel gemm: a K-major activation with quantized weights");
      if (bias) throw Error("panel gemm: a bias with quantized weights");
      return GemmPanelsInt8(a, m, w.data.get(), w.type, w.k, y, n_total, n_begin, n_end, param);
  }
}

}  // namespace prism
