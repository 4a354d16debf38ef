// Jinja lexer: text/tag splitting with jinja2's whitespace control (trim_blocks, lstrip_blocks, -/+),
// and the expression tokens inside {{ }} and {% %}.
#include <algorithm>
#include <cstring>

#include "io/chat/jinja_ast.h"
#include "ir/error.h"

namespace prism::jinja {

std::string Where(Pos p) {
  return "chat template " + std::to_string(p.line) + ":" + std::to_string(p.col) + ": ";
}

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

class Lexer {
 public:
  explicit Lexer(const std::string& source) {
    // jinja2 normalizes \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False).
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;  // did the previous match end a line (lstrip_blocks needs this)
    while (pos < src_.size()) {
      size_t tag = FindTagStart(pos);
      if (tag == std::string::npos) {
        EmitText(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];
      const char sign =
          (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) ? src_[tag + 2] : 0;
      std::string text = src_.substr(pos, tag - pos);
      size_t raw_end = 0;
      bool raw = kind == '%' && MatchRawBegin(tag, &raw_end);
      EmitText(pos, StripBeforeTag(text, sign, kind != '{', line_starting));
      if (raw) {
        pos = LexRaw(tag, raw_end, &line_starting);
      } else if (kind == '#') {
        pos = SkipComment(tag, sign ? tag + 3 : tag + 2, &line_starting);
      } else {
        pos = LexTag(tag, kind == '%', sign ? tag + 3 : tag + 2, &line_starting);
      }
    }
    tokens_.push_back({Token::Type::kEof, "", At(src_.size())});
    return std::move(tokens_);
  }

 private:
  Pos At(size_t offset) const {
    size_t line = static_cast<size_t>(std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) -
                                      line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  [[noreturn]] void Fail(size_t offset, const std::string& what) const {
    throw Error(Where(At(offset)) + what);
  }

  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  size_t SkipSpace(size_t p) const {  // Python's \s*, which includes Unicode spaces
    size_t len;
    while (p < src_.size() && IsPySpace(DecodeUtf8(src_, p, &len))) p += len;
    return p;
  }

  // Whitespace control on the text before a tag: '-' strips all trailing whitespace; otherwise
  // lstrip_blocks removes spaces between the line start and a block or comment tag.
  std::string StripBeforeTag(const std::string& text, char sign, bool is_block, bool line_starting) const {
    if (sign == '-') return PyStrip(text, false, true);
    if (sign == '+' || !is_block) return text;
    size_t line_pos = text.rfind('\n');
    line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
    if (line_pos == 0 && !line_starting) return text;
    std::string rest = text.substr(line_pos);
    if (!rest.empty() && PyStrip(rest, true, true).empty()) return text.substr(0, line_pos);
    return text;
  }

  void EmitText(size_t offset, std::string text) {
    if (!text.empty()) tokens_.push_back({Token::Type::kText, std::move(text), At(offset)});
  }

  // Matches `{%[-+]? word [-]?%}` at p; for end tags, `+%}` is allowed and trim_blocks applies.
  bool MatchWordTag(size_t p, const char* word, bool is_end, char* sign, size_t* end) const {
    if (src_.compare(p, 2, "{%") != 0) return false;
    p += 2;
    *sign = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p++] : 0;
    p = SkipSpace(p);
    size_t len = std::strlen(word);
    if (src_.compare(p, len, word) != 0 || (p + len < src_.size() && IsNameChar(src_[p + len]))) return false;
    p = SkipSpace(p + len);
    if (is_end && src_.compare(p, 3, "+%}") == 0) {
      *end = p + 3;
    } else if (src_.compare(p, 3, "-%}") == 0) {
      *end = SkipSpace(p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      *end = p + 2;
      if (is_end && *end < src_.size() && src_[*end] == '\n') ++*end;  // trim_blocks
    } else {
      return false;
    }
    return true;
  }

  bool MatchRawBegin(size_t tag, size_t* end) const {
    char sign;
    return MatchWordTag(tag, "raw", false, &sign, end);
  }

  size_t LexRaw(size_t tag, size_t begin_end, bool* line_starting) {
    bool starting = src_[begin_end - 1] == '\n';
    for (size_t p = src_.find("{%", begin_end); p != std::string::npos; p = src_.find("{%", p + 1)) {
      char sign;
      size_t end;
      if (MatchWordTag(p, "endraw", true, &sign, &end)) {
        EmitText(begin_end, StripBeforeTag(src_.substr(begin_end, p - begin_end), sign, true, starting));
        *line_starting = src_[end - 1] == '\n';
        return end;
      }
    }
    Fail(tag, "missing {% endraw %} for this {% raw %}");
  }

  size_t SkipComment(size_t tag, size_t content, bool* line_starting) {
    size_t close = src_.find("#}", content);
    if (close == std::string::npos) Fail(tag, "unclosed comment '{#'");
    size_t end = close + 2;
    char sign = close > content ? src_[close - 1] : 0;
    if (sign == '-') {
      end = SkipSpace(end);
    } else if (sign != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;  // trim_blocks applies to comments too
    }
    *line_starting = src_[end - 1] == '\n';
    return end;
  }

  size_t LexTag(size_t tag, bool is_block, size_t p, bool* line_starting) {
    tokens_.push_back({is_block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", At(tag)});
    std::string brackets;  // open brackets; tag ends are only recognized when balanced
    while (true) {
      p = SkipSpace(p);
      if (p >= src_.size()) Fail(tag, std::string("unclosed tag '") + (is_block ? "{%" : "{{") + "'");
      if (brackets.empty()) {
        size_t end = 0;
        if (is_block) {
          if (src_.compare(p, 3, "+%}") == 0) {
            end = p + 3;
          } else if (src_.compare(p, 3, "-%}") == 0) {
            end = SkipSpace(p + 3);
          } else if (src_.compare(p, 2, "%}") == 0) {
            end = p + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
          }
        } else if (src_.compare(p, 3, "-}}") == 0) {
          end = SkipSpace(p + 3);
        } else if (src_.compare(p, 2, "}}") == 0) {
          end = p + 2;
        }
        if (end != 0) {
          tokens_.push_back({is_block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", At(p)});
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      p = LexExprToken(p, brackets);
    }
  }

  size_t LexExprToken(size_t p, std::string& brackets) {
    const char c = src_[p];
    if (c == '\'' || c == '"') return LexString(p);
    if (IsDigit(c)) return LexNumber(p);
    if (IsNameStart(c)) {
      size_t e = p;
      while (e < src_.size() && IsNameChar(src_[e])) ++e;
      tokens_.push_back({Token::Type::kName, src_.substr(p, e - p), At(p)});
      return e;
    }
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                       "]",  "(",  ")",  "{",  "}",  "<",  ">", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      size_t len = std::strlen(op);
      if (src_.compare(p, len, op) != 0) continue;
      if (len == 1 && std::strchr("([{", c)) brackets += c == '(' ? ')' : c == '[' ? ']' : '}';
      if (len == 1 && std::strchr(")]}", c)) {
        if (brackets.empty()) Fail(p, std::string("unexpected '") + c + "'");
        if (brackets.back() != c)
          Fail(p, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
        brackets.pop_back();
      }
      tokens_.push_back({Token::Type::kOp, op, At(p)});
      return p + len;
    }
    Fail(p, std::string("unexpected character '") + c + "'");
  }

  size_t LexNumber(size_t p) {
    auto digits = [&](size_t q) {  // (\d+_)*\d+
      while (q < src_.size() &&
             (IsDigit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && IsDigit(src_[q + 1]))))
        ++q;
      return q;
    };
    size_t e = digits(p);
    bool is_float = false;
    bool after_dot = p > 0 && src_[p - 1] == '.';  // `x.0` is an attribute index, never a float
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && IsDigit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    Token t{is_float ? Token::Type::kFloat : Token::Type::kInt, text, At(p)};
    try {
      if (is_float)
        t.float_value = std::stod(text);
      else
        t.int_value = std::stoll(text);
    } catch (const std::exception&) {
      Fail(p, "number literal out of range: " + text);
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  // String literal with Python's unicode-escape decoding (\n, \t, \xhh, \uXXXX, ...).
  size_t LexString(size_t p) {
    const char quote = src_[p];
    std::string value;
    size_t i = p + 1;
    auto hex = [&](size_t at, int n, uint32_t* cp) {
      if (at + static_cast<size_t>(n) > src_.size()) return false;
      *cp = 0;
      for (int k = 0; k < n; ++k) {
        char h = src_[at + static_cast<size_t>(k)];
        int d = IsDigit(h)               ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) return false;
        *cp = *cp * 16 + static_cast<uint32_t>(d);
      }
      return true;
    };
    while (true) {
      if (i >= src_.size()) Fail(p, "unterminated string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        ++i;
        continue;
      }
      char e = src_[i + 1];
      uint32_t cp;
      static const char kSimple[] = "nrtabfv\\'\"";
      static const char kDecoded[] = "\n\r\t\a\b\f\v\\'\"";
      if (const char* s = std::strchr(kSimple, e); s != nullptr && e != 0) {
        value += kDecoded[s - kSimple];
        i += 2;
      } else if (e == '\n') {  // line continuation
        i += 2;
      } else if (e == 'x' && hex(i + 2, 2, &cp)) {
        AppendUtf8(cp, value);
        i += 4;
      } else if (e == 'u' && hex(i + 2, 4, &cp)) {
        AppendUtf8(cp, value);
        i += 6;
      } else if (e == 'U' && hex(i + 2, 8, &cp) && cp <= 0x10FFFF) {
        AppendUtf8(cp, value);
        i += 10;
      } else if (e >= '0' && e <= '7') {
        cp = 0;
        size_t k = i + 1;
        for (int n = 0; n < 3 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++n, ++k)
          cp = cp * 8 + static_cast<uint32_t>(src_[k] - '0');
        AppendUtf8(cp, value);
        i = k;
      } else if (e == 'x' || e == 'u' || e == 'U' || e == 'N') {
        Fail(i, std::string("unsupported or malformed escape '\\") + e + "' in string literal");
      } else {  // unknown escapes keep their backslash, as in Python
        value += '\\';
        ++i;
      }
    }
    tokens_.push_back({Token::Type::kString, std::move(value), At(p)});
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(const std::string& source) { return Lexer(source).Run(); }

}  // namespace prism::jinja
