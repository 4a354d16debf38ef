// PipelineTokenizer: the one Tokenizer implementation; the loaders (HF, llama2.c, GGUF) only fill its spec.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/tokenizer/added_tokens.h"
#include "io/tokenizer/bpe_model.h"
#include "io/tokenizer/normalizer.h"
#include "io/tokenizer/pretokenizer.h"
#include "io/tokenizer/token_decoder.h"
#include "io/tokenizer/tokenizer.h"

namespace prism {

// Everything that defines a tokenizer, in the order Encode applies it.
struct TokenizerSpec {
  std::vector<std::string> vocab;       // raw token strings by id, added tokens included ("" for unused ids)
  std::vector<AddedToken> added;        // matched in the text before anything else
  Normalizer normalizer;                // applied to the text between added tokens
  PreTokenizer pre_tokenizer;           // cuts normalized text into pieces
  std::unique_ptr<SubwordModel> model;  // piece -> ids (BPE, WordPiece)
  std::vector<int32_t> prefix_ids;      // post-processor: added around the ids when add_special
  std::vector<int32_t> suffix_ids;
  TokenDecoder decoder;
  std::vector<int32_t> special_ids;  // also dropped by skip_special, beyond added tokens marked special
  int32_t bos_id = -1, eos_id = -1;
  bool strip_space_after_bos = false;  // llama2.c: a token right after BOS loses its leading space
};

class PipelineTokenizer final : public Tokenizer {
 public:
  explicit PipelineTokenizer(TokenizerSpec spec);

  std::vector<int32_t> Encode(std::string_view text, bool add_special) const override;
  std::vector<int32_t> WithSpecial(std::span<const int32_t> ids) const override;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t VocabSize() const override { return (int32_t)spec_.vocab.size(); }
  int32_t BosId() const override { return spec_.bos_id; }
  int32_t EosId() const override { return spec_.eos_id; }
  std::string TokenText(int32_t id) const override;
  std::optional<int32_t> TokenId(std::string_view piece) const override;
  bool IsSpecial(int32_t id) const override { return id >= 0 && id < VocabSize() && special_[id]; }

 private:
  // Normalizes, splits and BPE-encodes text that holds no raw-matched added token.
  void EncodeText(std::string_view text, bool at_text_start, std::vector<int32_t>* ids) const;

  TokenizerSpec spec_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // the others, searched in normalized text
  std::vector<bool> special_;
  StringIdMap text_to_id_;
};

// Helpers shared by the loaders.

// What each vocab string stands for in the model's alphabet: raw bytes for byte-level vocabularies (a string
// outside GPT-2's byte map becomes ""), the string itself otherwise.
std::vector<std::string> ModelPieces(const std::vector<std::string>& vocab, bool byte_level);
// Splits a "left right" merge line; throws naming `where` when there is no space.
std::pair<std::string, std::string> SplitMergeLine(const std::string& line, const std::string& where,
                                                   size_t index);
// Adds ranked merges (rank = position) resolved through `ids`; throws naming `where` for unknown tokens.
void AddRankedMerges(const std::vector<std::pair<std::string, std::string>>& merges, const StringIdMap& ids,
                     const std::string& where, BpeModel* model);

}  // namespace prism
