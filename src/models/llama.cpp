// The Llama family's decoder (Llama, Mistral, Qwen2, Qwen3 differ only in defaults, biases and q/k
// norms; families.cpp gives each its line): config.json and GGUF readers, GGUF names, the graph.
#include "models/llama.h"

#include <cmath>

#include "ir/error.h"
#include "models/lm_builder.h"

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
  ReadRope(k, &c);
  ReadTokenIds(k, &c);
  return c;
}

void LlamaFromGguf(const ModelFamily& f, const GgufKeys& k, ModelConfig* c) {
  c->norm_eps = k.Double("attention.layer_norm_rms_epsilon", 1e-6);
  c->rope_theta = k.Double("rope.freq_base", 10000);
  // llama.cpp's converter permutes Llama and Mistral Q/K rows to the interleaved rope layout; Qwen keeps
  // the half-split one.
  c->rope_interleaved = f.name == "llama" || f.name == "mistral";
  c->attention_bias = f.attention_bias || k.HasTensor("blk.0.attn_q.bias");
  c->qk_norm = k.HasTensor("blk.0.attn_q_norm.weight");
  const auto& meta = k.file().Metadata();
  auto scaling = meta.find(f.name + ".rope.scaling.type");
  if (scaling != meta.end() && *scaling != "none")
    throw Error(k.file().Source() + ": rope scaling type " + scaling->dump() + " is not supported");
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
                                    {"ffn_down.weight", "mlp.down_proj.weight"}}};

namespace {

Tensor LlamaLayer(LmBuilder& b, int64_t l, Tensor h, const Tensor& inv_freq) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, hd = cfg.head_dim, nh = cfg.num_heads, nkv = cfg.num_kv_heads;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  Expr seq = h.dim(0);
  Tensor x = RmsNorm(h, b.W(p + "input_layernorm.weight", {d}), cfg.norm_eps);
  const bool bias = cfg.attention_bias;
  Tensor q = b.Proj(x, p + "self_attn.q_proj", nh * hd, d, bias).reshape({seq, Expr(nh), Expr(hd)});
  Tensor k = b.Proj(x, p + "self_attn.k_proj", nkv * hd, d, bias).reshape({seq, Expr(nkv), Expr(hd)});
  Tensor v = b.Proj(x, p + "self_attn.v_proj", nkv * hd, d, bias).reshape({seq, Expr(nkv), Expr(hd)});
  if (cfg.qk_norm) {
    q = RmsNorm(q, b.W(p + "self_attn.q_norm.weight", {hd}), cfg.norm_eps);
    k = RmsNorm(k, b.W(p + "self_attn.k_norm.weight", {hd}), cfg.norm_eps);
  }
  RopeStyle style = cfg.rope_interleaved ? RopeStyle::Interleaved : RopeStyle::HalfSplit;
  q = Rope(q, b.positions(), inv_freq, style);
  k = Rope(k, b.positions(), inv_freq, style);
  Tensor a = b.Attention(q, k, v, l, 1.0 / std::sqrt((double)hd));
  h = h + b.Proj(a, p + "self_attn.o_proj", d, nh * hd, false);
  x = RmsNorm(h, b.W(p + "post_attention_layernorm.weight", {d}), cfg.norm_eps);
  const int64_t f = cfg.intermediate_size;
  Tensor gate = b.Proj(x, p + "mlp.gate_proj", f, d, false), up = b.Proj(x, p + "mlp.up_proj", f, d, false);
  return h + b.Proj(b.Activation(gate) * up, p + "mlp.down_proj", d, f, false);
}

}  // namespace

void BuildLlama(LmBuilder& b) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, vocab = cfg.vocab_size;
  Tensor emb = b.W("model.embed_tokens.weight", {vocab, d});
  Tensor h = Embedding(emb, b.tokens()).cast(DType::F32);  // activations stay f32 whatever the weights' dtype
  RopeScaling rs{cfg.rope_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor,
                 (double)cfg.rope_original_max_position};
  Tensor inv_freq = RopeInvFreq(&b.graph(), cfg.head_dim, cfg.rope_theta, rs);
  // llama.cpp stores Llama 3 frequency scaling as per-frequency divisors in rope_freqs.weight.
  if (b.Has("rope_freqs.weight")) inv_freq = inv_freq / b.W("rope_freqs.weight", {cfg.head_dim / 2});
  for (int64_t l = 0; l < cfg.num_layers; ++l) h = LlamaLayer(b, l, h, inv_freq);
  h = RmsNorm(b.LastOrAll(h), b.W("model.norm.weight", {d}), cfg.norm_eps);
  const bool tied = cfg.tie_word_embeddings || !b.Has("lm_head.weight");
  b.Logits(Linear(h, tied ? emb : b.W("lm_head.weight", {vocab, d})));
}

}  // namespace prism
