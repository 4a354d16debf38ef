// Decoder-only transformer families (Llama, Mistral, Qwen2, Qwen3, GPT-2) as one graph builder.
#include "models/transformer.h"

#include <cmath>
#include <cstring>

#include "frontend/nn.h"
#include "ir/error.h"

namespace prism {

const std::vector<std::string>& SupportedArchitectures() {
  static const std::vector<std::string> archs = {"llama", "mistral", "qwen2", "qwen3", "gpt2"};
  return archs;
}

namespace {

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

class Builder {
 public:
  Builder(Graph* g, const ModelConfig& cfg, const WeightLookup& w, const LmGraphOptions& o)
      : g_(g), cfg_(cfg), lookup_(w), opts_(o) {}

  // A required weight with the expected shape.
  Tensor W(const std::string& name, std::vector<int64_t> shape) {
    auto spec = lookup_(name);
    if (!spec) throw Error("model weights: missing tensor '" + name + "' (expected shape " + ShapeText(shape) + ")");
    if (spec->shape != shape)
      throw Error("model weights: tensor '" + name + "' has shape " + ShapeText(spec->shape) + ", the config implies " +
                  ShapeText(shape));
    std::vector<Expr> s(shape.begin(), shape.end());
    return {g_, g_->Weight(name, spec->dtype, s)};
  }
  bool Has(const std::string& name) { return lookup_(name).has_value(); }

  Tensor Proj(const Tensor& x, const std::string& name, int64_t out, int64_t in, bool bias) {
    Tensor y = Linear(x, W(name + ".weight", {out, in}));
    return bias ? y + W(name + ".bias", {out}) : y;
  }

  Tensor Activation(const Tensor& x) {
    const std::string& a = cfg_.hidden_act;
    if (a == "silu" || a == "swish") return Silu(x);
    if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return GeluTanh(x);
    if (a == "gelu") return GeluErf(x);
    throw Error("model config: unsupported hidden_act '" + a + "' (supported: silu, gelu, gelu_new, gelu_pytorch_tanh)");
  }

  Tensor LlamaLayer(int64_t l, Tensor h, const Tensor& pos, const Tensor& inv_freq, const Expr& past) {
    const int64_t d = cfg_.hidden_size, hd = cfg_.head_dim, nh = cfg_.num_heads, nkv = cfg_.num_kv_heads;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Expr seq = h.dim(0);
    Tensor x = RmsNorm(h, W(p + "input_layernorm.weight", {d}), cfg_.norm_eps);
    bool bias = cfg_.attention_bias;
    Tensor q = Proj(x, p + "self_attn.q_proj", nh * hd, d, bias).reshape({seq, Expr(nh), Expr(hd)});
    Tensor k = Proj(x, p + "self_attn.k_proj", nkv * hd, d, bias).reshape({seq, Expr(nkv), Expr(hd)});
    Tensor v = Proj(x, p + "self_attn.v_proj", nkv * hd, d, bias).reshape({seq, Expr(nkv), Expr(hd)});
    if (cfg_.qk_norm) {
      q = RmsNorm(q, W(p + "self_attn.q_norm.weight", {hd}), cfg_.norm_eps);
      k = RmsNorm(k, W(p + "self_attn.k_norm.weight", {hd}), cfg_.norm_eps);
    }
    RopeStyle style = cfg_.rope_interleaved ? RopeStyle::Interleaved : RopeStyle::HalfSplit;
    q = Rope(q, pos, inv_freq, style);
    k = Rope(k, pos, inv_freq, style);
    Tensor a = CausalAttention(q, k, v, KvCache("k_cache", l), KvCache("v_cache", l), past, 1.0 / std::sqrt((double)hd));
    h = h + Proj(a, p + "self_attn.o_proj", d, nh * hd, false);
    x = RmsNorm(h, W(p + "post_attention_layernorm.weight", {d}), cfg_.norm_eps);
    const int64_t f = cfg_.intermediate_size;
    Tensor gate = Proj(x, p + "mlp.gate_proj", f, d, false), up = Proj(x, p + "mlp.up_proj", f, d, false);
    return h + Proj(Activation(gate) * up, p + "mlp.down_proj", d, f, false);
  }

  // GPT-2 Conv1D: y = x W + b with W stored [in, out] (or [out, in] when transposed on disk).
  Tensor Conv1D(const Tensor& x, const std::string& name, int64_t in, int64_t out) {
    Tensor y = opts_.conv1d_transposed ? Linear(x, W(name + ".weight", {out, in}))
                                       : Matmul(x, W(name + ".weight", {in, out}));
    return y + W(name + ".bias", {out});
  }

  Tensor Gpt2Layer(int64_t l, Tensor h, const Expr& past) {
    const int64_t d = cfg_.hidden_size, hd = cfg_.head_dim, nh = cfg_.num_heads;
    const std::string p = prefix_ + "h." + std::to_string(l) + ".";
    Expr seq = h.dim(0);
    Tensor x = LayerNorm(h, W(p + "ln_1.weight", {d}), W(p + "ln_1.bias", {d}), cfg_.norm_eps);
    Tensor qkv = Conv1D(x, p + "attn.c_attn", d, 3 * d);
    Tensor q = qkv.slice(1, 0, Expr(d)).reshape({seq, Expr(nh), Expr(hd)});
    Tensor k = qkv.slice(1, Expr(d), Expr(d)).reshape({seq, Expr(nh), Expr(hd)});
    Tensor v = qkv.slice(1, Expr(2 * d), Expr(d)).reshape({seq, Expr(nh), Expr(hd)});
    Tensor a = CausalAttention(q, k, v, KvCache("k_cache", l), KvCache("v_cache", l), past, 1.0 / std::sqrt((double)hd));
    h = h + Conv1D(a, p + "attn.c_proj", d, d);
    x = LayerNorm(h, W(p + "ln_2.weight", {d}), W(p + "ln_2.bias", {d}), cfg_.norm_eps);
    const int64_t f = cfg_.intermediate_size;
    return h + Conv1D(Activation(Conv1D(x, p + "mlp.c_fc", d, f)), p + "mlp.c_proj", f, d);
  }

