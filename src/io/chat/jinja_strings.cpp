// Python string algorithms for the Jinja built-ins: case mapping, title case, replace, split.
#include "io/chat/jinja_builtins.h"

namespace prism::jinja {
namespace {

bool AsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Simple case mapping for ASCII, Latin-1, Latin Extended-A, basic Greek and Cyrillic; other
// scripts pass through unchanged (Python maps all of Unicode).
uint32_t UpperCp(uint32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if (c == 0x3C2) return 0x3A3;  // final sigma
  if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t LowerCp(uint32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c | 1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
  if ((c >= 0x391 && c <= 0x3A9 && c != 0x3A2)) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool Cased(uint32_t c) { return UpperCp(c) != c || LowerCp(c) != c || c == 0xDF; }

void AppendCase(uint32_t c, bool upper, std::string& out) {
  if (upper && c == 0xDF) {  // ß
    out += "SS";
    return;
  }
  AppendUtf8(upper ? UpperCp(c) : LowerCp(c), out);
}

// Maps each code point; `upper_at(index, cp, previous cp)` decides upper (true) or lower (false).
template <typename F>
std::string MapCase(const std::string& s, F upper_at) {
  std::string out;
  uint32_t prev = 0;
  size_t index = 0;
  for (size_t i = 0, n; i < s.size(); i += n, ++index) {
    uint32_t c = DecodeUtf8(s, i, &n);
    AppendCase(c, upper_at(index, c, prev), out);
    prev = c;
  }
  return out;
}

}  // namespace

std::string Upper(const std::string& s) {
  return MapCase(s, [](size_t, uint32_t, uint32_t) { return true; });
}
std::string Lower(const std::string& s) {
  return MapCase(s, [](size_t, uint32_t, uint32_t) { return false; });
}
std::string Capitalize(const std::string& s) {
  return MapCase(s, [](size_t i, uint32_t, uint32_t) { return i == 0; });
}
// Python str.title(): a cased letter after an uncased character starts a word.
std::string PyTitle(const std::string& s) {
  return MapCase(s, [](size_t i, uint32_t, uint32_t prev) { return i == 0 || !Cased(prev); });
}
// jinja2's title filter: words start after whitespace or one of "-({[<".
std::string JinjaTitle(const std::string& s) {
  return MapCase(s, [](size_t i, uint32_t, uint32_t prev) {
    return i == 0 || IsPySpace(prev) || prev == '-' || prev == '(' || prev == '{' || prev == '[' ||
           prev == '<';
  });
}

std::string Replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts the replacement around every character
    std::vector<std::string> cps = CodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  size_t pos = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
  }
  return out + s.substr(pos);
}

Value Split(const std::string& s, const Value& sep_v, int64_t maxsplit) {
  std::vector<Value> parts;
  if (sep_v.is_none()) {  // runs of whitespace, no empty parts
    std::vector<std::string> cps = CodePoints(s);
    auto space = [&](size_t i) {
      size_t n;
      return IsPySpace(DecodeUtf8(cps[i], 0, &n));
    };
    size_t i = 0;
    while (true) {
      while (i < cps.size() && space(i)) ++i;
      if (i == cps.size()) break;
      std::string part;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        for (size_t j = i; j < cps.size(); ++j) part += cps[j];
        parts.emplace_back(std::move(part));  // the remainder keeps its trailing whitespace
        break;
      }
      while (i < cps.size() && !space(i)) part += cps[i++];
      parts.emplace_back(std::move(part));
    }
    return Value::List(std::move(parts));
  }
  const std::string& sep = RequireString(sep_v, "split()");
  if (sep.empty()) throw Error("split(): empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = s.find(sep, pos);
    if (hit == std::string::npos) break;
    parts.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  parts.emplace_back(s.substr(pos));
  return Value::List(std::move(parts));
}

bool IsLowerOrUpper(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.as_string()) {
    if (!AsciiAlpha(c)) continue;
    cased = true;
    if ((c >= 'A' && c <= 'Z') != upper) return false;
  }
  return cased;
}

}  // namespace prism::jinja
