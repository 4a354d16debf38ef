// Normalizer: runs its steps in order, as tokenizers' Sequence normalizer does.
#include "io/tokenizer/normalizer.h"

namespace prism {
namespace {

// The characters of valid UTF-8 text, each kept, dropped or replaced by `map` (which appends to out).
template <class Map>
std::string MapChars(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (size_t i = 0; i < s.size();) {
    const size_t n = unicode::CharLength((uint8_t)s[i]);
    map(unicode::DecodeChar(s, i), s.substr(i, n), out);
    i += n;
  }
  return out;
}

}  // namespace

void Normalizer::AddBert(bool clean_text, bool chinese_chars, bool strip_accents, bool lowercase) {
  if (clean_text) steps_.push_back({Kind::kBertClean, {}, {}, {}});
  if (chinese_chars) steps_.push_back({Kind::kChineseChars, {}, {}, {}});
  if (strip_accents) steps_.push_back({Kind::kBertAccents, {}, {}, {}});
  if (lowercase) AddLowercase();
}

std::string Normalizer::Apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kUnicode: s = unicode::Normalize(s, step.form); break;
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case Kind::kReplace: s = step.pattern.ReplaceAll(s, step.text); break;
      case Kind::kLowercase: s = unicode::Lowercase(s); break;
      case Kind::kStripMarks:
        s = MapChars(s, [](uint32_t c, std::string_view ch, std::string& out) {
          if (!unicode::IsMark(c)) out += ch;
        });
        break;
      case Kind::kBertClean:
        s = MapChars(s, [](uint32_t c, std::string_view ch, std::string& out) {
          const bool keep_control = c == '\t' || c == '\n' || c == '\r';
          if (c == 0 || c == 0xFFFD || (!keep_control && unicode::IsOther(c))) return;
          if (unicode::IsWhitespace(c)) {
            out += ' ';
          } else {
            out += ch;
          }
        });
        break;
      case Kind::kChineseChars:
        s = MapChars(s, [](uint32_t c, std::string_view ch, std::string& out) {
          if (!unicode::IsChineseChar(c)) {
            out += ch;
            return;
          }
          out += ' ';
          out += ch;
          out += ' ';
        });
        break;
      case Kind::kBertAccents:
        s = MapChars(unicode::Normalize(s, unicode::NormalForm::kNFD),
                     [](uint32_t c, std::string_view ch, std::string& out) {
                       if (!unicode::IsNonspacingMark(c)) out += ch;
                     });
        break;
    }
  }
  return s;
}

}  // namespace prism
