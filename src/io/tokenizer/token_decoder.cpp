// TokenDecoder: each step maps the list of token strings to a new list; the result is their concatenation.
#include "io/tokenizer/token_decoder.h"

#include "io/tokenizer/unicode.h"

namespace prism {

namespace {

// "<0xNN>" -> NN, or -1.
int ByteTokenValue(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::vector<std::string> ByteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  size_t byte_tokens = 0;
  auto flush = [&] {
    if (byte_tokens == 0) return;
    if (unicode::IsValidUtf8(bytes)) {
      out.push_back(bytes);
    } else {  // tokenizers gives one U+FFFD per byte token when the run is not valid UTF-8
      for (size_t i = 0; i < byte_tokens; ++i) out.emplace_back(unicode::kReplacementChar);
    }
    bytes.clear();
    byte_tokens = 0;
  };
  for (auto& t : tokens) {
    int b = ByteTokenValue(t);
    if (b >= 0) {
      bytes.push_back((char)b);
      ++byte_tokens;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

std::string Strip(const std::string& token, const std::string& ch, int start, int stop) {
  size_t b = 0, e = token.size();
  for (int i = 0; i < start && token.compare(b, ch.size(), ch) == 0 && b < e; ++i) b += ch.size();
  for (int i = 0; i < stop && e >= b + ch.size() && token.compare(e - ch.size(), ch.size(), ch) == 0; ++i)
    e -= ch.size();
  return token.substr(b, e - b);
}

// tokenizers' wordpiece cleanup, in its order.
std::string WordPieceCleanup(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) s = TextPattern::Literal(from).ReplaceAll(s, to);
  return s;
}

}  // namespace

std::string TokenDecoder::Decode(std::vector<std::string> tokens) const {
  if (steps_.empty()) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kByteLevel: {
        std::string bytes, raw;
        for (const auto& t : tokens) {
          // A token with a character outside the byte map (an added token, say) is taken as it is.
          bytes += unicode::ByteLevelToBytes(t, &raw) ? raw : t;
        }
        tokens.assign(1, unicode::ToValidUtf8(bytes));
        break;
      }
      case Kind::kReplace:
        for (auto& t : tokens) t = step.pattern.ReplaceAll(t, step.text);
        break;
      case Kind::kByteFallback: tokens = ByteFallback(std::move(tokens)); break;
      case Kind::kFuse: {
        std::string fused;
        for (const auto& t : tokens) fused += t;
        tokens.assign(1, std::move(fused));
        break;
      }
      case Kind::kStrip:
        for (auto& t : tokens) t = Strip(t, step.text, step.start, step.stop);
        break;
      case Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string out;
          const std::string& t = tokens[i];
          for (size_t pos = 0; pos < t.size();) {
            if (t.compare(pos, step.text.size(), step.text) == 0) {
              if (!(i == 0 && step.drop_first)) out += ' ';
              pos += step.text.size();
            } else {
              out += t[pos++];
            }
          }
          tokens[i] = std::move(out);
        }
        break;
      case Kind::kWordPiece:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          if (i > 0 && t.compare(0, step.text.size(), step.text) == 0) {
            t.erase(0, step.text.size());
          } else if (i > 0) {
            t = ' ' + t;
          }
          if (step.cleanup) t = WordPieceCleanup(std::move(t));
        }
        break;
    }
  }
  std::string text;
  for (const auto& t : tokens) text += t;
  return text;
}

}  // namespace prism
