// GPT-2: learned positions, LayerNorm with biases, Conv1D weights, a fused qkv projection.
#pragma once

#include "models/family.h"

namespace prism {

ModelConfig Gpt2FromHf(const ModelFamily& f, const JsonKeys& keys);
void Gpt2FromGguf(const ModelFamily& f, const GgufKeys& keys, ModelConfig* c);
extern const GgufNames kGpt2GgufNames;
void BuildGpt2(LmBuilder& b);

}  // namespace prism
