// An embedding model ready to run: an encoder's files opened, its graph compiled, texts -> vectors.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/language_model.h"

namespace prism {

// Whether MODEL holds an encoder (a Hugging Face folder or GGUF file of an encoder family); reads only its
// config or metadata.
bool IsEncoderModel(const std::string& path);

class TextEncoder {
 public:
  // MODEL is a Hugging Face folder of an encoder family (BERT), with sentence-transformers' modules.json
  // and pooling config where it has them. opts.max_context > 0 caps the tokens of one input; threads,
  // device and search_budget apply as for a LanguageModel. Throws prism::Error naming the path and the
  // problem (a causal language model among them).
  static std::unique_ptr<TextEncoder> Load(const std::string& path, const LoadOptions& opts = {});

  const ModelConfig& config() const { return files_.config; }
  const Tokenizer& tokenizer() const { return *files_.tokenizer; }
  const EmbeddingPooling& pooling() const { return files_.pooling; }
  const std::string& device() const { return packed_->device(); }
  int64_t dim() const { return dim_; }
  int64_t max_tokens() const { return max_tokens_; }  // an input's tokens, specials included
  double compile_seconds() const { return compile_seconds_; }

  // The text's tokens with the tokenizer's specials, the text's own truncated to fit max_tokens() (as
  // sentence-transformers truncates).
  std::vector<int32_t> Tokenize(std::string_view text) const {
    return WithSpecials(tokenizer().Encode(text, false));
  }
  // A text's token ids (no specials) truncated to fit max_tokens() with the specials, and wrapped in them.
  std::vector<int32_t> WithSpecials(std::span<const int32_t> text_ids) const;
  // The embedding [dim()] of one input's tokens (1 ..= max_tokens() ids in the vocabulary). Thread-safe:
  // concurrent calls take turns.
  std::vector<float> Embed(const std::vector<int32_t>& tokens) const { return EmbedMany({tokens})[0]; }
  std::vector<float> EmbedText(std::string_view text) const { return Embed(Tokenize(text)); }
  // The embeddings of several inputs (each as Embed takes it), in order. Inputs run packed, one after
  // another in steps of at most kPackedTokens tokens, each attending only to its own tokens: a step reads
  // the weights once for all of them. A step takes no more inputs once it holds kStepRows tokens (its
  // products run near their peak by then, while the attention it computes and masks grows with its square).
  // An input longer than kPackedTokens runs alone.
  std::vector<std::vector<float>> EmbedMany(const std::vector<std::vector<int32_t>>& inputs) const;
  static constexpr int64_t kPackedTokens = 1024, kStepRows = 256;

  // Schedule search over a typical step; returns receipts (as LanguageModel::Tune).
  nlohmann::json Tune(double budget_seconds);
  // The program search's receipt: which rewritten program of the encoder's graph runs (as LanguageModel's).
  const nlohmann::json& program_receipt() const { return program_receipt_; }

 private:
  TextEncoder() = default;
  nlohmann::json TuneOn(Executable& exe, const SymbolBindings& bucket, double budget_seconds) const;
  // The bucket each graph is searched and timed at: a typical input's length, and for the packed graph a
  // few of them.
  SymbolBindings Bucket() const {
    return {{"seq", std::min<int64_t>(128, std::max<int64_t>(2, max_tokens_))}};
  }
  SymbolBindings PackedBucket() const {
    const int64_t len = std::min<int64_t>(64, std::max<int64_t>(2, max_tokens_));
    return {{"seq", 4 * len}, {"texts", 4}};
  }
  std::unique_ptr<Executable> Compile(const LmGraphOptions& go, const SymbolBindings& bucket,
                                      const LoadOptions& opts, std::map<std::string, HostTensor>* derived,
                                      nlohmann::json* receipt);

  ModelFiles files_;
  std::shared_ptr<Device> device_;
  std::unique_ptr<Executable> packed_;  // inputs packed: any up to kPackedTokens tokens, several per step
  std::unique_ptr<Executable> exe_;     // one input alone: those longer than that (null when none can be)
  std::map<std::string, HostTensor> packed_derived_weights_;
  std::map<std::string, HostTensor> derived_weights_;  // weights made by rewrites (merged products' rows)
  nlohmann::json program_receipt_;
  int64_t dim_ = 0, max_tokens_ = 0;
  double search_busy_limit_ = 0.2, compile_seconds_ = 0;
  mutable std::mutex run_mutex_;
};

}  // namespace prism
