// Phi-3 and Phi-3.5: readers and GGUF names (the graph is BuildLlama's, through the fused projections).
#pragma once

#include "models/family.h"

namespace prism {

ModelConfig Phi3FromHf(const ModelFamily& f, const JsonKeys& keys);
void Phi3FromGguf(const ModelFamily& f, const GgufKeys& keys, ModelConfig* c);
extern const GgufNames kPhi3GgufNames;

}  // namespace prism
