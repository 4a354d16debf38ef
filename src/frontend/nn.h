// High-level neural-network ops, each a composition of primitives (no new IR ops).
#pragma once

#include <optional>
#include <vector>

#include "frontend/tensor.h"

namespace prism {

// Batched broadcasting matmul: a [..., M, K] x b [..., K, N] -> [..., M, N].
Tensor Matmul(const Tensor& a, const Tensor& b);
// x [..., K] times a weight stored [N, K] (Hugging Face Linear layout) -> [..., N], plus bias [N].
Tensor Linear(const Tensor& x, const Tensor& weight);
Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor Softmax(const Tensor& x, int64_t axis = -1);
Tensor LogSoftmax(const Tensor& x, int64_t axis = -1);
Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps);  // over the last axis
Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
Tensor LayerNorm(const Tensor& x, const Tensor& weight, double eps);  // without a bias
Tensor Silu(const Tensor& x);
Tensor GeluTanh(const Tensor& x);
Tensor GeluErf(const Tensor& x);
Tensor Erf(const Tensor& x);  // Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)
Tensor Concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor Argmax(const Tensor& x, int64_t axis, bool keepdim = false);  // first maximal index, i32
Tensor Embedding(const Tensor& table, const Tensor& ids);           // table [V, D], ids [...] -> [..., D]
// The k largest values along the last axis, largest first, and their indices (i32; the first of equal values
// first): x [..., N] -> values [..., k], indices [..., k]. k <= N.
struct TopKResult {
  Tensor values, indices;
};
TopKResult TopK(const Tensor& x, int64_t k);
// Each row through its own expert's weight: x [R, K], experts [E, N, K] (Linear layout per expert), expert
// [R] i32 -> [R, N], row r being x[r] · experts[expert[r]]ᵀ. Only the chosen experts' weights are read.
Tensor ExpertLinear(const Tensor& x, const Tensor& experts, const Tensor& expert);

enum class RopeStyle { HalfSplit, Interleaved };
// Rotary position embedding for x [seq, heads, head_dim] at positions [seq] (i32);
// inv_freq [head_dim/2] f32 holds the per-pair frequencies (see RopeInvFreq).
Tensor Rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeStyle style);
// theta^(-2i/d) for i < d/2, computed in the graph; optional llama3 frequency scaling.
struct RopeScaling {
  double factor = 0;  // 0 = none
  double low_freq_factor = 1, high_freq_factor = 4;
  double original_max_position = 8192;
};
Tensor RopeInvFreq(Graph* g, int64_t head_dim, double theta, const RopeScaling& scaling = {});
// [values.size()] f32 holding `values` (small tables such as LongRoPE's per-frequency factors).
Tensor ConstVector(Graph* g, const std::vector<double>& values);
// cap * tanh(x / cap): Gemma 2's soft-capping of attention scores and logits.
Tensor SoftCap(const Tensor& x, double cap);

// What a layer's attention adds to the causal mask: a sliding window (the query at position p sees the
// keys at p - window < t <= p; 0: every earlier key) and soft-capped scores (SoftCap before the mask;
// 0: none).
struct AttentionVariant {
  int64_t window = 0;
  double softcap = 0;
  // No causal mask: every query sees every key of the cache's [0, past + seq) (encoders); with a window, those
  // less than `window` positions away from it either way.
  bool bidirectional = false;
};

// Causal grouped-query attention over a KV cache held in state buffers.
// q [seq, Hq, D]; k, v [seq, Hkv, D]; k_cache, v_cache are State tensors [Hkv, max_ctx, D] (head-major:
// each head's keys together). The new keys and values are written at positions [past, past + seq); queries
// attend to [0, past + seq) causally. Returns [seq, Hq * D]. With a window, only the cache rows some query
// of the step sees are read (from past + 1 - window on).
Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                       const Tensor& v_cache, const Expr& past, double scale, const AttentionVariant& variant = {});

// Attention over tensors, with no cache (PyTorch's scaled_dot_product_attention): q [S, Hq, D]; k, v
// [T, Hkv, D], any views; mask (optional) an additive [S, T] bias on the scores, -inf hiding a key; causal:
// key t is visible to query s when t <= s. Returns [S, Hq * D] f32; a query that sees no key gets NaN.
Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask,
                 double scale, bool causal);

// Attention of a ragged batch through a paged KV cache: the tokens of many sequences in one step, each
// with its own position. q [T, Hq, D]; k, v [T, Hkv, D]; k_pool, v_pool are State tensors
// [blocks * block, Hkv, D]. Token i writes its key and value at pool row slots[i] and attends to keys
// 0 ..= positions[i] of its sequence, key j living at row table[i, j / block] * block + j % block
// (table [T, nblocks] i32: the block table of token i's sequence, padded with any valid block).
// Returns [T, Hq * D]. A window masks the keys before it (they are still gathered).
Tensor PagedAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_pool,
                      const Tensor& v_pool, const Tensor& slots, const Tensor& table, const Tensor& positions,
                      int64_t block, double scale, const AttentionVariant& variant = {});

}  // namespace prism
