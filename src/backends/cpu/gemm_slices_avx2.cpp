// Template-tier CPU GEMM for many activation rows on AVX2 machines (see gemm_slices_avx2.h): a row-major
// dot-product tile loads as many values as it multiplies; broadcasting each activation value against a
// K-major f32 slice does 12 FMAs per two weight loads and decodes each weight once per row block.
#include "backends/cpu/gemm_slices_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_avx2.h"
#include "backends/cpu/gemm_blocks.h"
#include "backends/cpu/gemm_panels.h"

namespace prism {
namespace {

#define PRISM_AVX2 __attribute__((target("avx2,fma,f16c")))

constexpr int kMR = 6;                   // activation rows per register tile: 12 accumulators of 8 columns
constexpr int64_t kKBlock = 256;         // values of K per slice: 16 KB of f32, held in L1 while tiles pass
constexpr int64_t kDefaultMBlock = 192;  // rows per block: 192 KB of activations per slice's K, within L2

// MR activation rows (row i's value kk at a[i * row_step + kk * k_step]: packed K-major, or where they lie) x
// the slice's 16 columns over kb values of K, stored into y (rows ldy apart) when first, else added to it.
// Not cloned: GCC's clone for the thread's own slice buffer found its address inside every tile, spilling
// and reloading all 12 accumulators around it (10% of a convolution's product over K = 27).
template <int MR>
PRISM_AVX2 __attribute__((noclone)) void Tile(const float* a, int64_t row_step, int64_t k_step,
                                              const float* w, int64_t kb, float* y, int64_t ldy, bool first) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + i * ldy);
    acc[i][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + i * ldy + 8);
  }
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < kb; ++kk) {
    const __m256 w0 = _mm256_load_ps(w + kk * kSliceCols), w1 = _mm256_load_ps(w + kk * kSliceCols + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * row_step + kk * k_step);
      acc[i][0] = _mm256_fmadd_ps(av, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(y + i * ldy, acc[i][0]);
    _mm256_storeu_ps(y + i * ldy + 8, acc[i][1]);
  }
}

PRISM_AVX2 void RunTile(int mr, const float* a, int64_t row_step, int64_t k_step, const float* w, int64_t kb,
                        float* y, int64_t ldy, bool first) {
  switch (mr) {
    case 6: return Tile<6>(a, row_step, k_step, w, kb, y, ldy, first);
    case 5: return Tile<5>(a, row_step, k_step, w, kb, y, ldy, first);
    case 4: return Tile<4>(a, row_step, k_step, w, kb, y, ldy, first);
    case 3: return Tile<3>(a, row_step, k_step, w, kb, y, ldy, first);
    case 2: return Tile<2>(a, row_step, k_step, w, kb, y, ldy, first);
    default: return Tile<1>(a, row_step, k_step, w, kb, y, ldy, first);
  }
}

// The 8 x 8 block r (row i in r[i]) transposed in place: r[c] becomes its column c.
PRISM_AVX2 inline void Transpose8x8(__m256* r) {
  __m256 t[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  __m256 s[8];
#pragma GCC unroll 2
  for (int h = 0; h < 8; h += 4) {                                          // rows 0-3, then 4-7
    s[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));      // column 0 | 4
    s[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));  // column 1 | 5
    s[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[c + 4], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(s[c], s[c + 4], 0x31);
  }
}

// An 8 x 8 block of src (rows lds apart) transposed into dst (rows ldd apart).
PRISM_AVX2 void Transpose8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  Transpose8x8(r);
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(dst + c * ldd, r[c]);
}

