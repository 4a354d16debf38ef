// BERT: word + position + token-type embeddings, post-norm layers of biased projections, erf GELU.
#include "models/bert.h"

#include <cmath>

#include "ir/error.h"
#include "models/lm_builder.h"

namespace prism {

ModelConfig BertFromHf(const ModelFamily& /*f*/, const JsonKeys& k) {
  ModelConfig c;
  c.vocab_size = k.Int("vocab_size");
  c.hidden_size = k.Int("hidden_size");
  c.num_layers = k.Int("num_hidden_layers");
  c.num_heads = k.Int("num_attention_heads");
  c.num_kv_heads = c.num_heads;
  if (c.num_heads <= 0) throw Error(k.source() + ": 'num_attention_heads' must be positive");
  c.head_dim = c.hidden_size / c.num_heads;
  c.intermediate_size = k.Int("intermediate_size");
  c.max_position = k.Int("max_position_embeddings", 512);
  c.type_vocab_size = k.Int("type_vocab_size", 2);
  c.norm_eps = k.Double("layer_norm_eps", 1e-12);
  c.attention_bias = true;
  c.hidden_act = CheckedActivation(k.String("hidden_act", "gelu"), k.source());
  const std::string positions = k.String("position_embedding_type", "absolute");
  if (positions != "absolute")
    throw Error(k.source() + ": position_embedding_type '" + positions +
                "' is not supported (supported: absolute)");
  if (c.type_vocab_size < 1) throw Error(k.source() + ": 'type_vocab_size' must be at least 1");
  return c;
}

void BertFromGguf(const ModelFamily& /*f*/, const GgufKeys& k, ModelConfig* c) {
  c->norm_eps = k.Double("attention.layer_norm_epsilon", 1e-12);
  c->hidden_act = "gelu";
  c->attention_bias = true;
  c->type_vocab_size = 1;
  for (const GgufTensorInfo& t : k.file().TensorInfos())
    if (t.name == "token_types.weight" && t.shape.size() == 2) c->type_vocab_size = t.shape[0];
}

const GgufNames kBertGgufNames = {{{"token_embd.weight", "embeddings.word_embeddings.weight"},
                                   {"position_embd.weight", "embeddings.position_embeddings.weight"},
                                   {"token_types.weight", "embeddings.token_type_embeddings.weight"},
                                   {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
                                   {"token_embd_norm.bias", "embeddings.LayerNorm.bias"}},
                                  "encoder.layer.",
                                  {{"attn_q.weight", "attention.self.query.weight"},
                                   {"attn_q.bias", "attention.self.query.bias"},
                                   {"attn_k.weight", "attention.self.key.weight"},
                                   {"attn_k.bias", "attention.self.key.bias"},
                                   {"attn_v.weight", "attention.self.value.weight"},
                                   {"attn_v.bias", "attention.self.value.bias"},
                                   {"attn_output.weight", "attention.output.dense.weight"},
                                   {"attn_output.bias", "attention.output.dense.bias"},
                                   {"attn_output_norm.weight", "attention.output.LayerNorm.weight"},
                                   {"attn_output_norm.bias", "attention.output.LayerNorm.bias"},
                                   {"ffn_up.weight", "intermediate.dense.weight"},
                                   {"ffn_up.bias", "intermediate.dense.bias"},
                                   {"ffn_down.weight", "output.dense.weight"},
                                   {"ffn_down.bias", "output.dense.bias"},
                                   {"layer_output_norm.weight", "output.LayerNorm.weight"},
                                   {"layer_output_norm.bias", "output.LayerNorm.bias"}}};

namespace {

Tensor Norm(LmBuilder& b, const Tensor& x, const std::string& name) {
  const int64_t d = b.cfg().hidden_size;
  return LayerNorm(x, b.W(name + ".weight", {d}), b.W(name + ".bias", {d}), b.cfg().norm_eps);
}

Tensor BertLayer(LmBuilder& b, const std::string& p, int64_t l, const Tensor& h) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, hd = cfg.head_dim, nh = cfg.num_heads, f = cfg.intermediate_size;
  const Expr seq = h.dim(0);
  auto heads = [&](const char* name) {
    return b.Proj(h, p + "attention.self." + name, nh * hd, d, true).reshape({seq, Expr(nh), Expr(hd)});
  };
  Tensor a = b.Attention(heads("query"), heads("key"), heads("value"), l, 1.0 / std::sqrt((double)hd));
  Tensor x = Norm(b, h + b.Proj(a, p + "attention.output.dense", d, nh * hd, true),
                  p + "attention.output.LayerNorm");
  Tensor up = b.Activation(b.Proj(x, p + "intermediate.dense", f, d, true));
  return Norm(b, x + b.Proj(up, p + "output.dense", d, f, true), p + "output.LayerNorm");
}

}  // namespace

void BuildBert(LmBuilder& b) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size;
  // BertModel's own names, or under "bert." (BertForMaskedLM and the other heads).
  const std::string p = b.Has("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  const std::string e = p + "embeddings.";
  // Every token is of type 0: the table's first row.
  Tensor type0 = b.W(e + "token_type_embeddings.weight", {cfg.type_vocab_size, d}).slice(0, Expr(0), Expr(1));
  Tensor h = Embedding(b.W(e + "word_embeddings.weight", {cfg.vocab_size, d}), b.tokens()).cast(DType::F32) +
             Embedding(b.W(e + "position_embeddings.weight", {cfg.max_position, d}), b.positions())
                 .cast(DType::F32) +
             type0.cast(DType::F32);
  h = Norm(b, h, e + "LayerNorm");
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    h = BertLayer(b, p + "encoder.layer." + std::to_string(l) + ".", l, h);
  b.SentenceEmbedding(h);
}

}  // namespace prism
