// ModernBERT encoders: rotary positions, pre-norm layers, fused qkv, GeGLU, alternating global and
// sliding-window (bidirectional) attention, pooled embeddings.
#pragma once

#include "models/family.h"

namespace prism {

ModelConfig ModernBertFromHf(const ModelFamily& f, const JsonKeys& keys);
void BuildModernBert(LmBuilder& b);

}  // namespace prism
