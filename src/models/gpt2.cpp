// GPT-2: learned positions, LayerNorm with biases, Conv1D weights, a fused qkv projection.
#include "models/gpt2.h"

#include <cmath>

#include "ir/error.h"
#include "models/lm_builder.h"

namespace prism {

ModelConfig Gpt2FromHf(const ModelFamily& /*f*/, const JsonKeys& k) {
  ModelConfig c;
  c.vocab_size = k.Int("vocab_size", 50257);
  c.hidden_size = k.Int("n_embd", 768);
  c.num_layers = k.Int("n_layer", 12);
  c.num_heads = k.Int("n_head", 12);
  c.num_kv_heads = c.num_heads;
  if (c.num_heads <= 0) throw Error(k.source() + ": 'n_head' must be positive");
  c.head_dim = c.hidden_size / c.num_heads;
  c.intermediate_size = k.Int("n_inner", 4 * c.hidden_size);
  c.max_position = k.Int("n_positions", 1024);
  c.norm_eps = k.Double("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = k.Bool("tie_word_embeddings", true);
  c.attention_bias = true;
  c.hidden_act = CheckedActivation(k.String("activation_function", "gelu_new"), k.source());
  ReadTokenIds(k, &c);
  if (c.bos_token_id < 0) c.bos_token_id = 50256;
  if (c.eos_token_ids.empty()) {
    c.eos_token_ids = {50256};
    c.eos_token_id = 50256;
  }
  return c;
}

void Gpt2FromGguf(const ModelFamily& /*f*/, const GgufKeys& k, ModelConfig* c) {
  c->norm_eps = k.Double("attention.layer_norm_epsilon", 1e-5);
  c->hidden_act = "gelu_new";
  c->attention_bias = true;
}

const GgufNames kGpt2GgufNames = {{{"token_embd.weight", "transformer.wte.weight"},
                                   {"position_embd.weight", "transformer.wpe.weight"},
                                   {"output_norm.weight", "transformer.ln_f.weight"},
                                   {"output_norm.bias", "transformer.ln_f.bias"},
                                   {"output.weight", "lm_head.weight"}},
                                  "transformer.h.",
                                  {{"attn_norm.weight", "ln_1.weight"},
                                   {"attn_norm.bias", "ln_1.bias"},
                                   {"attn_qkv.weight", "attn.c_attn.weight"},
                                   {"attn_qkv.bias", "attn.c_attn.bias"},
                                   {"attn_output.weight", "attn.c_proj.weight"},
                                   {"attn_output.bias", "attn.c_proj.bias"},
                                   {"ffn_norm.weight", "ln_2.weight"},
                                   {"ffn_norm.bias", "ln_2.bias"},
                                   {"ffn_up.weight", "mlp.c_fc.weight"},
                                   {"ffn_up.bias", "mlp.c_fc.bias"},
                                   {"ffn_down.weight", "mlp.c_proj.weight"},
                                   {"ffn_down.bias", "mlp.c_proj.bias"}}};

namespace {

// Conv1D: y = x W + b with W stored [in, out] (or [out, in] when transposed on disk, as in GGUF).
Tensor Conv1D(LmBuilder& b, const Tensor& x, const std::string& name, int64_t in, int64_t out) {
  Tensor y = b.opts().conv1d_transposed ? Linear(x, b.W(name + ".weight", {out, in}))
                                        : Matmul(x, b.W(name + ".weight", {in, out}));
  return y + b.W(name + ".bias", {out});
}

Tensor Gpt2Layer(LmBuilder& b, const std::string& prefix, int64_t l, Tensor h) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, hd = cfg.head_dim, nh = cfg.num_heads;
  const std::string p = prefix + "h." + std::to_string(l) + ".";
  Expr seq = h.dim(0);
  Tensor x = LayerNorm(h, b.W(p + "ln_1.weight", {d}), b.W(p + "ln_1.bias", {d}), cfg.norm_eps);
  Tensor qkv = Conv1D(b, x, p + "attn.c_attn", d, 3 * d);
  Tensor q = qkv.slice(1, 0, Expr(d)).reshape({seq, Expr(nh), Expr(hd)});
  Tensor k = qkv.slice(1, Expr(d), Expr(d)).reshape({seq, Expr(nh), Expr(hd)});
  Tensor v = qkv.slice(1, Expr(2 * d), Expr(d)).reshape({seq, Expr(nh), Expr(hd)});
  Tensor a = b.Attention(q, k, v, l, 1.0 / std::sqrt((double)hd));
  h = h + Conv1D(b, a, p + "attn.c_proj", d, d);
  x = LayerNorm(h, b.W(p + "ln_2.weight", {d}), b.W(p + "ln_2.bias", {d}), cfg.norm_eps);
  const int64_t f = cfg.intermediate_size;
  return h + Conv1D(b, b.Activation(Conv1D(b, x, p + "mlp.c_fc", d, f)), p + "mlp.c_proj", f, d);
}

}  // namespace

void BuildGpt2(LmBuilder& b) {
  const ModelConfig& cfg = b.cfg();
  if (b.opts().max_context > cfg.max_position)
    throw Error("GPT-2 has learned positions only up to " + std::to_string(cfg.max_position) +
                ", not a context of " + std::to_string(b.opts().max_context));
  const int64_t d = cfg.hidden_size, vocab = cfg.vocab_size;
  const std::string prefix = b.Has("transformer.wte.weight") ? "transformer." : "";
  Tensor wte = b.W(prefix + "wte.weight", {vocab, d});
  Tensor h = Embedding(wte, b.tokens()).cast(DType::F32) +
             Embedding(b.W(prefix + "wpe.weight", {cfg.max_position, d}), b.positions()).cast(DType::F32);
  for (int64_t l = 0; l < cfg.num_layers; ++l) h = Gpt2Layer(b, prefix, l, h);
  h = LayerNorm(b.LastOrAll(h), b.W(prefix + "ln_f.weight", {d}), b.W(prefix + "ln_f.bias", {d}),
                cfg.norm_eps);
  b.Logits(Linear(h, b.Has("lm_head.weight") ? b.W("lm_head.weight", {vocab, d}) : wte));
}

}  // namespace prism
