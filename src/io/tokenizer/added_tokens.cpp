// AddedTokenMatcher: trie search plus the lstrip/rstrip/single_word rules of tokenizers' AddedVocabulary.
#include "io/tokenizer/added_tokens.h"

#include <algorithm>

#include "io/tokenizer/unicode.h"

namespace prism {

void AddedTokenMatcher::Add(const std::string& pattern, const AddedToken& token) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (unsigned char c : pattern) {
    uint64_t key = ((uint64_t)node << 8) | c;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      nodes_.push_back(Node{});
      it = edges_.emplace(key, (int32_t)nodes_.size() - 1).first;
    }
    node = it->second;
  }
  first_bytes_.set((unsigned char)pattern[0]);
  if (nodes_[node].token < 0) {  // the first token added with a given pattern wins
    nodes_[node].token = (int32_t)tokens_.size();
    tokens_.push_back(token);
  }
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find(((uint64_t)node << 8) | (unsigned char)text[i]);
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *len = i + 1 - pos;
    }
  }
  return best;
}

namespace {

// Start of the whitespace run that ends text[0, end).
size_t WhitespaceRunStart(std::string_view text, size_t end) {
  size_t i = end;
  while (i > 0) {
    size_t k = i - 1;
    while (k > 0 && ((uint8_t)text[k] & 0xC0) == 0x80) --k;  // back to the lead byte
    if (!unicode::IsWhitespace(unicode::DecodeChar(text, k))) break;
    i = k;
  }
  return i;
}

// End of the whitespace run that starts at text[begin].
size_t WhitespaceRunEnd(std::string_view text, size_t begin) {
  size_t i = begin;
  while (i < text.size() && unicode::IsWhitespace(unicode::DecodeChar(text, i)))
    i += unicode::CharLength((uint8_t)text[i]);
  return i;
}

bool WordCharBefore(std::string_view text, size_t pos) {
  if (pos == 0) return false;
  size_t k = pos - 1;
  while (k > 0 && ((uint8_t)text[k] & 0xC0) == 0x80) --k;
  return unicode::IsWordChar(unicode::DecodeChar(text, k));
}

bool WordCharAt(std::string_view text, size_t pos) {
  return pos < text.size() && unicode::IsWordChar(unicode::DecodeChar(text, pos));
}

}  // namespace

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out) const {
  size_t plain_start = 0;  // where the current plain segment begins
  size_t pos = 0;
  if (!tokens_.empty()) {
    while (pos < text.size()) {
      if (!first_bytes_.test((unsigned char)text[pos])) {
        ++pos;
        continue;
      }
      size_t len = 0;
      int32_t t = LongestAt(text, pos, &len);
      if (t < 0) {
        ++pos;
        continue;
      }
      const AddedToken& tok = tokens_[t];
      size_t start = pos, stop = pos + len;
      pos = stop;  // the search resumes after the match even when the match is rejected
      if (tok.single_word && (WordCharBefore(text, start) || WordCharAt(text, stop))) continue;
      if (tok.lstrip) start = std::max(WhitespaceRunStart(text, start), plain_start);
      if (tok.rstrip) stop = WhitespaceRunEnd(text, stop);
      if (plain_start < start) out->push_back({plain_start, start, -1});
      out->push_back({start, stop, tok.id});
      plain_start = stop;
      pos = std::max(pos, stop);
    }
  }
  if (plain_start < text.size()) out->push_back({plain_start, text.size(), -1});
}

}  // namespace prism
