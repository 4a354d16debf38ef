// A model's files opened: config (through its family), weights memory-mapped, tokenizer, chat template.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "io/chat/chat_template.h"
#include "io/formats/model_config.h"
#include "io/formats/sentence_embedding.h"
#include "io/formats/weights.h"
#include "io/tokenizer/tokenizer.h"
#include "models/transformer.h"

namespace prism {

// MODEL is a Hugging Face folder (config.json + safetensors + tokenizer.json), a .gguf file, or a
// llama2.c checkpoint (tokenizer_path: its tokenizer, else tokenizer.bin or tok*.bin beside it).
// Throws prism::Error naming the path and the problem.
// The files of a model, opened (weights memory-mapped) but not compiled.
struct ModelFiles {
  ModelConfig config;
  std::shared_ptr<const WeightStore> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const ChatTemplate> chat_template;  // null when the model ships none
  nlohmann::json chat_variables;                      // bos_token, eos_token, ... for the template
  bool conv1d_transposed = false;                     // GPT-2 weights from GGUF are [out, in]
  EmbeddingPooling pooling;                           // an encoder's (sentence-transformers' files)
  WeightLookup Lookup() const;
};
ModelFiles OpenModelFiles(const std::string& path, const std::string& tokenizer_path = "");

// Finds the tokenizer of a llama2.c checkpoint: tokenizer.bin or tok*.bin in its folder.
std::string FindLlama2cTokenizer(const std::string& model_path);

}  // namespace prism
