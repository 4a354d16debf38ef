// The Llama family's decoder (Llama, Mistral, Qwen2, Qwen3 differ only in defaults, biases and q/k
// norms; families.cpp gives each its line; Mixtral, Qwen2-MoE and Qwen3-MoE route their MLPs,
// models/moe.cpp): config.json and GGUF readers, GGUF names, the graph, which Gemma and Phi-3 share (their
// sandwich norms, scaled embeddings and fused projections are switched on by their configs and files).
#include "models/llama.h"

#include <cmath>

#include "ir/error.h"
#include "models/lm_builder.h"
#include "models/moe.h"

namespace prism {

ModelConfig LlamaFromHf(const ModelFamily& f, const JsonKeys& k) {
  ModelConfig c;
  c.vocab_size = k.Int("vocab_size");
  c.hidden_size = k.Int("hidden_size");
  c.intermediate_size = k.Int("intermediate_size");
  c.num_layers = k.Int("num_hidden_layers");
  c.num_heads = k.Int("num_attention_heads");
  c.num_kv_heads = k.Int("num_key_value_heads", c.num_heads);
  if (c.num_heads <= 0) throw Error(k.source() + ": 'num_attention_heads' must be positive");
  c.head_dim = k.Int("head_dim", c.hidden_size / c.num_heads);
  c.max_position = k.Int("max_position_embeddings", f.default_max_position);
  c.norm_eps = k.Double("rms_norm_eps", 1e-6);
  c.rope_interleaved = false;  // HF checkpoints use the half-split rope layout
  c.tie_word_embeddings = k.Bool("tie_word_embeddings", false);
  c.attention_bias = f.attention_bias || k.Bool("attention_bias", false);
  c.qk_norm = f.qk_norm;
  c.hidden_act = CheckedActivation(k.String("hidden_act", "silu"), k.source());
  if (f.name == "mistral") c.sliding_window = k.Int("sliding_window", 0);
  ReadRope(k, &c);
  ReadTokenIds(k, &c);
  return c;
}

void LlamaFromGguf(const ModelFamily& f, const GgufKeys& k, ModelConfig* c) {
  c->norm_eps = k.Double("attention.layer_norm_rms_epsilon", 1e-6);
  c->rope_theta = k.Double("rope.freq_base", 10000);
  // llama.cpp's converter permutes Llama and Mistral Q/K rows to the interleaved rope layout; Qwen and Gemma
  // keep the half-split one.
  c->rope_interleaved = f.name == "llama" || f.name == "mistral";
  c->attention_bias = f.attention_bias || k.HasTensor("blk.0.attn_q.bias");
  c->qk_norm = k.HasTensor("blk.0.attn_q_norm.weight");
  const auto& meta = k.file().Metadata();
  auto scaling = meta.find(f.name + ".rope.scaling.type");
  const std::string type =
      scaling != meta.end() && scaling->is_string() ? scaling->get<std::string>() : "none";
  if (type == "linear") {
    c->rope_linear_factor = k.Double("rope.scaling.factor", 1);
    if (c->rope_linear_factor <= 0) throw Error(k.file().Source() + ": rope.scaling.factor must be positive");
  } else if (type != "none") {
    throw Error(k.file().Source() + ": rope scaling type '" + type +
                "' is not supported (supported: linear)");
  }
}

const GgufNames kLlamaGgufNames = {{{"token_embd.weight", "model.embed_tokens.weight"},
                                    {"output_norm.weight", "model.norm.weight"},
                                    {"output.weight", "lm_head.weight"}},
                                   "model.layers.",
                                   {{"attn_norm.weight", "input_layernorm.weight"},
                                    {"attn_q.weight", "self_attn.q_proj.weight"},
                                    {"attn_k.weight", "self_attn.k_proj.weight"},
                                    {"attn_v.weight", "self_attn.v_proj.weight"},
                                    {"attn_output.weight", "self_attn.o_proj.weight"},
                                    {"attn_q.bias", "self_attn.q_proj.bias"},
                                    {"attn_k.bias", "self_attn.k_proj.bias"},
                                    {"attn_v.bias", "self_attn.v_proj.bias"},
                                    {"attn_output.bias", "self_attn.o_proj.bias"},
                                    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
                                    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
                                    {"ffn_norm.weight", "post_attention_layernorm.weight"},
                                    {"ffn_gate.weight", "mlp.gate_proj.weight"},
                                    {"ffn_up.weight", "mlp.up_proj.weight"},
                                    {"ffn_down.weight", "mlp.down_proj.weight"},
                                    // Mixture of experts (Mixtral as "llama", Qwen3-MoE): experts stacked
                                    {"ffn_gate_inp.weight", "mlp.gate.weight"},
                                    {"ffn_gate_exps.weight", "mlp.experts.gate_proj.weight"},
                                    {"ffn_up_exps.weight", "mlp.experts.up_proj.weight"},
                                    {"ffn_down_exps.weight", "mlp.experts.down_proj.weight"},
                                    // Qwen2-MoE's shared expert and its gate
                                    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
                                    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
                                    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
                                    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"}}};

namespace {

// Projects x through `fused` when the file has it (Phi-3's qkv_proj, gate_up_proj: one GEMM whose output
// columns are the parts in order), else through each part's own weight.
std::vector<Tensor> Projections(LmBuilder& b, const Tensor& x, const std::string& fused,
                                const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in,
                                bool bias) {
  std::vector<Tensor> out;
  if (b.Has(fused + ".weight")) {
    int64_t total = 0;
    for (const auto& part : parts) total += part.second;
    Tensor y = b.Proj(x, fused, total, in, false);
    int64_t at = 0;
    for (const auto& part : parts) {
      out.push_back(y.slice(-1, Expr(at), Expr(part.second)));
      at += part.second;
    }
    return out;
  }
  for (const auto& [name, size] : parts) out.push_back(b.Proj(x, name, size, in, bias));
  return out;
}

Tensor LlamaLayer(LmBuilder& b, int64_t l, Tensor h, const Tensor& inv_freq) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, hd = cfg.head_dim, nh = cfg.num_heads, nkv = cfg.num_kv_heads;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  Expr seq = h.dim(0);
  Tensor x = b.Norm(h, p + "input_layernorm.weight", d);
  auto qkv = Projections(b, x, p + "self_attn.qkv_proj",
                         {{p + "self_attn.q_proj", nh * hd},
                          {p + "self_attn.k_proj", nkv * hd},
                          {p + "self_attn.v_proj", nkv * hd}},
                         d, cfg.attention_bias);
  Tensor q = qkv[0].reshape({seq, Expr(nh), Expr(hd)});
  Tensor k = qkv[1].reshape({seq, Expr(nkv), Expr(hd)});
  Tensor v = qkv[2].reshape({seq, Expr(nkv), Expr(hd)});
  if (cfg.qk_norm) {
    q = b.Norm(q, p + "self_attn.q_norm.weight", hd);
    k = b.Norm(k, p + "self_attn.k_norm.weight", hd);
  }
  q = b.Rope(q, inv_freq);
  k = b.Rope(k, inv_freq);
  Tensor a = b.Proj(b.Attention(q, k, v, l, b.AttentionScale()), p + "self_attn.o_proj", d, nh * hd, false);
  // Gemma 2 and 3 norm each block's output as well as its input (their pre-MLP norm has its own name).
  if (cfg.sandwich_norms) a = b.Norm(a, p + "post_attention_layernorm.weight", d);
  h = h + a;
  x = b.Norm(
      h, p + (cfg.sandwich_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"),
      d);
  const int64_t f = cfg.intermediate_size;
  Tensor m;
  if (RoutedLayer(cfg, l)) {
    m = RoutedMlp(b, x, l);
  } else {
    auto gate_up = Projections(b, x, p + "mlp.gate_up_proj",
                               {{p + "mlp.gate_proj", f}, {p + "mlp.up_proj", f}}, d, false);
    m = b.Proj(b.Activation(gate_up[0]) * gate_up[1], p + "mlp.down_proj", d, f, false);
  }
  if (cfg.sandwich_norms) m = b.Norm(m, p + "post_feedforward_layernorm.weight", d);
  return h + m;
}

}  // namespace

void BuildLlama(LmBuilder& b) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, vocab = cfg.vocab_size;
  Tensor emb = b.W("model.embed_tokens.weight", {vocab, d});
  Tensor h = Embedding(emb, b.tokens()).cast(DType::F32);  // activations stay f32 whatever the weights' dtype
  if (cfg.embed_scale != 1) h = h * cfg.embed_scale;
  // One frequency table for the global layers and one for the windowed ones (they differ in Gemma 3).
  Tensor global_freq = b.RopeFreqs(false),
         local_freq = cfg.rope_local_theta > 0 ? b.RopeFreqs(true) : global_freq;
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    h = LlamaLayer(b, l, h, b.Windowed(l) ? local_freq : global_freq);
  h = b.Norm(b.LastOrAll(h), "model.norm.weight", d);
  const bool tied = cfg.tie_word_embeddings || !b.Has("lm_head.weight");
  b.Logits(Linear(h, tied ? emb : b.W("lm_head.weight", {vocab, d})));
}

}  // namespace prism
