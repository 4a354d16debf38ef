// Loader for llama2.c checkpoints (the .bin files of karpathy/llama2.c's run.c).
#pragma once

#include <memory>
#include <string>

#include "io/formats/model_config.h"
#include "io/formats/weights.h"

namespace prism {

// Reads the 7-int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len; negative vocab_size = separate classifier) and maps the float32 tensors that
// follow, in run.c's order. The file size must match the header exactly.
// Tensors are exposed under Hugging Face Llama names with [out_features, in_features]
// shapes (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...,
// model.norm.weight, lm_head.weight); per-layer tensors point into the stacked arrays, and
// lm_head.weight aliases the embedding when the classifier is shared. The precomputed
// freq_cis tables are skipped (rope is recomputed from the config).
// Q/K rows are in Meta's layout (rope pairs 2i, 2i+1): *config gets rope_interleaved = true,
// norm_eps 1e-5, rope_theta 10000, bos 1, eos 2. `config` may be nullptr.
std::unique_ptr<WeightStore> LoadLlama2c(const std::string& path, ModelConfig* config);

}  // namespace prism
