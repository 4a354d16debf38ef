// ModelConfig: the hyperparameters of one transformer (a decoder, or a BERT-style encoder), from config.json,
// GGUF or llama2.c (models/family.h reads the first two, io/formats/llama2c.h the last).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace prism {

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3", "mistral", "gpt2" (lower-case family)
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0,
          num_kv_heads = 0, head_dim = 0, max_position = 0;
  double norm_eps = 1e-5;  // rms_norm_eps or layer_norm_epsilon
  double rope_theta = 10000;
  // true: rope rotates pairs (2i, 2i+1) (Meta/llama2.c/GGUF-llama layout);
  // false: pairs (i, i + head_dim/2) (Hugging Face layout).
  bool rope_interleaved = false;
  // llama3 rope scaling (rope_scaling.rope_type == "llama3"); factor 0 = none.
  double rope_factor = 0, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int64_t rope_original_max_position = 8192;
  // Linear rope scaling (Gemma 3's global layers): positions divided by this; 1 = none.
  double rope_linear_factor = 1;
  // LongRoPE (Phi-3 "longrope"/"su"): per-frequency divisors, the short ones for contexts up to
  // rope_original_max_position and the long ones past it; rope_attention_factor multiplies cos and sin.
  std::vector<double> rope_short_factor, rope_long_factor;
  double rope_attention_factor = 1;
  // Sliding-window attention: a windowed layer's query sees itself and the window - 1 keys before it.
  int64_t sliding_window = 0;                  // 0: none
  std::vector<bool> sliding_layers;            // which layers are windowed (empty: all of them)
  double rope_local_theta = 0;                 // rope base of the windowed layers (Gemma 3); 0: rope_theta
  double attn_softcap = 0, final_softcap = 0;  // cap * tanh(x / cap) on scores / logits (Gemma 2); 0: none
  double attention_scale = 0;                  // scores = q · k * this; 0: 1 / sqrt(head_dim)
  double embed_scale = 1;                      // token embeddings times this (Gemma: sqrt(hidden_size))
  double norm_weight_offset = 0;  // RMS norms scale by offset + weight (Gemma's HF files store w - 1)
  bool sandwich_norms = false;    // norms after attention and after the MLP as well (Gemma 2, 3)
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have biases (Qwen2)
  bool qk_norm = false;         // per-head RMS norm on q and k (Qwen3)
  // Mixture of experts (Mixtral, Qwen3-MoE): each token's MLP is the router's top experts_per_token of
  // num_experts expert MLPs (of moe_intermediate_size), weighted by the router's softmax (renormalised over
  // the chosen ones when norm_topk_prob). 0 experts: a dense MLP. moe_layers: which layers route (empty:
  // all of them; the others have a dense MLP of intermediate_size).
  int64_t num_experts = 0, experts_per_token = 0, moe_intermediate_size = 0;
  int64_t shared_expert_size = 0;  // Qwen2-MoE: a dense MLP every token takes, sigmoid-gated (0: none)
  bool norm_topk_prob = true;
  std::vector<bool> moe_layers;
  int64_t type_vocab_size = 0;  // encoders (BERT): rows of the token-type table (every token is type 0)
  // "silu"; "gelu_new" / "gelu_pytorch_tanh" (tanh form); "gelu" (erf form).
  std::string hidden_act = "silu";
  int64_t bos_token_id = -1, eos_token_id = -1;  // -1: none; eos_token_id = eos_token_ids[0]
  std::vector<int64_t> eos_token_ids;            // every end-of-sequence id
};

// Checks the invariants every loader relies on (positive sizes, heads dividing evenly, an even head_dim
// where rope rotates pairs: `rotary`); throws "<source>: <problem>".
void ValidateModelConfig(const ModelConfig& config, const std::string& source, bool rotary);

}  // namespace prism
