// What every family's graph is built with: its weights by name (shape-checked against the config), the
// step's inputs ("tokens", positions from "past"), the KV cache, attention, and the logits output.
//
// An encoder's graph (encoder = true) has input "tokens" [seq] at positions 0 ..< seq, no cache, attention
// both ways, and ends in SentenceEmbedding. Packed (LmGraphOptions::encoder_batch), the tokens are those of
// several texts one after another, with inputs "positions" and "segments" [seq] i32 (each token's position in
// its text, and its text's index: 0, 0, .., 1, ..), and "firsts" and "lasts" [texts] i32 (each text's first
// and last token); a token attends only to its own text's, and the output "embedding" is [texts, dim].
//
// A batched step (LmGraphOptions::kv_block > 0) runs the tokens of many sequences: inputs "tokens",
// "positions", "slots" (each token's KV pool row) [seq] i32, "block_table" [seq, blocks] i32 (each token's
// sequence's blocks) and "logit_rows" [rows] i32 (the tokens whose logits come out, [rows, vocab]).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "frontend/nn.h"
#include "models/transformer.h"

namespace prism {

class LmBuilder {
 public:
  LmBuilder(Graph* g, const ModelConfig& cfg, const WeightLookup& w, const LmGraphOptions& o,
            bool encoder = false);
  Graph& graph() { return *g_; }
  const ModelConfig& cfg() const { return cfg_; }
  const LmGraphOptions& opts() const { return opts_; }
  const Tensor& tokens() const { return tokens_; }  // [seq] i32
  const Tensor& positions() const { return pos_; }  // past + [0, seq), or the "positions" input
  bool paged() const { return opts_.kv_block > 0; }

  // A required weight with the expected shape (a one-line error naming it and both shapes otherwise).
  Tensor W(const std::string& name, std::vector<int64_t> shape);
  bool Has(const std::string& name) const { return lookup_(name).has_value(); }
  std::optional<WeightSpec> Spec(const std::string& name) const { return lookup_(name); }
  // x · Wᵀ (+ bias) with weight name + ".weight" [out, in] (and name + ".bias" [out]).
  Tensor Proj(const Tensor& x, const std::string& name, int64_t out, int64_t in, bool bias);
  Tensor Activation(const Tensor& x);  // cfg().hidden_act
  // RMS norm of x over its last axis with weight `name` [dim] (plus the config's norm_weight_offset).
  Tensor Norm(const Tensor& x, const std::string& name, int64_t dim);
  // Rope frequencies [head_dim / 2]: windowed layers with a local base (Gemma 3) get it unscaled; all others
  // the config's base and scaling (llama3, linear, LongRoPE by max_context) and llama.cpp's
  // rope_freqs.weight divisors where the file has them.
  Tensor RopeFreqs(bool windowed);
  // Rope on q or k [seq, heads, head_dim] at the step's positions, in the config's layout (times LongRoPE's
  // attention factor).
  Tensor Rope(const Tensor& x, const Tensor& inv_freq);
  bool Windowed(int64_t l) const;  // layer l has sliding-window attention
  // Layer l's attention variant: its window, the config's score soft-capping.
  AttentionVariant Variant(int64_t l) const;
  // Layer l's cache of `kind` ("k_cache", "v_cache"): state [max_context, heads, head_dim].
  Tensor KvCache(const std::string& kind, int64_t l, int64_t heads);
  // Layer l's attention (q [seq, Hq, D], k and v [seq, Hkv, D]): causal over its KV cache, or, in an encoder,
  // every token to every other. [seq, Hq * D].
  Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t l, double scale);
  double AttentionScale() const;      // the config's attention_scale, else 1 / sqrt(head_dim)
  Tensor LastOrAll(const Tensor& h);  // the last position only, unless every position's logits are wanted
  void Logits(const Tensor& logits);  // marks the graph's output "logits" (f32), soft-capped if configured
  // An encoder's token states [seq, hidden] pooled (opts().pooling) into the output "embedding" (f32).
  void SentenceEmbedding(const Tensor& states);

 private:
  Graph* g_;
  const ModelConfig& cfg_;
  const WeightLookup& lookup_;
  const LmGraphOptions& opts_;
  bool encoder_;
  // A packed encoder's additive attention mask [seq, seq]: -inf between texts (and, windowed, beyond the
  // window); made once, shared by the layers.
  Tensor SegmentMask(int64_t window);
  Tensor tokens_, pos_, slots_, table_, logit_rows_, segments_, firsts_, lasts_;
  std::map<int64_t, Tensor> segment_masks_;
  Expr past_;
};

}  // namespace prism