// Rows [m0, m1) of the call x K values [k0, k0 + kb) into tiles of kMR rows, K-major (a tile's kMR values of
// one k together), zero past m1: from a row-major A (rows k apart) or a K-major one (layout). Whole tiles
// move as vectors, 8 values of K at a time transposed from a row-major A, one 8-wide load per k from a
// K-major one (the scalar copies had cost a convolution's product a third of its time); each k's store spills
// two lanes into the next k's place, which that k's store then overwrites, and the tile's last k is masked.
PRISM_AVX2 void PackTiles(const float* a, PanelActivation l, int64_t k, int64_t m0, int64_t m1, int64_t k0,
                          int64_t kb, float* ap) {
  static_assert(kMR == 6, "the vector paths move 6 rows in 8 lanes");
  const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
  for (int64_t i0 = m0; i0 < m1; i0 += kMR, ap += kb * kMR) {
    const int64_t r = l.first + i0, p = l.group > 0 ? r % l.group : 0;
    const bool whole = i0 + kMR <= m1 && (l.group == 0 || p + kMR <= l.group);
    int64_t kk = 0;
    if (whole && l.group > 0) {
      const float* src = a + (r / l.group * k + k0) * l.group + p;
      const bool room = p + 8 <= l.group;  // the two values past the tile are in this row of the group
      for (; kk + 1 < kb; ++kk)
        _mm256_storeu_ps(ap + kk * kMR, room ? _mm256_loadu_ps(src + kk * l.group)
                                             : _mm256_maskload_ps(src + kk * l.group, six));
      _mm256_maskstore_ps(ap + kk * kMR, six, _mm256_maskload_ps(src + kk * l.group, six));
      continue;
    }
    if (whole) {
      const float* row = a + i0 * k + k0;
      for (; kk + 8 <= kb; kk += 8) {
        __m256 t[8];  // the 6 rows' values kk.. (and two zero rows), then value kk + c of the 6 rows in t[c]
#pragma GCC unroll 6
        for (int i = 0; i < kMR; ++i) t[i] = _mm256_loadu_ps(row + i * k + kk);
        t[6] = t[7] = _mm256_setzero_ps();
        Transpose8x8(t);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          if (kk + c + 1 < kb)
            _mm256_storeu_ps(ap + (kk + c) * kMR, t[c]);
          else
            _mm256_maskstore_ps(ap + (kk + c) * kMR, six, t[c]);
        }
      }
    }
    for (int i = 0; i < kMR; ++i) {  // what is left: a partial tile, one across groups, a K tail
      const int64_t ri = r + i;
      const float* src = i0 + i >= m1  ? nullptr
                         : l.group > 0 ? a + (ri / l.group * k + k0) * l.group + ri % l.group
                                       : a + (i0 + i) * k + k0;
      const int64_t step = l.group > 0 ? l.group : 1;
      for (int64_t j = kk; j < kb; ++j) ap[j * kMR + i] = src ? src[j * step] : 0.0f;
    }
  }
}

// Values [k0, k0 + kb) of one weight row as f32, exactly.
PRISM_AVX2 void DecodeRow(const uint8_t* row, DType wt, int64_t k0, int64_t kb, float* out) {
  if (wt == DType::F32 || wt == DType::F16 || wt == DType::BF16) {
    int64_t kk = 0;
    for (; kk + 8 <= kb; kk += 8) {
      if (wt == DType::F32) {
        _mm256_storeu_ps(out + kk, _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k0 + kk));
        continue;
      }
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + (k0 + kk) * 2));
      _mm256_storeu_ps(out + kk, wt == DType::F16
                                     ? _mm256_cvtph_ps(h)
                                     : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; kk < kb; ++kk) out[kk] = (float)LoadAsDouble(row, wt, k0 + kk);
    return;
  }
  const int64_t be = BlockElems(wt), first = k0 / be, blocks = kb / be;
  if (wt != DType::Q8_0 && wt != DType::Q4_0)
    return DequantizeBlocksAvx2(row + first * BlockBytes(wt), wt, blocks, out);
  for (int64_t b = 0; b < blocks; ++b, out += kQuantBlock) {
    const uint8_t* blk = row + (first + b) * BlockBytes(wt);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk)));
    const uint8_t* qs = blk + 2;
    __m256i v[4];
    if (wt == DType::Q8_0) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
        v[q] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * q)));
    } else {  // low nibbles are values 0..15, high nibbles 16..31, both offset by 8
      const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
      const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
      const __m256i fifteen = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
      v[0] = _mm256_sub_epi32(_mm256_and_si256(lo, fifteen), eight);
      v[1] = _mm256_sub_epi32(_mm256_and_si256(hi, fifteen), eight);
      v[2] = _mm256_sub_epi32(_mm256_srli_epi32(lo, 4), eight);
      v[3] = _mm256_sub_epi32(_mm256_srli_epi32(hi, 4), eight);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + 8 * q, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v[q])));
  }
}

