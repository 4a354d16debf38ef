// The Llama family's decoder (Llama, Mistral, Qwen2, Qwen3): readers, GGUF names and graph.
#pragma once

#include "models/family.h"

namespace prism {

ModelConfig LlamaFromHf(const ModelFamily& f, const JsonKeys& keys);
void LlamaFromGguf(const ModelFamily& f, const GgufKeys& keys, ModelConfig* c);
extern const GgufNames kLlamaGgufNames;
void BuildLlama(LmBuilder& b);

}  // namespace prism
