// Gemma, Gemma 2 and Gemma 3 (text): config.json and GGUF readers and GGUF names; their graph is the Llama
// decoder's with scaled embeddings, (1 + w) norms, sandwich norms, soft-capping and sliding windows on.
#include "models/gemma.h"

#include <cmath>

#include "ir/error.h"
#include "models/llama.h"

namespace prism {
using nlohmann::json;

namespace {

// A soft-capping key: absent means the family's default, null means none.
double Softcap(const JsonKeys& k, const std::string& key, double fallback) {
  if (!k.object().contains(key)) return fallback;
  return k.Double(key, 0);
}

// Which layers are windowed: config.json's layer_types, else every `pattern`-th layer is global.
std::vector<bool> SlidingLayers(const JsonKeys& k, int64_t layers, int64_t pattern) {
  std::vector<bool> sliding;
  if (const json* types = k.Find("layer_types")) {
    if (!types->is_array() || (int64_t)types->size() != layers)
      throw Error(k.source() + ": 'layer_types' must list " + std::to_string(layers) + " layer types");
    for (const json& t : *types) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s != "sliding_attention" && s != "full_attention")
        throw Error(k.source() + ": layer type " + t.dump() +
                    " is not supported (sliding_attention, full_attention)");
      sliding.push_back(s == "sliding_attention");
    }
    return sliding;
  }
  if (pattern < 1) throw Error(k.source() + ": 'sliding_window_pattern' must be positive");
  for (int64_t l = 0; l < layers; ++l) sliding.push_back((l + 1) % pattern != 0);
  return sliding;
}

}  // namespace

ModelConfig GemmaFromHf(const ModelFamily& f, const JsonKeys& k) {
  if (k.Has("text_config"))
    throw Error(k.source() +
                ": a multimodal Gemma 3 checkpoint (text_config) is not supported; use its text-only "
                "gemma3_text form");
  if (k.Bool("use_bidirectional_attention", false))
    throw Error(k.source() + ": bidirectional Gemma (embedding models) is not supported");
  const bool gemma1 = f.name == "gemma", gemma3 = f.name == "gemma3";
  // Gemma 3 keeps its rope bases per layer type; ReadRope (in LlamaFromHf) reads the flat layouts.
  const json* params = k.Find("rope_parameters");
  const bool per_type = params && params->is_object() && params->contains("full_attention");
  ModelConfig c;
  if (per_type) {
    json flat = k.object();
    flat.erase("rope_parameters");
    c = LlamaFromHf(f, JsonKeys(flat, k.source()));
    const json full = params->value("full_attention", json::object()),
               sliding = params->value("sliding_attention", json::object());
    if (!full.is_object() || !sliding.is_object())
      throw Error(k.source() + ": 'rope_parameters' per layer type must hold objects");
    const JsonKeys global(full, k.source()), local(sliding, k.source());
    c.rope_theta = global.Double("rope_theta", 1e6);
    ReadRopeScaling(global, k, &c);
    c.rope_local_theta = local.Double("rope_theta", 10000);
    if (local.String("rope_type", "default") != "default")
      throw Error(k.source() + ": rope scaling on Gemma 3's sliding layers is not supported");
  } else {
    c = LlamaFromHf(f, k);
    if (gemma3) {
      c.rope_theta = k.Double("rope_theta", 1e6);
      c.rope_local_theta = k.Double("rope_local_base_freq", 10000);
    }
  }
  // Gemma 1's "gelu" means the tanh form, as transformers reads it.
  const std::string act = k.String(gemma1 ? "hidden_act" : "hidden_activation", "gelu_pytorch_tanh");
  c.hidden_act = CheckedActivation(act == "gelu" ? "gelu_pytorch_tanh" : act, k.source());
  c.tie_word_embeddings = k.Bool("tie_word_embeddings", true);
  c.embed_scale = std::sqrt((double)c.hidden_size);
  c.norm_weight_offset = 1;  // HF Gemma norms scale by 1 + weight
  if (gemma1) return c;
  c.sandwich_norms = true;
  c.attention_scale = 1.0 / std::sqrt(k.Double("query_pre_attn_scalar", 256));
  c.attn_softcap = Softcap(k, "attn_logit_softcapping", gemma3 ? 0 : 50);
  c.final_softcap = Softcap(k, "final_logit_softcapping", gemma3 ? 0 : 30);
  c.sliding_window = k.Int("sliding_window", 4096);
  c.sliding_layers = SlidingLayers(k, c.num_layers, gemma3 ? k.Int("sliding_window_pattern", 6) : 2);
  return c;
}

