// The WordPiece model (BERT): each piece greedily as its longest vocab prefix, then "##" continuations.
#pragma once

#include <string>

#include "io/tokenizer/subword_model.h"

namespace prism {

struct WordPieceOptions {
  int32_t unk_id = -1;                    // the whole piece when some part of it is not in the vocab
  std::string continuing_prefix = "##";   // marks a token that continues a word
  size_t max_input_chars_per_word = 100;  // longer pieces are unk outright
};

class WordPieceModel final : public SubwordModel {
 public:
  // vocab: token text -> id. unk_id must be a vocab id.
  WordPieceModel(StringIdMap vocab, WordPieceOptions options);
  // As tokenizers' WordPiece: from each position the longest vocab entry (with the prefix after the first),
  // and the unk token for the whole piece when none matches at some position.
  void Encode(std::string_view piece, std::vector<int32_t>* out) const override;

 private:
  StringIdMap vocab_;
  WordPieceOptions options_;
};

}  // namespace prism
