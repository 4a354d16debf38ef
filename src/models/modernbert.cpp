// ModernBERT: token embeddings and a norm, pre-norm layers (the first without an attention norm) of a
// fused qkv projection with rope and of a GeGLU MLP, every n-th layer global and the others attending only
// to tokens within local_attention / 2 either way (each with its own rope base), a final norm.
#include "models/modernbert.h"

#include "ir/error.h"
#include "models/lm_builder.h"

namespace prism {
using nlohmann::json;

ModelConfig ModernBertFromHf(const ModelFamily& f, const JsonKeys& k) {
  ModelConfig c;
  c.vocab_size = k.Int("vocab_size");
  c.hidden_size = k.Int("hidden_size");
  c.num_layers = k.Int("num_hidden_layers");
  c.num_heads = k.Int("num_attention_heads");
  c.num_kv_heads = c.num_heads;
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads)
    throw Error(k.source() + ": 'hidden_size' " + std::to_string(c.hidden_size) +
                " must be a positive multiple of 'num_attention_heads' " + std::to_string(c.num_heads));
  c.head_dim = c.hidden_size / c.num_heads;
  if (c.head_dim % 2)
    throw Error(k.source() + ": rope needs an even head size, not " + std::to_string(c.head_dim));
  c.intermediate_size = k.Int("intermediate_size");
  c.max_position = k.Int("max_position_embeddings", f.default_max_position);
  c.norm_eps = k.Double("norm_eps", 1e-5);
  c.hidden_act = CheckedActivation(k.String("hidden_activation", "gelu"), k.source());
  // Rope bases: per layer type (transformers >= 5), else global_rope_theta and local_rope_theta (null: the
  // global one).
  if (const json* params = k.Find("rope_parameters"); params && params->is_object()) {
    for (const char* type : {"full_attention", "sliding_attention"}) {
      const json p = params->value(type, json::object());
      if (!p.is_object() || p.value("rope_type", std::string("default")) != "default")
        throw Error(k.source() + ": rope_parameters." + type + " must be default rope (no scaling)");
      (std::string(type) == "full_attention" ? c.rope_theta : c.rope_local_theta) =
          JsonKeys(p, k.source()).Double("rope_theta", 0);
    }
  } else {
    c.rope_theta = k.Double("global_rope_theta", 160000);
    c.rope_local_theta = k.Double("local_rope_theta", 0);
  }
  if (c.rope_theta <= 0) throw Error(k.source() + ": the global layers' rope_theta must be positive");
  if (c.rope_local_theta <= 0) c.rope_local_theta = c.rope_theta;
  // Sliding layers see keys at most local_attention / 2 positions away: Prism's window counts the query.
  const int64_t local = k.Int("local_attention", 128);
  if (local < 2)
    throw Error(k.source() + ": 'local_attention' must be at least 2, not " + std::to_string(local));
  c.sliding_window = local / 2 + 1;
  if (const json* types = k.Find("layer_types")) {
    if (!types->is_array() || (int64_t)types->size() != c.num_layers)
      throw Error(k.source() + ": 'layer_types' must list " + std::to_string(c.num_layers) + " layer types");
    for (const json& t : *types) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s != "sliding_attention" && s != "full_attention")
        throw Error(k.source() + ": layer type " + t.dump() +
                    " is not supported (sliding_attention, full_attention)");
      c.sliding_layers.push_back(s == "sliding_attention");
    }
  } else {
    const int64_t every = k.Int("global_attn_every_n_layers", 3);
    if (every < 1) throw Error(k.source() + ": 'global_attn_every_n_layers' must be positive");
    for (int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers.push_back(l % every != 0);
  }
  ReadTokenIds(k, &c);
  return c;
}

namespace {

// A LayerNorm over the last axis, with its bias where the checkpoint has one (norm_bias).
Tensor Norm(LmBuilder& b, const Tensor& x, const std::string& name) {
  const int64_t d = b.cfg().hidden_size;
  Tensor w = b.W(name + ".weight", {d});
  return b.Has(name + ".bias") ? LayerNorm(x, w, b.W(name + ".bias", {d}), b.cfg().norm_eps)
                               : LayerNorm(x, w, b.cfg().norm_eps);
}

Tensor Proj(LmBuilder& b, const Tensor& x, const std::string& name, int64_t out, int64_t in) {
  return b.Proj(x, name, out, in, b.Has(name + ".bias"));  // attention_bias, mlp_bias
}

Tensor ModernBertLayer(LmBuilder& b, const std::string& p, int64_t l, const Tensor& h,
                       const Tensor& global_freq, const Tensor& local_freq) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, hd = cfg.head_dim, nh = cfg.num_heads, f = cfg.intermediate_size;
  const Expr seq = h.dim(0);
  // The first layer's attention norm is the identity: its input is the embeddings' norm already.
  Tensor x = b.Has(p + "attn_norm.weight") ? Norm(b, h, p + "attn_norm") : h;
  Tensor qkv = Proj(b, x, p + "attn.Wqkv", 3 * d, d);  // [seq, 3 * d]: q, k, v
  auto part = [&](int64_t i) {
    return qkv.slice(1, Expr(i * d), Expr(d)).reshape({seq, Expr(nh), Expr(hd)});
  };
  const Tensor& freq = b.Windowed(l) ? local_freq : global_freq;
  Tensor a = b.Attention(b.Rope(part(0), freq), b.Rope(part(1), freq), part(2), l, b.AttentionScale());
  Tensor r = h + Proj(b, a, p + "attn.Wo", d, d);
  Tensor wi = Proj(b, Norm(b, r, p + "mlp_norm"), p + "mlp.Wi", 2 * f, d);  // [seq, 2f]: input, gate
  Tensor glu = b.Activation(wi.slice(1, Expr(0), Expr(f))) * wi.slice(1, Expr(f), Expr(f));
  return r + Proj(b, glu, p + "mlp.Wo", d, f);
}

}  // namespace

void BuildModernBert(LmBuilder& b) {
  const ModelConfig& cfg = b.cfg();
  // ModernBertModel's own names, or under "model." (ModernBertForMaskedLM and the other heads).
  const std::string p = b.Has("model.embeddings.tok_embeddings.weight") ? "model." : "";
  Tensor h =
      Embedding(b.W(p + "embeddings.tok_embeddings.weight", {cfg.vocab_size, cfg.hidden_size}), b.tokens())
          .cast(DType::F32);
  h = Norm(b, h, p + "embeddings.norm");
  const Tensor global_freq = b.RopeFreqs(false), local_freq = b.RopeFreqs(true);
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    h = ModernBertLayer(b, p + "layers." + std::to_string(l) + ".", l, h, global_freq, local_freq);
  b.SentenceEmbedding(Norm(b, h, p + "final_norm"));
}

}  // namespace prism
