// Mixture-of-experts decoders: Mixtral, Qwen2-MoE and Qwen3-MoE read their expert counts and route each
// token's MLP through its top experts (Qwen2-MoE adds its gated shared expert). The attention and norms are
// the Llama decoder's (models/llama.cpp).
#include "models/moe.h"

#include <algorithm>

#include "frontend/nn.h"
#include "ir/error.h"
#include "models/llama.h"
#include "models/lm_builder.h"

namespace prism {

ModelConfig MixtralFromHf(const ModelFamily& f, const JsonKeys& k) {
  ModelConfig c = LlamaFromHf(f, k);
  c.sliding_window = k.Int("sliding_window", 0);
  c.num_experts = k.Int("num_local_experts");
  c.experts_per_token = k.Int("num_experts_per_tok");
  c.moe_intermediate_size = c.intermediate_size;  // every Mixtral MLP is routed
  c.norm_topk_prob = true;
  return c;
}

ModelConfig QwenMoeFromHf(const ModelFamily& f, const JsonKeys& k) {
  ModelConfig c = LlamaFromHf(f, k);
  c.num_experts = k.Int("num_experts", k.Int("num_local_experts", 0));
  if (c.num_experts <= 0) throw Error(k.source() + ": 'num_experts' must be positive");
  c.experts_per_token = k.Int("num_experts_per_tok");
  c.moe_intermediate_size = k.Int("moe_intermediate_size");
  c.norm_topk_prob = k.Bool("norm_topk_prob", false);
  c.shared_expert_size = k.Int("shared_expert_intermediate_size", 0);
  const int64_t step = k.Int("decoder_sparse_step", 1);
  if (step <= 0) throw Error(k.source() + ": 'decoder_sparse_step' must be positive");
  std::vector<int64_t> dense;
  if (const nlohmann::json* m = k.Find("mlp_only_layers")) {
    if (!m->is_array()) throw Error(k.source() + ": 'mlp_only_layers' must be a list of layer numbers");
    for (const auto& v : *m) {
      if (!v.is_number_integer())
        throw Error(k.source() + ": 'mlp_only_layers' must be a list of layer numbers");
      dense.push_back(v.get<int64_t>());
    }
  }
  c.moe_layers.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l)
    c.moe_layers[l] = std::find(dense.begin(), dense.end(), l) == dense.end() && (l + 1) % step == 0;
  return c;
}

bool RoutedLayer(const ModelConfig& c, int64_t l) {
  return c.num_experts > 0 && (c.moe_layers.empty() || c.moe_layers.at(l));
}

Tensor RoutedMlp(LmBuilder& b, const Tensor& x, int64_t l) {
  const ModelConfig& cfg = b.cfg();
  const int64_t d = cfg.hidden_size, f = cfg.moe_intermediate_size, e = cfg.num_experts,
                top = cfg.experts_per_token;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const bool mixtral = b.Has(p + "block_sparse_moe.gate.weight");
  const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
  Tensor router = b.W(block + "gate.weight", {e, d});
  Tensor gate = b.W(block + (mixtral ? "experts.w1.weight" : "experts.gate_proj.weight"), {e, f, d});
  Tensor up = b.W(block + (mixtral ? "experts.w3.weight" : "experts.up_proj.weight"), {e, f, d});
  Tensor down = b.W(block + (mixtral ? "experts.w2.weight" : "experts.down_proj.weight"), {e, d, f});

  const Expr seq = x.dim(0), rows = seq * Expr(top);
  TopKResult chosen = TopK(Softmax(Linear(x, router), -1), top);  // [seq, top]
  Tensor weight = cfg.norm_topk_prob ? chosen.values / chosen.values.sum({-1}) : chosen.values;
  // Row r = token r / top through its (r % top)-th expert.
  Tensor expert = chosen.indices.reshape({rows});
  Tensor xr = x.unsqueeze(1).expand({seq, Expr(top), Expr(d)}).reshape({rows, Expr(d)});
  Tensor h = b.Activation(ExpertLinear(xr, gate, expert)) * ExpertLinear(xr, up, expert);
  Tensor y = ExpertLinear(h, down, expert).reshape({seq, Expr(top), Expr(d)});
  Tensor out = (y * weight.unsqueeze(-1)).sum({1}, false);
  if (cfg.shared_expert_size <= 0) return out;
  // Qwen2-MoE's shared expert, gated per token (GGUF stores the gate as [hidden], Hugging Face as [1,
  // hidden]).
  const int64_t fs = cfg.shared_expert_size;
  const std::string s = block + "shared_expert.", sg = block + "shared_expert_gate.weight";
  Tensor shared =
      b.Proj(b.Activation(b.Proj(x, s + "gate_proj", fs, d, false)) * b.Proj(x, s + "up_proj", fs, d, false),
             s + "down_proj", d, fs, false);
  const auto spec = b.Spec(sg);
  Tensor gate_w =
      spec && spec->shape.size() == 1 ? b.W(sg, {d}).reshape({Expr(1), Expr(d)}) : b.W(sg, {1, d});
  return out + Linear(x, gate_w).sigmoid() * shared;
}

}  // namespace prism
