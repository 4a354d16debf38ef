// How a sentence-embedding model folder pools token states into one vector: sentence-transformers' modules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/formats/gguf.h"

namespace prism {

struct EmbeddingPooling {
  // In output order (several modes are concatenated): "cls", "max", "mean", "mean_sqrt_len_tokens",
  // "lasttoken".
  std::vector<std::string> modes = {"mean"};
  bool normalize = false;  // unit L2 norm (sentence-transformers' Normalize module)
  int64_t max_tokens = 0;  // longer inputs are truncated to this many tokens, specials included; 0: none set
};

// Reads modules.json and the modules it lists (Transformer, Pooling, Normalize), and the truncation length
// from sentence_bert_config.json's max_seq_length or tokenizer_config.json's model_max_length. A folder
// without modules.json gets mean pooling, unnormalised, as sentence-transformers gives a plain model.
// Throws prism::Error naming the file for a module or pooling mode Prism does not run.
EmbeddingPooling ReadEmbeddingPooling(const std::string& dir);
// A GGUF encoder's <arch>.pooling_type (llama.cpp's: 1 mean, 2 cls, 3 last; absent: mean), normalised (the
// file keeps no Normalize module; llama.cpp's server normalises), truncated at <arch>.context_length.
EmbeddingPooling EmbeddingPoolingFromGguf(const GgufFile& gguf);

}  // namespace prism
