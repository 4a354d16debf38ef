// UTF-8 handling plus the Unicode services tokenizers need: normalization, whitespace, GPT-2 bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace prism::unicode {

// Length of the UTF-8 unit starting at s[i]: a whole valid character (*valid = true) or the maximal
// invalid prefix to replace by one U+FFFD, as Rust's String::from_utf8_lossy does (*valid = false).
size_t NextUnit(std::string_view s, size_t i, bool* valid);
bool IsValidUtf8(std::string_view s);
std::string ToValidUtf8(std::string_view s);  // invalid subsequences -> U+FFFD

// Byte length of the character whose lead byte is b (1 for stray bytes); for valid UTF-8 only.
inline size_t CharLength(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
uint32_t DecodeChar(std::string_view s, size_t i);  // the code point at s[i] (valid UTF-8)
void AppendUtf8(std::string& out, uint32_t cp);
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

bool IsWhitespace(uint32_t cp);  // Unicode White_Space, as Rust's char::is_whitespace
bool IsWordChar(uint32_t cp);    // alphanumeric or '_'
// BERT's character classes, as tokenizers has them: ASCII punctuation or Unicode P*; Unicode C* (control,
// format, unassigned, private use, surrogate); the CJK ideograph blocks; a nonspacing mark (Mn); any mark
// (M*).
bool IsBertPunctuation(uint32_t cp);
bool IsOther(uint32_t cp);
bool IsChineseChar(uint32_t cp);
bool IsNonspacingMark(uint32_t cp);
bool IsMark(uint32_t cp);
// Each character's full lowercase mapping, without context (Rust's char::to_lowercase, character by
// character: a final sigma stays σ).
std::string Lowercase(std::string_view s);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string Normalize(std::string_view s, NormalForm form);

// GPT-2's reversible map from each byte to a printable character, used by byte-level BPE vocabularies.
const std::array<std::string, 256>& ByteToChar();
// Maps a byte-level vocab string back to raw bytes; false if some character is not in the map.
bool ByteLevelToBytes(std::string_view s, std::string* out);

}  // namespace prism::unicode
