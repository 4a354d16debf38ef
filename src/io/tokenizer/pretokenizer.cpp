// PreTokenizer: Split / Digits / ByteLevel / Metaspace steps with the semantics of Hugging Face `tokenizers`.
#include "io/tokenizer/pretokenizer.h"

#include <algorithm>
#include <utility>

#include "io/tokenizer/unicode.h"

namespace prism {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

void PreTokenizer::AddSplit(TextPattern pattern, SplitBehavior behavior, bool invert) {
  Step s;
  s.pattern = std::move(pattern);
  s.behavior = behavior;
  s.invert = invert;
  steps_.push_back(std::move(s));
}

void PreTokenizer::AddDigits(bool individual) {
  // tokenizers splits on char::is_numeric (categories Nd, Nl, No = \p{N}); runs when not individual.
  AddSplit(TextPattern::Regex(individual ? R"(\p{N})" : R"(\p{N}+)"), SplitBehavior::kIsolated, false);
}

void PreTokenizer::AddByteLevel(bool add_prefix_space, bool use_regex) {
  Step s;
  s.kind = Kind::kByteLevel;
  if (use_regex) s.pattern = TextPattern::Regex(kGpt2Pattern);
  s.add_prefix_space = add_prefix_space;
  s.use_regex = use_regex;
  steps_.push_back(std::move(s));
}

void PreTokenizer::AddMetaspace(std::string replacement, PrependScheme scheme, bool split) {
  Step s;
  s.kind = Kind::kMetaspace;
  if (split) s.pattern = TextPattern::Literal(replacement);
  s.replacement = std::move(replacement);
  s.scheme = scheme;
  s.split = split;
  steps_.push_back(std::move(s));
}

void PreTokenizer::AddBert(bool punctuation) {
  Step s;
  s.kind = Kind::kBert;
  s.split = punctuation;
  steps_.push_back(std::move(s));
}

bool PreTokenizer::SplitBert(const std::string& piece, bool punctuation, std::vector<std::string>* out) {
  bool first_at_zero = false, first = true;
  size_t start = 0;  // of the word being gathered
  auto emit = [&](size_t b, size_t e) {
    if (b == e) return;
    if (first) first_at_zero = b == 0;
    first = false;
    out->emplace_back(piece, b, e - b);
  };
  for (size_t i = 0; i < piece.size();) {
    const uint32_t c = unicode::DecodeChar(piece, i);
    const size_t n = unicode::CharLength((uint8_t)piece[i]);
    if (unicode::IsWhitespace(c)) {
      emit(start, i);
      start = i + n;
    } else if (punctuation && unicode::IsBertPunctuation(c)) {
      emit(start, i);
      emit(i, i + n);
      start = i + n;
    }
    i += n;
  }
  emit(start, piece.size());
  return first_at_zero;
}

bool PreTokenizer::SplitPiece(const std::string& piece, const TextPattern& pattern, SplitBehavior behavior,
                              bool invert, std::vector<std::string>* out) {
  thread_local std::vector<Span> found;
  found.clear();
  pattern.FindAll(piece, &found);
  // The piece as alternating (span, is_match) parts covering it.
  thread_local std::vector<std::pair<Span, bool>> parts;
  parts.clear();
  size_t prev = 0;
  for (auto [b, e] : found) {
    if (b > prev) parts.push_back({{prev, b}, invert});
    parts.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev < piece.size()) parts.push_back({{prev, piece.size()}, invert});

  thread_local std::vector<Span> spans;
  spans.clear();
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (auto& [sp, m] : parts)
        if (!m) spans.push_back(sp);
      break;
    case SplitBehavior::kIsolated:
      for (auto& [sp, m] : parts) spans.push_back(sp);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (auto& [sp, m] : parts) {
        if (m && !prev_match && !spans.empty()) {
          spans.back().second = sp.second;
        } else {
          spans.push_back(sp);
        }
        prev_match = m;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      // A match joins the part after it: walk backwards, as tokenizers does.
      for (size_t i = parts.size(); i-- > 0;) {
        auto& [sp, m] = parts[i];
        if (m && !prev_match && !spans.empty()) {
          spans.back().first = sp.first;
        } else {
          spans.push_back(sp);
        }
        prev_match = m;
      }
      std::reverse(spans.begin(), spans.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].second == prev_match) {
          spans.back().second = parts[i].first.second;
        } else {
          spans.push_back(parts[i].first);
        }
        prev_match = parts[i].second;
      }
      break;
  }
  bool first_at_zero = false;
  bool first = true;
  for (auto [b, e] : spans) {
    if (b == e) continue;
    if (first) first_at_zero = b == 0;
    first = false;
    out->emplace_back(piece, b, e - b);
  }
  return first_at_zero;
}

void PreTokenizer::Run(std::string_view text, bool at_text_start, std::vector<std::string>* pieces) const {
  pieces->clear();
  if (text.empty()) return;
  pieces->emplace_back(text);
  // Whether (*pieces)[0] begins the original input.
  bool first_at_start = at_text_start;
  thread_local std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    bool new_first_at_start = false;
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string& piece = (*pieces)[i];
      bool starts_input = i == 0 && first_at_start;
      size_t before = next.size();
      bool first_at_zero = true;
      switch (step.kind) {
        case Kind::kSplit:
          first_at_zero = SplitPiece(piece, step.pattern, step.behavior, step.invert, &next);
          break;
        case Kind::kBert: first_at_zero = SplitBert(piece, step.split, &next); break;
        case Kind::kByteLevel:
          if (step.add_prefix_space && piece[0] != ' ') {
            piece.insert(0, " ");  // the added space still maps to the piece's first original character
          }
          if (step.use_regex) {
            first_at_zero &= SplitPiece(piece, step.pattern, SplitBehavior::kIsolated, false, &next);
          } else {
            next.push_back(std::move(piece));
          }
          break;
        case Kind::kMetaspace: {
          std::string s = TextPattern::Literal(" ").ReplaceAll(piece, step.replacement);
          bool prepend =
              step.scheme == PrependScheme::kAlways || (step.scheme == PrependScheme::kFirst && starts_input);
          if (prepend && s.compare(0, step.replacement.size(), step.replacement) != 0) {
            s.insert(0, step.replacement);
          }
          if (step.split) {
            first_at_zero &= SplitPiece(s, step.pattern, SplitBehavior::kMergedWithNext, false, &next);
          } else {
            next.push_back(std::move(s));
          }
          break;
        }
      }
      if (starts_input && next.size() > before) new_first_at_start = first_at_zero;
    }
    first_at_start = new_first_at_start;
    pieces->swap(next);
  }
}

}  // namespace prism
