// Added/special tokens ("<|im_start|>", "</s>", ...) found in text before BPE runs, with tokenizers' flags.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace prism {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;      // dropped by Decode(skip_special)
  bool lstrip = false;       // also swallows whitespace on its left
  bool rstrip = false;       // also swallows whitespace on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched in normalized text (else in the raw input)
};

// A text segment: a matched token (id >= 0) or plain text (id == -1), as [begin, end) byte offsets.
struct Segment {
  size_t begin, end;
  int32_t id;
};

// Finds added tokens leftmost-longest (like tokenizers' Aho-Corasick matcher) with a byte trie.
class AddedTokenMatcher {
 public:
  // `pattern` is what is searched for (the content, normalized when the token is).
  void Add(const std::string& pattern, const AddedToken& token);
  bool empty() const { return tokens_.empty(); }
  // Cuts text into token and plain segments (empty plain segments are left out).
  void Split(std::string_view text, std::vector<Segment>* out) const;

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ when a pattern ends here
  };
  // Longest match starting at `pos`: token index and length, or -1.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* len) const;
  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::bitset<256> first_bytes_;
  std::vector<AddedToken> tokens_;
};

}  // namespace prism