PRISM_AVX2 void Run(const float* a, int64_t m, int64_t k, const uint8_t* w, DType wt, float* y,
                    int64_t n_total, int64_t n_begin, int64_t n_end, int64_t m_block,
                    PanelActivation layout) {
  alignas(32) static thread_local float rows[kSliceCols * kKBlock], slice[kKBlock * kSliceCols];
  static thread_local std::vector<float> apack;
  alignas(32) float edge[kMR * kSliceCols];
  // Few columns (a convolution's few output channels over many pixels) read a row-major A where it lies:
  // packing it would double its traffic for one or two slices. A K-major A is always packed.
  const bool pack = n_end - n_begin > 2 * kSliceCols || layout.group > 0;
  const int64_t rb = StorageBytes(wt, k);
  // Equal row blocks, whole tiles each.
  const int64_t blocks = (m + m_block - 1) / m_block;
  const int64_t mb = ((m + blocks - 1) / blocks + kMR - 1) / kMR * kMR;
  for (int64_t m0 = 0; m0 < m; m0 += mb) {
    const int64_t m1 = std::min(m, m0 + mb);
    for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
      const int64_t kb = std::min(kKBlock, k - k0), kbp = (kb + 7) / 8 * 8;
      const bool first = k0 == 0;
      // Rows where they lie are K floats apart: over a power-of-two K (every model's) a tile's rows fall in
      // one set of the L1 cache and evict each other and the slice.
      if (pack) {
        apack.resize((size_t)((m1 - m0 + kMR - 1) / kMR * kMR * kb));
        PackTiles(a, layout, k, m0, m1, k0, kb, apack.data());
      }
      const int64_t tiles = (m1 - m0 + kMR - 1) / kMR;
      for (int64_t n = n_begin; n < n_end; n += kSliceCols) {
        const int64_t cols = std::min(kSliceCols, n_end - n);
        // The slice met next (the next columns, else the first at the next block of K, else at the next row
        // block) is fetched into L2 a share at a time by the tiles passing over this one: its rows' K block
        // lie a row apart (1 KiB each of f32), too short for the hardware prefetcher, and DecodeRow had
        // waited on memory for 13% of an f32 prompt's time on Zen 3.
        const bool last_n = n + kSliceCols >= n_end;
        const int64_t next_n = last_n ? n_begin : n + kSliceCols;
        const int64_t next_k0 = !last_n ? k0 : k0 + kb < k ? k0 + kb : 0;
        const bool has_next = !last_n || k0 + kb < k || m1 < m;
        const int64_t next_bytes = StorageBytes(wt, std::min(kKBlock, k - next_k0)),
                      next_offset = StorageBytes(wt, next_k0);
        const uint8_t* next_row0 = w + next_n * rb + next_offset;
        // Lines of a row's block (one more where rows do not start on a line: the last is its last byte).
        const bool aligned = reinterpret_cast<uintptr_t>(next_row0) % 64 == 0 && rb % 64 == 0;
        const int64_t row_lines = (next_bytes + 63) / 64 + (aligned ? 0 : 1),
                      next_lines = has_next ? std::min(kSliceCols, n_end - next_n) * row_lines : 0,
                      share = (next_lines + tiles - 1) / tiles;
        for (int64_t j = 0; j < kSliceCols; ++j) {  // the slice's rows, then K-major (zero past its ends)
          float* r = rows + j * kKBlock;
          if (j < cols) DecodeRow(w + (n + j) * rb, wt, k0, kb, r);
          std::fill(r + (j < cols ? kb : 0), r + kbp, 0.0f);
        }
        for (int64_t kk = 0; kk < kbp; kk += 8) {
          Transpose8(rows + kk, kKBlock, slice + kk * kSliceCols, kSliceCols);
          Transpose8(rows + 8 * kKBlock + kk, kKBlock, slice + kk * kSliceCols + 8, kSliceCols);
        }
        for (int64_t i = m0; i < m1; i += kMR) {
          const int mr = (int)std::min<int64_t>(kMR, m1 - i);
          for (int64_t l = (i - m0) / kMR * share, e = std::min(next_lines, l + share); l < e; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(next_row0 + l / row_lines * rb +
                                                       std::min(l % row_lines * 64, next_bytes - 1)),
                         _MM_HINT_T1);
          // The next tile's rows of y, which it adds to (out of L2 once a row block's columns outgrow it),
          // into L1: each tile otherwise began waiting on them. (Spread over the tile's steps of K, these
          // and the weights' prefetches came too late: f32 pp512 of the 1B shape on Zen 3 40 against 50.)
          const bool next_here = i + kMR < m1;
          if (!first && (next_here || !last_n)) {
            const int64_t ni = next_here ? i + kMR : m0, nn = next_here ? n : n + kSliceCols,
                          nr = std::min<int64_t>(kMR, m1 - ni), nc = std::min(kSliceCols, n_end - nn);
            for (int64_t r = 0; r < nr; ++r) {
              const float* yr = y + (ni + r) * n_total + nn;
              _mm_prefetch(reinterpret_cast<const char*>(yr), _MM_HINT_T0);
              _mm_prefetch(reinterpret_cast<const char*>(yr + nc - 1), _MM_HINT_T0);
            }
          }
          const float* ai = pack ? apack.data() + (i - m0) * kb : a + i * k + k0;
          const int64_t row_step = pack ? 1 : k, k_step = pack ? kMR : 1;
          float* yi = y + i * n_total + n;
          if (cols == kSliceCols) {
            RunTile(mr, ai, row_step, k_step, slice, kb, yi, n_total, first);
            continue;
          }
          // A slice past the last column goes through a full-width buffer; only its valid part touches y.
          for (int r = 0; r < mr && !first; ++r)
            std::memcpy(edge + r * kSliceCols, yi + r * n_total, (size_t)cols * sizeof(float));
          RunTile(mr, ai, row_step, k_step, slice, kb, edge, kSliceCols, first);
          for (int r = 0; r < mr; ++r)
            std::memcpy(yi + r * n_total, edge + r * kSliceCols, (size_t)cols * sizeof(float));
        }
      }
    }
  }
}

}  // namespace

bool SliceGemmSupported(DType wt, int64_t k) {
  return GemmAvx2Supported() && std::string_view(GemmIsa()) == "avx2" && GemmSupports(wt, k);
}

void GemmSlicesAvx2(const float* a, int64_t m, int64_t k, const void* w, DType wt, float* y, int64_t n_total,
                    int64_t n_begin, int64_t n_end, int64_t m_block, PanelActivation layout) {
  if (n_begin >= n_end || m <= 0) return;
  Run(a, m, k, static_cast<const uint8_t*>(w), wt, y, n_total, n_begin, n_end,
      m_block > 0 ? m_block : kDefaultMBlock, layout);
}

std::vector<int64_t> SliceRowBlockChoices(int64_t m) {
  std::vector<int64_t> out;
  for (int64_t v : {96, 384})
    if (m > std::min<int64_t>(v, kDefaultMBlock)) out.push_back(v);
  return out;
}

}  // namespace prism
