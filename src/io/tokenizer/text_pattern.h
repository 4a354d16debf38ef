// A literal string or a Unicode regex (PCRE2, JIT-compiled) that finds non-overlapping matches in UTF-8 text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prism {

using Span = std::pair<size_t, size_t>;  // [begin, end) byte offsets

class TextPattern {
 public:
  static TextPattern Literal(std::string text);
  // Oniguruma-style patterns as tokenizer.json writes them (\p{L}, \s, (?i:...), lookahead) with Unicode
  // classes.
  static TextPattern Regex(const std::string& pattern);

  // All non-overlapping matches, left to right (appended to *out). `text` must be valid UTF-8.
  void FindAll(std::string_view text, std::vector<Span>* out) const;
  std::string ReplaceAll(std::string_view text, std::string_view with) const;

 private:
  struct Compiled;
  std::string literal_;
  std::shared_ptr<const Compiled> regex_;  // null for a literal
};

}  // namespace prism
