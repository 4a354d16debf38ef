// Template-tier CPU causal attention: scores, mask, softmax and P·V in one pass per block of queries.
#pragma once

#include <cstdint>

namespace prism {

struct AttentionDims {
  int64_t heads_kv, group, head_dim;
  int64_t seq, total;  // queries this step; keys visible to the last one (cached + new)
  int64_t offset;      // key t is visible to query s when t < s + offset
  float scale, exp_scale;
  int64_t out_seq = 0, out_row0 = 0;  // out is [H, G, out_seq, D] and these queries its rows from out_row0
  // Layouts, in floats (-1: the dense ones below): q[s, h*G+g, e] at s * q_row + (h*G+g) * q_head + e, key
  // t of K/V head h at t * k_row + h * k_head (v_row, v_head for V); each row's D elements contiguous.
  int64_t q_row = -1, q_head = -1, k_row = -1, k_head = -1, v_row = -1, v_head = -1;
  // An additive bias on the scores (null: none): mask[s * mask_row + t]; -inf hides key t from query s.
  const float* mask = nullptr;
  int64_t mask_row = 0;
  // Per query, where its mask row shows keys (set by CausalAttentionF32 with the mask): blocks skip the keys
  // before and after, and a block whose rows' masks add 0 to every key between skips adding them.
  struct MaskSpan {
    int32_t first = 0, end = 0;  // the first visible key, one past the last (first == end: none)
    bool plain = true;           // every value in [first, end) is 0
  };
  const MaskSpan* spans = nullptr;
  // Key t's row in K and V (the rows the layouts' k_row and v_row step over): key_rows[t], a paged cache's
  // pool row; null: t itself.
  const int64_t* key_rows = nullptr;
};

// A paged KV cache: query s's key t is pool row table[s * blocks + t / block] * block + t % block
// (clamped to the pool, as a gather clamps), visible when t <= positions[s].
struct PagedKv {
  const int32_t* table;
  const int32_t* positions;
  int64_t blocks, block, pool_rows;
};

// True where this CPU runs the template: AVX-512 or AVX2 + FMA, unless PRISM_GEMM_ISA=scalar rules it out.
bool AttentionTemplateSupported();

// out[h, g, s, d] = sum_t p[t] v[t, h, d], p = softmax over visible t of scale * q[s, h*G+g, :] · k[t, h, :]
// (+ mask[s, t]; the softmax as exp2((x - max) * exp_scale), normalized). q: [seq, H*G*D]; k, v:
// [>= total, H, D] (or the layouts the dims give); out: [H, G, seq, D]; all f32. A query that sees no key
// gets NaN, as the unfused graph does.
// Work comes in blocks of 16 (AVX-512; 8 with AVX2) (query, group head) rows per K/V head; thread t of n
// takes blocks t, t + n, ..., which balances the causal triangle.
void CausalAttentionF32(const float* q, const float* k, const float* v, float* out, const AttentionDims& a,
                        int thread, int threads);

// The same over a ragged batch through a paged KV cache: a.seq queries of many sequences, a.total =
// blocks * block keys at most, a.offset unused. Each run of queries with one block-table row and
// consecutive positions (one sequence's piece) is a causal attention over its sequence's keys, read in the
// pools where they lie (AttentionDims::key_rows). Runs go to threads whole when there are enough of them.
void PagedAttentionF32(const float* q, const float* k_pool, const float* v_pool, float* out,
                       const AttentionDims& a, const PagedKv& kv, int thread, int threads);

}  // namespace prism
