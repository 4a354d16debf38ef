// What every family's graph is built with: weights by name, the step's inputs, the KV cache, the logits.
#include "models/lm_builder.h"

#include <cmath>

#include "ir/error.h"

namespace prism {
namespace {

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

LmBuilder::LmBuilder(Graph* g, const ModelConfig& cfg, const WeightLookup& w, const LmGraphOptions& o,
                     bool encoder)
    : g_(g), cfg_(cfg), lookup_(w), opts_(o), encoder_(encoder), past_(Expr::Sym("past")) {
  const Expr seq = Expr::Sym("seq");
  tokens_ = Tensor{g_, g_->Input("tokens", DType::I32, {seq})};
  if (encoder_) {
    if (paged()) throw Error("an encoder's graph has no KV cache to page");
    if (opts_.max_context > cfg_.max_position)
      throw Error("an encoder reads at most " + std::to_string(cfg_.max_position) + " tokens, not " +
                  std::to_string(opts_.max_context));
    if (!opts_.encoder_batch) {
      pos_ = Arange(g_, seq);
      return;
    }
    const Expr texts = Expr::Sym("texts");
    pos_ = Tensor{g_, g_->Input("positions", DType::I32, {seq})};
    segments_ = Tensor{g_, g_->Input("segments", DType::I32, {seq})};
    firsts_ = Tensor{g_, g_->Input("firsts", DType::I32, {texts})};
    lasts_ = Tensor{g_, g_->Input("lasts", DType::I32, {texts})};
    return;
  }
  if (!paged()) {
    pos_ = Arange(g_, seq) + BroadcastTo(ExprValue(g_, past_), {seq});
    return;
  }
  if (opts_.kv_blocks < 1) throw Error("batched step: the KV pool needs at least one block");
  pos_ = Tensor{g_, g_->Input("positions", DType::I32, {seq})};
  slots_ = Tensor{g_, g_->Input("slots", DType::I32, {seq})};
  table_ = Tensor{g_, g_->Input("block_table", DType::I32, {seq, Expr::Sym("blocks")})};
  logit_rows_ = Tensor{g_, g_->Input("logit_rows", DType::I32, {Expr::Sym("rows")})};
}

Tensor LmBuilder::W(const std::string& name, std::vector<int64_t> shape) {
  auto spec = lookup_(name);
  if (!spec)
    throw Error("model weights: missing tensor '" + name + "' (expected shape " + ShapeText(shape) + ")");
  if (spec->shape != shape)
    throw Error("model weights: tensor '" + name + "' has shape " + ShapeText(spec->shape) +
                ", the config implies " + ShapeText(shape));
  std::vector<Expr> s(shape.begin(), shape.end());
  return {g_, g_->Weight(name, spec->dtype, s)};
}

Tensor LmBuilder::Proj(const Tensor& x, const std::string& name, int64_t out, int64_t in, bool bias) {
  Tensor y = Linear(x, W(name + ".weight", {out, in}));
  return bias ? y + W(name + ".bias", {out}) : y;
}

Tensor LmBuilder::Activation(const Tensor& x) {
  const std::string& a = cfg_.hidden_act;
  if (a == "silu" || a == "swish") return Silu(x);
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return GeluTanh(x);
  if (a == "gelu") return GeluErf(x);
  throw Error("model config: unsupported hidden_act '" + a +
              "' (supported: silu, gelu, gelu_new, gelu_pytorch_tanh)");
}

Tensor LmBuilder::Norm(const Tensor& x, const std::string& name, int64_t dim) {
  Tensor w = W(name, {dim});
  return RmsNorm(x, cfg_.norm_weight_offset != 0 ? w.cast(DType::F32) + cfg_.norm_weight_offset : w,
                 cfg_.norm_eps);
}

Tensor LmBuilder::RopeFreqs(bool windowed) {
  const int64_t hd = cfg_.head_dim;
  if (windowed && cfg_.rope_local_theta > 0) return RopeInvFreq(g_, hd, cfg_.rope_local_theta);
  RopeScaling rs{cfg_.rope_factor, cfg_.rope_low_freq_factor, cfg_.rope_high_freq_factor,
                 (double)cfg_.rope_original_max_position};
  Tensor inv = RopeInvFreq(g_, hd, cfg_.rope_theta, rs);
  if (cfg_.rope_linear_factor != 1) inv = inv / cfg_.rope_linear_factor;
  // LongRoPE: the long factors where a sequence's context (max_context, batched or not) outgrows
  // training's (config.json lists them; llama.cpp stores rope_factors_long.weight and _short.weight).
  const bool long_ctx = opts_.max_context > cfg_.rope_original_max_position;
  if (!cfg_.rope_short_factor.empty())
    inv = inv / ConstVector(g_, long_ctx ? cfg_.rope_long_factor : cfg_.rope_short_factor);
  else if (Has("rope_factors_short.weight"))
    inv = inv / W(long_ctx ? "rope_factors_long.weight" : "rope_factors_short.weight", {hd / 2});
  // llama.cpp stores Llama 3 frequency scaling as per-frequency divisors in rope_freqs.weight.
  if (Has("rope_freqs.weight")) inv = inv / W("rope_freqs.weight", {hd / 2});
  return inv;
}

Tensor LmBuilder::Rope(const Tensor& x, const Tensor& inv_freq) {
  Tensor r =
      prism::Rope(x, pos_, inv_freq, cfg_.rope_interleaved ? RopeStyle::Interleaved : RopeStyle::HalfSplit);
  return cfg_.rope_attention_factor != 1 ? r * cfg_.rope_attention_factor : r;
}

bool LmBuilder::Windowed(int64_t l) const {
  return cfg_.sliding_window > 0 &&
         (cfg_.sliding_layers.empty() || (l < (int64_t)cfg_.sliding_layers.size() && cfg_.sliding_layers[l]));
}

AttentionVariant LmBuilder::Variant(int64_t l) const {
  return {.window = Windowed(l) ? cfg_.sliding_window : 0, .softcap = cfg_.attn_softcap};
}

double LmBuilder::AttentionScale() const {
  return cfg_.attention_scale > 0 ? cfg_.attention_scale : 1.0 / std::sqrt((double)cfg_.head_dim);
}

// A single sequence's cache [heads, rows, D] (CausalAttention's head-major: each head's keys one stream); a
// paged pool [rows, heads, D] (its blocks lie anywhere, and head-major ones gained nothing: bench/README.md,
// "Decode at depth").
Tensor LmBuilder::KvCache(const std::string& kind, int64_t l, int64_t heads) {
  const int64_t rows = paged() ? opts_.kv_blocks * opts_.kv_block : opts_.max_context;
  std::vector<Expr> shape = {Expr(rows), Expr(heads), Expr(cfg_.head_dim)};
  if (!paged()) std::swap(shape[0], shape[1]);
  return {g_, g_->State(kind + "." + std::to_string(l), DType::F32, shape)};
}

Tensor LmBuilder::Attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t l, double scale) {
  // A packed encoder's texts attend each to its own: no cache, a mask.
  if (encoder_ && opts_.encoder_batch)
    return prism::Attention(q, k, v, SegmentMask(Variant(l).window), scale, false);
  const int64_t nkv = k.dim(1).value();
  Tensor kc = KvCache("k_cache", l, nkv), vc = KvCache("v_cache", l, nkv);
  // An encoder's keys and values pass through scratch rows of its cache (rewritten by every input) so that
  // the fused attention template, which reads them from state, runs them with every key visible.
  if (encoder_)
    return CausalAttention(q, k, v, kc, vc, Expr(0), scale,
                           {.window = Variant(l).window, .bidirectional = true});
  if (paged())
    return PagedAttention(q, k, v, kc, vc, slots_, table_, pos_, opts_.kv_block, scale, Variant(l));
  return CausalAttention(q, k, v, kc, vc, past_, scale, Variant(l));
}

Tensor LmBuilder::LastOrAll(const Tensor& h) {
  if (paged()) return Embedding(h, logit_rows_);
  if (opts_.all_logits) return h;
  return h.slice(0, h.dim(0) - Expr(1), Expr(1));
}

Tensor LmBuilder::SegmentMask(int64_t window) {
  if (auto it = segment_masks_.find(window); it != segment_masks_.end()) return it->second;
  const Expr seq = tokens_.dim(0);
  const std::vector<Expr> ms = {seq, seq};
  auto rows = [&](const Tensor& v) { return BroadcastTo(v.reshape({seq, Expr(1)}), ms); };  // [s, t]: v[s]
  auto cols = [&](const Tensor& v) { return BroadcastTo(v.reshape({Expr(1), seq}), ms); };  // [s, t]: v[t]
  const Tensor inf = Full(g_, -INFINITY, ms), zero = Full(g_, 0.0, ms);
  Tensor mask = Where(Less(rows(segments_), cols(segments_)), inf,
                      Where(Less(cols(segments_), rows(segments_)), inf, zero));
  if (window > 0) {  // within a text, keys window or more positions away either way are hidden too
    const Tensor w = Full(g_, (double)window, ms, DType::I32), one = Full(g_, 1, ms, DType::I32);
    const Tensor s{g_, g_->Iota(ms, 0, DType::I32)}, t{g_, g_->Iota(ms, 1, DType::I32)};
    mask = Where(Less(t + w, s + one), inf, Where(Less(s + w, t + one), inf, mask));
  }
  return segment_masks_[window] = mask;
}

void LmBuilder::SentenceEmbedding(const Tensor& states) {
  Tensor h = states.cast(DType::F32);
  const Expr seq = h.dim(0), d = h.dim(1);
  const bool packed = encoder_ && opts_.encoder_batch;
  // Packed: which tokens are each text's, as weights [texts, seq] (1 for its own, else 0), and their counts.
  Tensor member, count;
  Expr texts = 1;
  if (packed) {
    texts = firsts_.dim(0);
    const std::vector<Expr> ms = {texts, seq};
    const Tensor text{g_, g_->Iota(ms, 0, DType::I32)};
    const Tensor seg = BroadcastTo(segments_.reshape({Expr(1), seq}), ms);
    const Tensor zero = Full(g_, 0.0, ms);
    member = Where(Less(seg, text), zero, Where(Less(text, seg), zero, Full(g_, 1.0, ms)));
    count = BroadcastTo(member.sum({1}), {texts, d});  // [texts, d]: each text's token count
  }
  std::vector<Tensor> parts;  // each [texts or 1, d]
  for (const std::string& mode : opts_.pooling.modes) {
    if (mode == "cls") {
      parts.push_back(packed ? Embedding(h, firsts_) : h.slice(0, Expr(0), Expr(1)));
    } else if (mode == "lasttoken") {
      parts.push_back(packed ? Embedding(h, lasts_) : h.slice(0, seq - Expr(1), Expr(1)));
    } else if (mode == "max" && packed) {  // over each text's own tokens: the others read as -inf
      const std::vector<Expr> s3 = {texts, seq, d};
      const Tensor own = BroadcastTo(member.reshape({texts, seq, Expr(1)}), s3);
      parts.push_back(Where(Less(own, Full(g_, 0.5, s3)), Full(g_, -INFINITY, s3),
                            BroadcastTo(h.reshape({Expr(1), seq, d}), s3))
                          .max({1})
                          .reshape({texts, d}));
    } else if (mode == "max") {
      parts.push_back(h.max({0}));
    } else if (mode == "mean") {
      parts.push_back(packed ? Matmul(member, h) / count : h.mean({0}));
    } else if (mode == "mean_sqrt_len_tokens") {
      parts.push_back(packed
                          ? Matmul(member, h) * count.rsqrt()
                          : h.sum({0}) * BroadcastTo(ExprValue(g_, seq, DType::F32).rsqrt(), {Expr(1), d}));
    } else {
      throw Error("encoder: unsupported pooling mode '" + mode + "'");
    }
  }
  if (parts.empty()) throw Error("encoder: no pooling mode");
  Tensor e = parts.size() == 1 ? parts[0] : Concat(parts, 1);  // [texts or 1, dim]
  // torch.nn.functional.normalize: x / max(|x|, 1e-12).
  if (opts_.pooling.normalize)
    e = e / BroadcastTo(Maximum(e.square().sum({1}).sqrt(), Full(g_, 1e-12, {e.dim(0), Expr(1)})), e.shape());
  g_->MarkOutput((packed ? e : e.reshape({e.dim(1)})).id(), "embedding");
}

void LmBuilder::Logits(const Tensor& logits) {
  Tensor l = logits.cast(DType::F32);
  g_->MarkOutput((cfg_.final_softcap > 0 ? SoftCap(l, cfg_.final_softcap) : l).id(), "logits");
}

}  // namespace prism
