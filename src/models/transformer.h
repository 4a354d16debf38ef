// A causal language model's step graph or an encoder's, built by its family (models/families.cpp); synthetic
// weight specs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/formats/model_config.h"
#include "io/formats/sentence_embedding.h"
#include "ir/graph.h"

namespace prism {

// What the builder needs to know of a stored weight: its dtype and shape as stored.
struct WeightSpec {
  DType dtype;
  std::vector<int64_t> shape;
};
// Returns the spec of a weight by its Hugging Face name, or nullopt when the file lacks it.
using WeightLookup = std::function<std::optional<WeightSpec>(const std::string& name)>;

struct LmGraphOptions {
  int64_t max_context = 2048;  // one sequence's context in tokens (unbatched: the KV cache's capacity)
  bool all_logits = false;     // logits for every position (perplexity) or only the last (generation)
  // GPT-2 Conv1D weights are [in, out] in Hugging Face files and [out, in] in GGUF files.
  bool conv1d_transposed = false;
  // > 0: a batched step over a paged KV cache of kv_blocks blocks of kv_block tokens (LmBuilder says
  // what it takes); 0: one sequence with its cache of max_context tokens.
  int64_t kv_block = 0, kv_blocks = 0;
  // An encoder's graph (ModelFamily::encoder): how its token states become the "embedding" output.
  EmbeddingPooling pooling;
  // An encoder's graph over several texts packed into one sequence (LmBuilder says what it takes); false:
  // one text.
  bool encoder_batch = false;
};

// The graph of one step: input "tokens" [seq] (i32), symbol "past" = tokens already in the
// KV cache; output "logits" [1 or seq, vocab] (f32). KV caches are state "k_cache.L"/"v_cache.L".
// Throws prism::Error for an unsupported architecture (listing the supported ones) or a
// weight whose shape disagrees with the config (naming the weight, both shapes). The family's own
// `build` (models/family.h) writes the layers.
Graph BuildCausalLM(const ModelConfig& cfg, const WeightLookup& weights, const LmGraphOptions& opts);
// An encoder's graph (ModelFamily::encoder): input "tokens" [seq] (i32) at positions 0 ..< seq, attending to
// one another both ways; output "embedding" [dim] (f32), pooled as opts.pooling says. Throws prism::Error for
// a causal family (and BuildCausalLM for an encoder), naming the command that runs it.
Graph BuildTextEncoder(const ModelConfig& cfg, const WeightLookup& weights, const LmGraphOptions& opts);

// Specs for a model with every weight present in dtype t (demo graphs, synthetic benchmarks).
WeightLookup SyntheticWeights(const ModelConfig& cfg, DType t);

}  // namespace prism
