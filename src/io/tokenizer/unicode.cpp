// UTF-8 validation/repair, ICU normalization and character classes, the GPT-2 byte <-> character map.
#include "io/tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <unordered_map>

#include "ir/error.h"

namespace prism::unicode {

size_t NextUnit(std::string_view s, size_t i, bool* valid) {
  auto at = [&](size_t k) -> uint8_t { return (uint8_t)s[k]; };
  uint8_t b = at(i);
  *valid = true;
  if (b < 0x80) return 1;
  // Allowed range of the second byte per lead byte (Unicode Table 3-7); later bytes are 80..BF.
  uint8_t lo = 0x80, hi = 0xBF;
  size_t need;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    *valid = false;
    return 1;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) {
      *valid = false;
      return k;
    }
    uint8_t c = at(i + k);
    bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) {
      *valid = false;
      return k;
    }
  }
  return need + 1;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if ((uint8_t)s[i] < 0x80) {
      ++i;
      continue;
    }
    bool valid;
    i += NextUnit(s, i, &valid);
    if (!valid) return false;
  }
  return true;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    bool valid;
    size_t n = NextUnit(s, i, &valid);
    if (valid) {
      out.append(s.substr(i, n));
    } else {
      out.append(kReplacementChar);
    }
    i += n;
  }
  return out;
}

uint32_t DecodeChar(std::string_view s, size_t i) {
  uint8_t b = (uint8_t)s[i];
  size_t n = CharLength(b);
  if (i + n > s.size()) return 0xFFFD;
  uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | ((uint8_t)s[i + k] & 0x3F);
  return cp;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18));
    out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  }
}

bool IsWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool IsWordChar(uint32_t cp) { return cp == '_' || u_isalnum((UChar32)cp); }

bool IsBertPunctuation(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  return u_ispunct((UChar32)cp);
}

bool IsOther(uint32_t cp) { return (U_GET_GC_MASK((UChar32)cp) & U_GC_C_MASK) != 0; }

bool IsChineseChar(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool IsNonspacingMark(uint32_t cp) { return u_charType((UChar32)cp) == U_NON_SPACING_MARK; }
bool IsMark(uint32_t cp) { return (U_GET_GC_MASK((UChar32)cp) & U_GC_M_MASK) != 0; }

std::string Lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = (uint8_t)s[i];
    if (b < 0x80) {
      out += (char)(b >= 'A' && b <= 'Z' ? b + 32 : b);
      ++i;
      continue;
    }
    const size_t n = CharLength(b);
    // One character alone: ICU's full mapping with no neighbours to condition on.
    icu::UnicodeString ch = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data() + i, (int32_t)n));
    ch.toLower(icu::Locale::getRoot()).toUTF8String(out);
    i += n;
  }
  return out;
}

std::string Normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char c : s) ascii &= (uint8_t)c < 0x80;
  if (ascii) return std::string(s);  // ASCII is invariant under every normalization form
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = nullptr;
  switch (form) {
    case NormalForm::kNFC: norm = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNFD: norm = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNFKC: norm = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNFKD: norm = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status)) throw Error(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  icu::StringPiece piece(s.data(), (int32_t)s.size());
  if (norm->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(s);
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, (int32_t)s.size());
  norm->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) throw Error(std::string("ICU normalization failed: ") + u_errorName(status));
  return out;
}

const std::array<std::string, 256>& ByteToChar() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    // Printable Latin-1 bytes map to themselves; the rest take code points 256, 257, ... in byte order.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      AppendUtf8(t[b], printable ? (uint32_t)b : next++);
    }
    return t;
  }();
  return table;
}

bool ByteLevelToBytes(std::string_view s, std::string* out) {
  static const std::unordered_map<uint32_t, uint8_t> inverse = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    const auto& t = ByteToChar();
    for (int b = 0; b < 256; ++b) m[DecodeChar(t[b], 0)] = (uint8_t)b;
    return m;
  }();
  out->clear();
  for (size_t i = 0; i < s.size();) {
    size_t n = CharLength((uint8_t)s[i]);
    auto it = inverse.find(DecodeChar(s, i));
    if (it == inverse.end()) return false;
    out->push_back((char)it->second);
    i += n;
  }
  return true;
}

}  // namespace prism::unicode
