// Pre-tokenizers (tokenizer.json "pre_tokenizer"): cut normalized text into the pieces the model runs on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/text_pattern.h"

namespace prism {

// How a split keeps the pattern's matches (the names of tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

// The pre-tokenizer regexes of well-known models.
extern const char* const kGpt2Pattern;    // GPT-2 / ByteLevel use_regex
extern const char* const kLlama3Pattern;  // Llama 3 (digits in runs of up to three)
extern const char* const kQwen2Pattern;   // Qwen2 (one digit per piece)

class PreTokenizer {
 public:
  void AddSplit(TextPattern pattern, SplitBehavior behavior, bool invert);
  void AddDigits(bool individual);  // \p{N} one by one, or runs
  // Byte-level BPE: optional leading space, optional GPT-2 regex split. The pieces stay raw bytes (the model
  // works on bytes directly), so this must be the last step.
  void AddByteLevel(bool add_prefix_space, bool use_regex);
  void AddMetaspace(std::string replacement, PrependScheme scheme, bool split);
  // BertPreTokenizer: whitespace removed, then each punctuation character (unicode::IsBertPunctuation) a
  // piece of its own. punctuation = false: the whitespace split alone (WhitespaceSplit).
  void AddBert(bool punctuation = true);

  bool empty() const { return steps_.empty(); }
  bool byte_level() const { return !steps_.empty() && steps_.back().kind == Kind::kByteLevel; }

  // Cuts `text` into *pieces (cleared first). at_text_start: `text` begins the caller's original input, which
  // Metaspace's "first" scheme needs (it adds "▁" only there).
  void Run(std::string_view text, bool at_text_start, std::vector<std::string>* pieces) const;

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace, kBert };
  struct Step {
    Kind kind = Kind::kSplit;
    TextPattern pattern;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;
    bool use_regex = false;
    std::string replacement;
    PrependScheme scheme = PrependScheme::kAlways;
    bool split = false;
  };
  // Splits one piece by a pattern; returns whether the first output piece starts at the piece's offset 0.
  static bool SplitPiece(const std::string& piece, const TextPattern& pattern, SplitBehavior behavior,
                         bool invert, std::vector<std::string>* out);
  // Cuts a piece at whitespace (dropped) and around punctuation characters; returns whether the first output
  // piece starts at the piece's offset 0.
  static bool SplitBert(const std::string& piece, bool punctuation, std::vector<std::string>* out);
  std::vector<Step> steps_;
};

}  // namespace prism
