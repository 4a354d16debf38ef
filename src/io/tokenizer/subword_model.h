// The model step of a tokenizer: one pre-tokenized piece -> token ids (BPE, WordPiece).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace prism {

// Heterogeneous-lookup hash so maps keyed by std::string accept std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class SubwordModel {
 public:
  virtual ~SubwordModel() = default;
  // Appends the ids of one piece (the model's alphabet: valid UTF-8, or raw bytes for byte-level BPE).
  virtual void Encode(std::string_view piece, std::vector<int32_t>* out) const = 0;
};

}  // namespace prism
