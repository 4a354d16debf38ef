// BERT encoders (sentence-transformers' usual base): learned positions, post-norm layers, pooled embeddings.
#pragma once

#include "models/family.h"

namespace prism {

ModelConfig BertFromHf(const ModelFamily& f, const JsonKeys& keys);
void BertFromGguf(const ModelFamily& f, const GgufKeys& keys, ModelConfig* c);
extern const GgufNames kBertGgufNames;
void BuildBert(LmBuilder& b);

}  // namespace prism
