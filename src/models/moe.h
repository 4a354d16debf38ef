// Mixture-of-experts decoders (Mixtral, Qwen2-MoE, Qwen3-MoE): config readers and the routed MLP the Llama
// decoder uses in their layers.
#pragma once

#include "frontend/tensor.h"
#include "models/family.h"

namespace prism {

ModelConfig MixtralFromHf(const ModelFamily& f, const JsonKeys& keys);
// Qwen2-MoE and Qwen3-MoE (the same keys; Qwen2-MoE's shared expert where the config sizes one).
ModelConfig QwenMoeFromHf(const ModelFamily& f, const JsonKeys& keys);
// Whether layer l's MLP is routed (the config has experts and l is not one of its dense layers).
bool RoutedLayer(const ModelConfig& c, int64_t l);
// Layer l's routed MLP of x [seq, hidden]: the router's softmax, its top experts_per_token experts per
// token (renormalised if the config says so), each token through its experts' gated MLPs, the results
// weighted and summed, plus Qwen2-MoE's shared expert times sigmoid(its gate). Weights: Mixtral's
// block_sparse_moe.{gate, experts.w1, w3, w2} or Qwen's mlp.{gate, experts.gate_proj, up_proj, down_proj,
// shared_expert.*, shared_expert_gate}, experts stacked [experts, out, in].
Tensor RoutedMlp(LmBuilder& b, const Tensor& x, int64_t l);

}  // namespace prism
