// TextPattern: literal search, or PCRE2 in UTF + UCP mode (Unicode \s, \w, \p{..}, as in Oniguruma).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer/text_pattern.h"

#include <pcre2.h>

#include "io/tokenizer/unicode.h"
#include "ir/error.h"

namespace prism {

struct TextPattern::Compiled {
  pcre2_code* code = nullptr;
  std::string pattern;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// Per-thread match state: a one-pair match block and a JIT stack big enough for long whitespace runs.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchState& ThreadMatchState() {
  thread_local MatchState state;
  return state;
}

pcre2_code* Compile(const std::string& pattern, int* err, PCRE2_SIZE* offset) {
  return pcre2_compile((PCRE2_SPTR)pattern.data(), pattern.size(), PCRE2_UTF | PCRE2_UCP, err, offset,
                       nullptr);
}

// Whether \p{name} is a script (rather than a general category or binary property).
bool IsScriptName(const std::string& name) {
  static const char* const kCategories[] = {"L",  "Lu", "Ll", "Lt", "Lm", "Lo", "L&", "M",  "Mn", "Mc",
                                            "Me", "N",  "Nd", "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe",
                                            "Pi", "Pf", "Po", "S",  "Sm", "Sc", "Sk", "So", "Z",  "Zs",
                                            "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn", "Any"};
  for (const char* c : kCategories)
    if (name == c) return false;
  if (name.find(':') != std::string::npos || name.find('=') != std::string::npos) return false;
  int err;
  PCRE2_SIZE offset;
  pcre2_code* code = Compile("\\p{sc:" + name + "}", &err, &offset);
  bool is_script = code != nullptr;
  pcre2_code_free(code);
  return is_script;
}

// Oniguruma (which tokenizer.json patterns are written for) reads \p{Han} as the Script property, while
// PCRE2 >= 10.40 reads Script_Extensions (which puts "。" in Han); writing \p{sc:Han} keeps Oniguruma's sense.
std::string ToPcre2Syntax(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 >= pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[i + 1];
    size_t close = pattern.find('}', i + 3);
    if ((c == 'p' || c == 'P') && i + 2 < pattern.size() && pattern[i + 2] == '{' &&
        close != std::string::npos) {
      std::string name = pattern.substr(i + 3, close - i - 3);
      bool negated = !name.empty() && name[0] == '^';
      std::string bare = negated ? name.substr(1) : name;
      out +=
          std::string("\\") + c + "{" + (negated ? "^" : "") + (IsScriptName(bare) ? "sc:" : "") + bare + "}";
      i = close;
      continue;
    }
    out += pattern[i];
    out += c;  // any other escape is copied whole, so "\\p" stays a backslash and a 'p'
    ++i;
  }
  return out;
}

}  // namespace

TextPattern TextPattern::Literal(std::string text) {
  if (text.empty()) throw Error("empty literal split/replace pattern");
  TextPattern p;
  p.literal_ = std::move(text);
  return p;
}

TextPattern TextPattern::Regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = Compile(ToPcre2Syntax(pattern), &err, &offset);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw Error("bad regex '" + pattern + "' at offset " + std::to_string(offset) + ": " + (const char*)msg);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  auto compiled = std::make_shared<Compiled>();
  compiled->code = code;
  compiled->pattern = pattern;
  TextPattern p;
  p.regex_ = std::move(compiled);
  return p;
}

void TextPattern::FindAll(std::string_view text, std::vector<Span>* out) const {
  if (!regex_) {
    for (size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size())) {
      out->emplace_back(pos, pos + literal_.size());
    }
    return;
  }
  MatchState& st = ThreadMatchState();
  PCRE2_SIZE start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(regex_->code, (PCRE2_SPTR)text.data(), text.size(), start, PCRE2_NO_UTF_CHECK,
                         st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw Error("regex '" + regex_->pattern + "' failed: " + (const char*)msg);
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    if (ov[1] == ov[0]) {  // empty match: no piece, move on by one character
      if (ov[0] >= text.size()) break;
      start = ov[0] + unicode::CharLength((uint8_t)text[ov[0]]);
      continue;
    }
    out->emplace_back(ov[0], ov[1]);
    start = ov[1];
  }
}

std::string TextPattern::ReplaceAll(std::string_view text, std::string_view with) const {
  std::vector<Span> spans;
  FindAll(text, &spans);
  if (spans.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + spans.size() * with.size());
  size_t prev = 0;
  for (auto [b, e] : spans) {
    out.append(text.substr(prev, b - prev));
    out.append(with);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace prism
