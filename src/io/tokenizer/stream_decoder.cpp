// StreamDecoder: decodes a short window of tokens and emits only the text that grew, once it is complete.
#include "io/tokenizer/tokenizer.h"
#include "io/tokenizer/unicode.h"

namespace prism {

namespace {
// Held tokens after which text is emitted even if it still ends in U+FFFD (it may be a real U+FFFD).
constexpr size_t kMaxHeld = 8;
// Window size past which a run of tokens that decode to nothing (skipped specials) is dropped.
constexpr size_t kMaxWindow = 32;
// Context tokens kept by Prime and after a long run of silent tokens.
constexpr size_t kContext = 4;

bool EndsIncomplete(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, unicode::kReplacementChar) == 0;
}
}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

void StreamDecoder::Prime(const std::vector<int32_t>& context) {
  size_t keep = std::min(context.size(), kContext);
  window_.assign(context.end() - keep, context.end());
  emitted_ = window_.size();
  shown_ = tokenizer_.Decode(window_, skip_special_);
}

std::string StreamDecoder::Push(int32_t id) {
  window_.push_back(id);
  std::string text = tokenizer_.Decode(window_, skip_special_);
  if (EndsIncomplete(text) && window_.size() - emitted_ < kMaxHeld) return "";  // wait for the rest
  if (text.size() <= shown_.size() && text.compare(0, text.size(), shown_, 0, text.size()) == 0) {
    // Nothing new (e.g. a skipped special token): keep the tokens, they may still matter for spacing.
    if (window_.size() > kMaxWindow) {
      window_.erase(window_.begin(), window_.end() - kContext);
      emitted_ = window_.size();
      shown_ = tokenizer_.Decode(window_, skip_special_);
    }
    return "";
  }
  size_t common = 0;  // normally all of shown_
  while (common < shown_.size() && common < text.size() && shown_[common] == text[common]) ++common;
  std::string out = text.substr(common);
  // The tokens just emitted become the context: they decode cleanly together (a lone byte token would not),
  // and SentencePiece decoders strip a leading space only at the start of what they decode.
  window_.erase(window_.begin(), window_.begin() + emitted_);
  emitted_ = window_.size();
  shown_ = tokenizer_.Decode(window_, skip_special_);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string text = tokenizer_.Decode(window_, skip_special_);
  std::string out = text.size() > shown_.size() ? text.substr(shown_.size()) : std::string();
  window_.clear();
  emitted_ = 0;
  shown_.clear();
  return out;
}

}  // namespace prism
