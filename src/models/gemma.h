// Gemma, Gemma 2 and Gemma 3 (text): readers and GGUF names (the graph is BuildLlama's).
#pragma once

#include "models/family.h"

namespace prism {

ModelConfig GemmaFromHf(const ModelFamily& f, const JsonKeys& keys);
void GemmaFromGguf(const ModelFamily& f, const GgufKeys& keys, ModelConfig* c);
extern const GgufNames kGemmaGgufNames;  // Gemma 2 and 3 (Gemma 1 has Llama's names)

}  // namespace prism
