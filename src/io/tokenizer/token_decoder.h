// Decoders (tokenizer.json "decoder"): token strings back to text, step by step like tokenizers does.
#pragma once

#include <string>
#include <vector>

#include "io/tokenizer/text_pattern.h"

namespace prism {

class TokenDecoder {
 public:
  void AddByteLevel() { Add(Kind::kByteLevel); }  // GPT-2 characters -> bytes (lossy UTF-8)
  void AddReplace(TextPattern pattern, std::string with) {
    Step& s = Add(Kind::kReplace);
    s.pattern = std::move(pattern);
    s.text = std::move(with);
  }
  void AddByteFallback() { Add(Kind::kByteFallback); }  // <0xNN> runs -> UTF-8 text
  void AddFuse() { Add(Kind::kFuse); }
  // Removes up to `start` leading and `stop` trailing `content` characters from each token.
  void AddStrip(std::string content, int start, int stop) {
    Step& s = Add(Kind::kStrip);
    s.text = std::move(content);
    s.start = start;
    s.stop = stop;
  }
  // "▁" -> " ", dropping it in the first token when a prefix was prepended at encode time.
  void AddMetaspace(std::string replacement, bool drop_first) {
    Step& s = Add(Kind::kMetaspace);
    s.text = std::move(replacement);
    s.drop_first = drop_first;
  }

  // WordPiece: continuation tokens (starting with `prefix`) lose it, the others get a leading space but the
  // first; cleanup joins punctuation and English contractions back ("do n't" -> "don't") as tokenizers does.
  void AddWordPiece(std::string prefix, bool cleanup) {
    Step& s = Add(Kind::kWordPiece);
    s.text = std::move(prefix);
    s.cleanup = cleanup;
  }

  // The text of the tokens; without steps they are joined by spaces, as tokenizers does.
  std::string Decode(std::vector<std::string> tokens) const;

 private:
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace, kWordPiece };
  struct Step {
    Kind kind = Kind::kFuse;
    TextPattern pattern;
    std::string text;
    int start = 0, stop = 0;
    bool drop_first = false;
    bool cleanup = false;
  };
  Step& Add(Kind kind) {
    steps_.emplace_back().kind = kind;
    return steps_.back();
  }
  std::vector<Step> steps_;
};

}  // namespace prism