void GemmaFromGguf(const ModelFamily& f, const GgufKeys& k, ModelConfig* c) {
  LlamaFromGguf(f, k, c);  // norms, rope base and linear scaling, q/k norms; Gemma keeps half-split rope
  c->hidden_act = "gelu_pytorch_tanh";
  c->embed_scale = std::sqrt((double)c->hidden_size);
  c->norm_weight_offset = 0;  // the converter stores 1 + weight
  if (f.name == "gemma") return;
  c->sandwich_norms = true;
  // As llama.cpp: queries scale by 1/sqrt(head_dim), except in the 27B models (46 and 62 layers), whose
  // query_pre_attn_scalar is hidden_size / heads.
  const bool big = c->num_layers == (f.name == "gemma3" ? 62 : 46);
  c->attention_scale =
      1.0 / std::sqrt(big ? (double)c->hidden_size / (double)c->num_heads : (double)c->head_dim);
  c->attn_softcap = k.Double("attn_logit_softcapping", 0);
  c->final_softcap = k.Double("final_logit_softcapping", 0);
  c->sliding_window = k.OptInt("attention.sliding_window").value_or(0);
  // attention.sliding_window_pattern: every n-th layer global, or a flag per layer; else llama.cpp's fixed
  // patterns (Gemma 2 alternates, Gemma 3 has five windowed layers to each global one).
  const auto& meta = k.file().Metadata();
  auto pattern = meta.find(f.name + ".attention.sliding_window_pattern");
  if (pattern != meta.end() && pattern->is_array()) {
    if ((int64_t)pattern->size() != c->num_layers)
      throw Error(k.file().Source() + ": attention.sliding_window_pattern has " +
                  std::to_string(pattern->size()) + " entries for " + std::to_string(c->num_layers) +
                  " layers");
    for (const json& x : *pattern) c->sliding_layers.push_back(x.is_boolean() ? x.get<bool>() : x != 0);
  } else {
    const int64_t every = k.OptInt("attention.sliding_window_pattern").value_or(f.name == "gemma3" ? 6 : 2);
    if (every < 1) throw Error(k.file().Source() + ": attention.sliding_window_pattern must be positive");
    for (int64_t l = 0; l < c->num_layers; ++l) c->sliding_layers.push_back((l + 1) % every != 0);
  }
  if (f.name == "gemma3") c->rope_local_theta = 10000;  // llama.cpp's fixed base for the sliding layers
}

const GgufNames kGemmaGgufNames = {{{"token_embd.weight", "model.embed_tokens.weight"},
                                    {"output_norm.weight", "model.norm.weight"},
                                    {"output.weight", "lm_head.weight"}},
                                   "model.layers.",
                                   {{"attn_norm.weight", "input_layernorm.weight"},
                                    {"attn_q.weight", "self_attn.q_proj.weight"},
                                    {"attn_k.weight", "self_attn.k_proj.weight"},
                                    {"attn_v.weight", "self_attn.v_proj.weight"},
                                    {"attn_output.weight", "self_attn.o_proj.weight"},
                                    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
                                    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
                                    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
                                    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
                                    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
                                    {"ffn_gate.weight", "mlp.gate_proj.weight"},
                                    {"ffn_up.weight", "mlp.up_proj.weight"},
                                    {"ffn_down.weight", "mlp.down_proj.weight"}}};

}  // namespace prism
