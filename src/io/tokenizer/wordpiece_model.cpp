// WordPieceModel: greedy longest-match-first over a word's characters, as tokenizers and BERT do.
#include "io/tokenizer/wordpiece_model.h"

#include "io/tokenizer/unicode.h"
#include "ir/error.h"

namespace prism {

WordPieceModel::WordPieceModel(StringIdMap vocab, WordPieceOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  if (options_.unk_id < 0) throw Error("WordPiece: the unk token is not in the vocab");
}

void WordPieceModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  size_t chars = 0;
  for (size_t i = 0; i < piece.size(); i += unicode::CharLength((uint8_t)piece[i])) ++chars;
  if (chars > options_.max_input_chars_per_word) {
    out->push_back(options_.unk_id);
    return;
  }
  const size_t first = out->size();
  std::string candidate;
  for (size_t start = 0; start < piece.size();) {
    size_t end = piece.size();
    int32_t found = -1;
    while (start < end) {
      std::string_view sub = piece.substr(start, end - start);
      if (start > 0) {
        candidate.assign(options_.continuing_prefix);
        candidate.append(sub);
        sub = candidate;
      }
      if (auto it = vocab_.find(sub); it != vocab_.end()) {
        found = it->second;
        break;
      }
      // Drop the last character.
      do --end;
      while (end > start && ((uint8_t)piece[end] & 0xC0) == 0x80);
    }
    if (found < 0) {
      out->resize(first);
      out->push_back(options_.unk_id);
      return;
    }
    out->push_back(found);
    start = end;
  }
}

}  // namespace prism
