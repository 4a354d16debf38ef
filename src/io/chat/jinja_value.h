// Runtime values of the Jinja subset used by chat templates, with Python's semantics for printing,
// equality, ordering and JSON (what transformers' jinja2 environment would produce).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace prism::jinja {

class Value;

// An insertion-ordered string-keyed mapping, like a Python dict (templates print and iterate
// dicts in insertion order, so a sorted map would change output).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;

  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes how it prints: (a, b) instead of [a, b]
};

struct Namespace {  // the one mutable object: `{% set ns.x = ... %}` writes through every copy
  Dict attrs;
};

// Arguments of a call: positional then keyword, as written at the call site.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

using Function = std::function<Value(Args&)>;

// Undefined remembers why it is undefined ("'x' is undefined") for the error its use raises.
struct Undefined {
  std::string why;
};

class Value {
 public:
  // Same order as the alternatives of v_, so kind() is the variant index.
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() : v_(Undefined{}) {}
  static Value Undef(std::string why = "") { return Value(Undefined{std::move(why)}); }
  static Value None() { return Value(nullptr); }
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value MakeDict(Dict d);
  static Value MakeNamespace(Dict attrs);
  static Value Func(Function f);
  static Value FromJson(const nlohmann::json& j);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat || kind() == Kind::kBool; }
  bool is_integer() const { return kind() == Kind::kInt || kind() == Kind::kBool; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;   // bool or int
  double as_float() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(v_); }
  const std::string& undefined_why() const { return std::get<Undefined>(v_).why; }

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(std::nullptr_t) : v_(nullptr) {}
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<const ListData>,
               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>, std::shared_ptr<const Function>>
      v_;
};

// Python's type name, for error messages ("str", "int", "dict", ...).
std::string TypeName(const Value& v);
bool Truthy(const Value& v);
// Python str(): what `{{ v }}` prints (undefined prints as "").
std::string Str(const Value& v);
// Python repr(), used for items inside printed lists and dicts.
std::string Repr(const Value& v);
// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16".
std::string FloatRepr(double d);
struct JsonOptions {
  int indent = -1;                            // < 0: single line
  std::string item_separator, key_separator;  // empty: Python's defaults for the indent mode
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps (throws prism::Error for values JSON cannot hold).
std::string ToJson(const Value& v, const JsonOptions& options);
bool Equal(const Value& a, const Value& b);
// Python ordering for numbers, strings and lists: <0, 0, >0; throws for other types.
int Compare(const Value& a, const Value& b);

// UTF-8 helpers: Python strings index code points, not bytes.
// Decodes the code point at byte i (invalid bytes decode as themselves, length 1).
uint32_t DecodeUtf8(std::string_view s, size_t i, size_t* len);
void AppendUtf8(uint32_t cp, std::string& out);
std::vector<std::string> CodePoints(std::string_view s);
size_t CodePointCount(std::string_view s);
bool IsPySpace(uint32_t cp);
// str.strip/lstrip/rstrip: with chars null, strips Python (Unicode) whitespace.
std::string PyStrip(std::string_view s, bool left, bool right, const std::string* chars = nullptr);

}  // namespace prism::jinja
