// Normalizers run before pre-tokenization (tokenizer.json "normalizer"): NFC/NFKC/..., Prepend, Replace,
// Lowercase, StripAccents, BertNormalizer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/text_pattern.h"
#include "io/tokenizer/unicode.h"

namespace prism {

class Normalizer {
 public:
  void AddUnicode(unicode::NormalForm form) { steps_.push_back({Kind::kUnicode, form, {}, {}}); }
  // Prepends `text` to non-empty input (SentencePiece's dummy-prefix "▁").
  void AddPrepend(std::string text) { steps_.push_back({Kind::kPrepend, {}, {}, std::move(text)}); }
  void AddReplace(TextPattern pattern, std::string with) {
    steps_.push_back({Kind::kReplace, {}, std::move(pattern), std::move(with)});
  }
  void AddLowercase() { steps_.push_back({Kind::kLowercase, {}, {}, {}}); }
  void AddStripAccents() { steps_.push_back({Kind::kStripMarks, {}, {}, {}}); }  // drops every mark (M*)
  // BertNormalizer: clean_text drops NUL, U+FFFD and other C* characters (but tab, CR, LF) and turns
  // whitespace into ' '; chinese_chars puts spaces around CJK ideographs; strip_accents decomposes (NFD) and
  // drops nonspacing marks (Mn); then lowercase.
  void AddBert(bool clean_text, bool chinese_chars, bool strip_accents, bool lowercase);

  bool empty() const { return steps_.empty(); }
  std::string Apply(std::string_view text) const;

 private:
  enum class Kind {
    kUnicode,
    kPrepend,
    kReplace,
    kLowercase,
    kStripMarks,
    kBertClean,
    kChineseChars,
    kBertAccents
  };
  struct Step {
    Kind kind;
    unicode::NormalForm form;
    TextPattern pattern;
    std::string text;
  };
  std::vector<Step> steps_;
};

}  // namespace prism
