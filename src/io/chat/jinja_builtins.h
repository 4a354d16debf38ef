// Helpers shared by the Jinja built-ins (filters, tests, methods): argument reading, conversions,
// and Python string algorithms.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "io/chat/jinja_value.h"
#include "ir/error.h"

namespace prism::jinja {

// Reads arguments by position or keyword against a parameter list, rejecting extras.
class Params {
 public:
  Params(std::string fn, Args& args, std::vector<const char*> names)
      : fn_(std::move(fn)), args_(args), names_(std::move(names)) {
    if (args.positional.size() > names_.size())
      throw Error(fn_ + "() takes at most " + std::to_string(names_.size()) + " arguments, got " +
                  std::to_string(args.positional.size()));
    for (const auto& [name, v] : args.named)
      if (std::find_if(names_.begin(), names_.end(), [&](const char* n) { return name == n; }) ==
          names_.end())
        throw Error(fn_ + "() got an unexpected keyword argument '" + name + "'");
  }
  const Value* Find(size_t i) const {
    if (i < args_.positional.size()) return &args_.positional[i];
    for (const auto& [name, v] : args_.named)
      if (name == names_[i]) return &v;
    return nullptr;
  }
  Value Get(size_t i, Value dflt = Value::None()) const {
    const Value* v = Find(i);
    return v ? *v : dflt;
  }
  Value Required(size_t i) const {
    const Value* v = Find(i);
    if (!v) throw Error(fn_ + "() missing required argument '" + names_[i] + "'");
    return *v;
  }
  std::string String(size_t i, const std::string& dflt = "") const {
    const Value* v = Find(i);
    if (!v || v->is_none()) return dflt;
    if (!v->is_string())
      throw Error(fn_ + "() argument '" + names_[i] + "' must be a string, got " + TypeName(*v));
    return v->as_string();
  }
  int64_t Int(size_t i, int64_t dflt) const {
    const Value* v = Find(i);
    if (!v || v->is_none()) return dflt;
    if (!v->is_integer())
      throw Error(fn_ + "() argument '" + names_[i] + "' must be an integer, got " + TypeName(*v));
    return v->as_int();
  }
  bool Bool(size_t i, bool dflt) const {
    const Value* v = Find(i);
    return v ? Truthy(*v) : dflt;
  }

 private:
  std::string fn_;
  Args& args_;
  std::vector<const char*> names_;
};

void NoArgs(const std::string& fn, Args& args);

// Iterates like Python's list(v): list items, dict keys, string characters; undefined is empty.
std::vector<Value> ToList(const Value& v, const char* fn);
const std::string& RequireString(const Value& v, const char* fn);
// Python len(): code points for strings.
size_t Length(const Value& v);
// dict.items() as a list of (key, value) tuples.
Value ItemsOf(const Dict& d);
// Attribute lookup for selectattr/map/sort: "a.b" walks dicts; missing gives undefined.
Value AttrPath(const Value& v, const std::string& path);

// Python str methods and jinja2 string filters (jinja_strings.cpp). Case mapping covers ASCII,
// Latin-1, Latin Extended-A, basic Greek and Cyrillic; other scripts pass through unchanged.
std::string Upper(const std::string& s);
std::string Lower(const std::string& s);
std::string Capitalize(const std::string& s);
std::string PyTitle(const std::string& s);        // str.title()
std::string JinjaTitle(const std::string& s);     // the |title filter
bool IsLowerOrUpper(const Value& v, bool upper);  // str.islower() / str.isupper()
std::string Replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
Value Split(const std::string& s, const Value& sep, int64_t maxsplit);

}  // namespace prism::jinja
