// Phi-3 and Phi-3.5 (mini, medium): fused qkv and gate-up weights, LongRoPE, a sliding window on every
// layer. config.json and GGUF readers and GGUF names; the graph is the Llama decoder's.
#include "models/phi3.h"

#include "ir/error.h"
#include "models/llama.h"

namespace prism {

ModelConfig Phi3FromHf(const ModelFamily& f, const JsonKeys& k) {
  ModelConfig c = LlamaFromHf(f, k);  // sizes, heads, norms, rope (LongRoPE included), token ids
  const nlohmann::json* params = k.Find("rope_parameters");
  const double partial = k.Double(
      "partial_rotary_factor",
      params && params->is_object() ? JsonKeys(*params, k.source()).Double("partial_rotary_factor", 1) : 1);
  if (partial != 1)
    throw Error(k.source() + ": partial_rotary_factor " + std::to_string(partial) +
                " is not supported (Phi-4-mini)");
  c.sliding_window = k.Int("sliding_window", 0);
  return c;
}

void Phi3FromGguf(const ModelFamily& f, const GgufKeys& k, ModelConfig* c) {
  c->norm_eps = k.Double("attention.layer_norm_rms_epsilon", 1e-5);
  c->rope_theta = k.Double("rope.freq_base", 10000);
  c->rope_interleaved = false;  // the converter keeps the half-split (NeoX) layout
  c->sliding_window = k.OptInt("attention.sliding_window").value_or(0);
  if (k.HasTensor("rope_factors_short.weight") != k.HasTensor("rope_factors_long.weight"))
    throw Error(k.file().Source() +
                ": LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight");
  if (k.HasTensor("rope_factors_short.weight")) {
    c->rope_original_max_position =
        k.OptInt("rope.scaling.original_context_length").value_or(c->max_position);
    c->rope_attention_factor = k.Double("rope.scaling.attn_factor", 1);
  }
  (void)f;
}

const GgufNames kPhi3GgufNames = {{{"token_embd.weight", "model.embed_tokens.weight"},
                                   {"output_norm.weight", "model.norm.weight"},
                                   {"output.weight", "lm_head.weight"}},
                                  "model.layers.",
                                  {{"attn_norm.weight", "input_layernorm.weight"},
                                   {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
                                   {"attn_output.weight", "self_attn.o_proj.weight"},
                                   {"ffn_norm.weight", "post_attention_layernorm.weight"},
                                   {"ffn_up.weight", "mlp.gate_up_proj.weight"},
                                   {"ffn_down.weight", "mlp.down_proj.weight"}}};

}  // namespace prism