  Tensor KvCache(const std::string& kind, int64_t l) {
    int64_t heads = cfg_.architecture == "gpt2" ? cfg_.num_heads : cfg_.num_kv_heads;
    return {g_, g_->State(kind + "." + std::to_string(l), DType::F32,
                          {Expr(opts_.max_context), Expr(heads), Expr(cfg_.head_dim)})};
  }

  Tensor LastOrAll(const Tensor& h) {
    if (opts_.all_logits) return h;
    return h.slice(0, h.dim(0) - Expr(1), Expr(1));
  }

  void Build() {
    const std::string& arch = cfg_.architecture;
    bool known = false;
    for (const auto& a : SupportedArchitectures()) known = known || a == arch;
    if (!known) {
      std::string list;
      for (const auto& a : SupportedArchitectures()) list += (list.empty() ? "" : ", ") + a;
      throw Error("unsupported architecture '" + arch + "' (supported: " + list + ")");
    }
    const int64_t d = cfg_.hidden_size, vocab = cfg_.vocab_size;
    Expr seq = Expr::Sym("seq"), past = Expr::Sym("past");
    Tensor tokens{g_, g_->Input("tokens", DType::I32, {seq})};
    Tensor pos = Arange(g_, seq) + BroadcastTo(ExprValue(g_, past), {seq});
    Tensor h, logits;
    if (arch == "gpt2") {
      prefix_ = Has("transformer.wte.weight") ? "transformer." : "";
      Tensor wte = W(prefix_ + "wte.weight", {vocab, d});
      h = Embedding(wte, tokens).cast(DType::F32) +
          Embedding(W(prefix_ + "wpe.weight", {cfg_.max_position, d}), pos).cast(DType::F32);
      for (int64_t l = 0; l < cfg_.num_layers; ++l) h = Gpt2Layer(l, h, past);
      h = LayerNorm(LastOrAll(h), W(prefix_ + "ln_f.weight", {d}), W(prefix_ + "ln_f.bias", {d}), cfg_.norm_eps);
      logits = Linear(h, Has("lm_head.weight") ? W("lm_head.weight", {vocab, d}) : wte);
    } else {
      Tensor emb = W("model.embed_tokens.weight", {vocab, d});
      h = Embedding(emb, tokens).cast(DType::F32);  // activations stay f32 whatever the weights' dtype
      RopeScaling rs{cfg_.rope_factor, cfg_.rope_low_freq_factor, cfg_.rope_high_freq_factor,
                     (double)cfg_.rope_original_max_position};
      Tensor inv_freq = RopeInvFreq(g_, cfg_.head_dim, cfg_.rope_theta, rs);
      // llama.cpp stores Llama 3 frequency scaling as per-frequency divisors in rope_freqs.weight.
      if (Has("rope_freqs.weight")) inv_freq = inv_freq / W("rope_freqs.weight", {cfg_.head_dim / 2});
      for (int64_t l = 0; l < cfg_.num_layers; ++l) h = LlamaLayer(l, h, pos, inv_freq, past);
      h = RmsNorm(LastOrAll(h), W("model.norm.weight", {d}), cfg_.norm_eps);
      bool tied = cfg_.tie_word_embeddings || !Has("lm_head.weight");
      logits = Linear(h, tied ? emb : W("lm_head.weight", {vocab, d}));
    }
    g_->MarkOutput(logits.cast(DType::F32).id(), "logits");
  }

 private:
  Graph* g_;
  const ModelConfig& cfg_;
  const WeightLookup& lookup_;
  const LmGraphOptions& opts_;
  std::string prefix_;
};

}  // namespace

Graph BuildCausalLM(const ModelConfig& cfg, const WeightLookup& weights, const LmGraphOptions& opts) {
  if (cfg.hidden_size <= 0 || cfg.num_heads <= 0 || cfg.head_dim <= 0 || cfg.num_layers < 0 || cfg.vocab_size <= 0)
    throw Error("model config: sizes must be positive (hidden " + std::to_string(cfg.hidden_size) + ", heads " +
                std::to_string(cfg.num_heads) + ", head_dim " + std::to_string(cfg.head_dim) + ", vocab " +
                std::to_string(cfg.vocab_size) + ")");
  Graph g;
  Builder(&g, cfg, weights, opts).Build();
  return g;
}

WeightLookup SyntheticWeights(const ModelConfig& cfg, DType t) {
  return [cfg, t](const std::string& name) -> std::optional<WeightSpec> {
    const int64_t d = cfg.hidden_size, hd = cfg.head_dim, f = cfg.intermediate_size;
    auto ends = [&](const char* s) { return name.size() >= strlen(s) && name.compare(name.size() - strlen(s), strlen(s), s) == 0; };
    DType norm = IsQuantized(t) ? DType::F32 : t;  // norms and biases stay unquantized
    if (name == "lm_head.weight") return cfg.tie_word_embeddings ? std::nullopt : std::optional<WeightSpec>({t, {cfg.vocab_size, d}});
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
    if (ends("norm.weight") || ends("norm.bias") || name.find(".ln_") != std::string::npos || ends("ln_f.weight") ||
        ends("ln_f.bias") || ends("c_proj.bias"))
      return WeightSpec{norm, {d}};  // layer norms and the remaining [hidden] biases
    return std::nullopt;             // e.g. rope_freqs.weight: absent, as in a Hugging Face model
  };
}

}  // namespace prism
