// A causal language model's step graph or an encoder's, built by its family (models/families.cpp); synthetic
// weight specs.
#include "models/transformer.h"

#include <cstring>

#include "ir/error.h"
#include "models/family.h"
#include "models/lm_builder.h"

namespace prism {

namespace {

Graph Build(const ModelConfig& cfg, const WeightLookup& weights, const LmGraphOptions& opts, bool encoder) {
  const ModelFamily& family = FamilyNamed(cfg.architecture, "model config", "architecture");
  if (family.encoder && !encoder)
    throw Error("model '" + cfg.architecture +
                "' is an encoder: it makes embeddings (prism embed, /v1/embeddings), not text");
  if (!family.encoder && encoder)
    throw Error("model '" + cfg.architecture + "' is a causal language model, not an embedding encoder");
  if (cfg.hidden_size <= 0 || cfg.num_heads <= 0 || cfg.head_dim <= 0 || cfg.num_layers < 0 ||
      cfg.vocab_size <= 0)
    throw Error("model config: sizes must be positive (hidden " + std::to_string(cfg.hidden_size) +
                ", heads " + std::to_string(cfg.num_heads) + ", head_dim " + std::to_string(cfg.head_dim) +
                ", vocab " + std::to_string(cfg.vocab_size) + ")");
  Graph g;
  LmBuilder b(&g, cfg, weights, opts, encoder);
  family.build(b);
  return g;
}

}  // namespace

Graph BuildCausalLM(const ModelConfig& cfg, const WeightLookup& weights, const LmGraphOptions& opts) {
  return Build(cfg, weights, opts, false);
}

Graph BuildTextEncoder(const ModelConfig& cfg, const WeightLookup& weights, const LmGraphOptions& opts) {
  return Build(cfg, weights, opts, true);
}

WeightLookup SyntheticWeights(const ModelConfig& cfg, DType t) {
  return [cfg, t](const std::string& name) -> std::optional<WeightSpec> {
    const int64_t d = cfg.hidden_size, hd = cfg.head_dim, f = cfg.intermediate_size;
    auto ends = [&](const char* s) {
      return name.size() >= strlen(s) && name.compare(name.size() - strlen(s), strlen(s), s) == 0;
    };
    DType norm = IsQuantized(t) ? DType::F32 : t;  // norms and biases stay unquantized
    if (name == "lm_head.weight")
      return cfg.tie_word_embeddings ? std::nullopt : std::optional<WeightSpec>({t, {cfg.vocab_size, d}});
    // Separate projections (Phi-3's fused qkv_proj and gate_up_proj would end like k_proj and up_proj).
    if (ends("qkv_proj.weight") || ends("gate_up_proj.weight")) return std::nullopt;
    if (ends("embed_tokens.weight") || ends("wte.weight")) return WeightSpec{t, {cfg.vocab_size, d}};
    if (ends("wpe.weight")) return WeightSpec{t, {cfg.max_position, d}};
    if (ends("q_proj.weight")) return WeightSpec{t, {cfg.num_heads * hd, d}};
    if (ends("k_proj.weight") || ends("v_proj.weight")) return WeightSpec{t, {cfg.num_kv_heads * hd, d}};
    if (ends("q_proj.bias")) return WeightSpec{norm, {cfg.num_heads * hd}};
    if (ends("k_proj.bias") || ends("v_proj.bias")) return WeightSpec{norm, {cfg.num_kv_heads * hd}};
    if (ends("o_proj.weight")) return WeightSpec{t, {d, cfg.num_heads * hd}};
    if (ends("gate_proj.weight") || ends("up_proj.weight")) return WeightSpec{t, {f, d}};
    if (ends("down_proj.weight")) return WeightSpec{t, {d, f}};
    if (ends("q_norm.weight") || ends("k_norm.weight")) return WeightSpec{norm, {hd}};
    if (ends("c_attn.weight")) return WeightSpec{t, {d, 3 * d}};
    if (ends("c_attn.bias")) return WeightSpec{norm, {3 * d}};
    if (ends("attn.c_proj.weight")) return WeightSpec{t, {d, d}};
    if (ends("c_fc.weight")) return WeightSpec{t, {d, f}};
    if (ends("c_fc.bias")) return WeightSpec{norm, {f}};
    if (ends("mlp.c_proj.weight")) return WeightSpec{t, {f, d}};
    if (ends("norm.weight") || ends("norm.bias") || name.find(".ln_") != std::string::npos ||
        ends("ln_f.weight") || ends("ln_f.bias") || ends("c_proj.bias"))
      return WeightSpec{norm, {d}};  // layer norms and the remaining [hidden] biases
    return std::nullopt;             // e.g. rope_freqs.weight: absent, as in a Hugging Face model
  };
}

}  // namespace prism
