// Jinja built-ins other than filters: tests (defined, none, equalto, ...), str and dict methods,
// globals (raise_exception, namespace, range, dict, strftime_now), and the shared helpers.
#include "io/chat/jinja_builtins.h"

#include <algorithm>
#include <ctime>
#include <unordered_map>

#include "io/chat/jinja_eval.h"

namespace prism::jinja {

void NoArgs(const std::string& fn, Args& args) { Params(fn, args, {}); }

std::vector<Value> ToList(const Value& v, const char* fn) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, e] : v.as_dict().entries) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (auto& c : CodePoints(v.as_string())) out.emplace_back(std::move(c));
      return out;
    }
    default: throw Error(std::string(fn) + ": '" + TypeName(v) + "' object is not iterable");
  }
}

const std::string& RequireString(const Value& v, const char* fn) {
  if (!v.is_string()) throw Error(std::string(fn) + " needs a string, got " + TypeName(v));
  return v.as_string();
}

size_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return CodePointCount(v.as_string());
    case Value::Kind::kList: return v.as_list().items.size();
    case Value::Kind::kDict: return v.as_dict().entries.size();
    default: throw Error("object of type '" + TypeName(v) + "' has no len()");
  }
}

Value ItemsOf(const Dict& d) {
  std::vector<Value> items;
  for (const auto& [k, v] : d.entries) items.push_back(Value::List({Value(k), v}, true));
  return Value::List(std::move(items));
}

// Attribute lookup for selectattr/map/sort: "a.b" walks dicts; missing gives undefined.
Value AttrPath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const Value* next = nullptr;
    if (cur.is_dict())
      next = cur.as_dict().Find(key);
    else if (cur.kind() == Value::Kind::kNamespace)
      next = cur.as_namespace().attrs.Find(key);
    if (next == nullptr) return Value::Undef("'" + key + "' is undefined");
    cur = *next;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

namespace {

using TestFn = bool (*)(const Value&, Args&);

Value OneArg(const char* test, Args& a) {
  if (a.positional.size() != 1 || !a.named.empty())
    throw Error(std::string("test '") + test + "' takes one argument");
  return a.positional[0];
}

const std::unordered_map<std::string, TestFn>& Tests() {
  static const std::unordered_map<std::string, TestFn> tests = {
      {"defined", [](const Value& v, Args&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, Args&) { return v.is_undefined(); }},
      {"none", [](const Value& v, Args&) { return v.is_none(); }},
      {"string", [](const Value& v, Args&) { return v.is_string(); }},
      {"mapping", [](const Value& v, Args&) { return v.is_dict(); }},
      {"iterable",
       [](const Value& v, Args&) { return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined(); }},
      {"sequence",
       [](const Value& v, Args&) { return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined(); }},
      {"number", [](const Value& v, Args&) { return v.is_number(); }},
      {"integer", [](const Value& v, Args&) { return v.kind() == Value::Kind::kInt; }},
      {"float", [](const Value& v, Args&) { return v.kind() == Value::Kind::kFloat; }},
      {"boolean", [](const Value& v, Args&) { return v.kind() == Value::Kind::kBool; }},
      {"true", [](const Value& v, Args&) { return v.kind() == Value::Kind::kBool && v.as_bool(); }},
      {"false", [](const Value& v, Args&) { return v.kind() == Value::Kind::kBool && !v.as_bool(); }},
      {"callable", [](const Value& v, Args&) { return v.kind() == Value::Kind::kFunction; }},
      {"equalto", [](const Value& v, Args& a) { return Equal(v, OneArg("equalto", a)); }},
      {"eq", [](const Value& v, Args& a) { return Equal(v, OneArg("eq", a)); }},
      {"==", [](const Value& v, Args& a) { return Equal(v, OneArg("==", a)); }},
      {"ne", [](const Value& v, Args& a) { return !Equal(v, OneArg("ne", a)); }},
      {"!=", [](const Value& v, Args& a) { return !Equal(v, OneArg("!=", a)); }},
      {"sameas",
       [](const Value& v, Args& a) {
         Value o = OneArg("sameas", a);
         return v.kind() == o.kind() && Equal(v, o);
       }},
      {"lt", [](const Value& v, Args& a) { return Compare(v, OneArg("lt", a)) < 0; }},
      {"le", [](const Value& v, Args& a) { return Compare(v, OneArg("le", a)) <= 0; }},
      {"gt", [](const Value& v, Args& a) { return Compare(v, OneArg("gt", a)) > 0; }},
      {"ge", [](const Value& v, Args& a) { return Compare(v, OneArg("ge", a)) >= 0; }},
      {"in",
       [](const Value& v, Args& a) {
         Value c = OneArg("in", a);
         if (c.is_string()) return v.is_string() && c.as_string().find(v.as_string()) != std::string::npos;
         if (c.is_dict()) return v.is_string() && c.as_dict().Find(v.as_string()) != nullptr;
         for (const Value& x : ToList(c, "in"))
           if (Equal(x, v)) return true;
         return false;
       }},
      {"odd", [](const Value& v, Args&) { return v.is_integer() && v.as_int() % 2 != 0; }},
      {"even", [](const Value& v, Args&) { return v.is_integer() && v.as_int() % 2 == 0; }},
      {"divisibleby",
       [](const Value& v, Args& a) {
         Value d = OneArg("divisibleby", a);
         if (!v.is_integer() || !d.is_integer() || d.as_int() == 0)
           throw Error("divisibleby needs non-zero integers");
         return v.as_int() % d.as_int() == 0;
       }},
      {"lower", [](const Value& v, Args&) { return IsLowerOrUpper(v, false); }},
      {"upper", [](const Value& v, Args&) { return IsLowerOrUpper(v, true); }},
  };
  return tests;
}

bool AffixMatch(const std::string& s, const Value& affix, bool prefix, const char* fn) {
  if (affix.is_list()) {
    for (const Value& a : affix.as_list().items)
      if (AffixMatch(s, a, prefix, fn)) return true;
    return false;
  }
  const std::string& a = RequireString(affix, fn);
  return prefix ? s.starts_with(a) : s.ends_with(a);
}

Value StringMethod(const std::string& s, const std::string& name, Args& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(name, a, {"chars"});
    Value chars = p.Get(0);
    std::string c = chars.is_none() ? "" : RequireString(chars, "strip()");
    return Value(PyStrip(s, name != "rstrip", name != "lstrip", chars.is_none() ? nullptr : &c));
  }
  if (name == "split") {
    Params p(name, a, {"sep", "maxsplit"});
    return Split(s, p.Get(0), p.Int(1, -1));
  }
  if (name == "startswith" || name == "endswith") {
    Params p(name, a, {"prefix"});
    return Value(AffixMatch(s, p.Required(0), name == "startswith", name.c_str()));
  }
  if (name == "upper") return NoArgs(name, a), Value(Upper(s));
  if (name == "lower") return NoArgs(name, a), Value(Lower(s));
  if (name == "title") return NoArgs(name, a), Value(PyTitle(s));
  if (name == "capitalize") return NoArgs(name, a), Value(Capitalize(s));
  if (name == "replace") {
    Params p(name, a, {"old", "new", "count"});
    return Value(Replace(s, RequireString(p.Required(0), "replace()"),
                         RequireString(p.Required(1), "replace()"), p.Int(2, -1)));
  }
  if (name == "find" || name == "count") {
    Params p(name, a, {"sub"});
    const Value sub_value = p.Required(0);
    const std::string& sub = RequireString(sub_value, name.c_str());
    if (name == "find") {
      size_t hit = s.find(sub);
      return Value(hit == std::string::npos ? int64_t{-1}
                                            : static_cast<int64_t>(CodePointCount(s.substr(0, hit))));
    }
    if (sub.empty()) return Value(static_cast<int64_t>(CodePointCount(s) + 1));
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    Params p(name, a, {"iterable"});
    std::string out;
    std::vector<Value> items = ToList(p.Required(0), "join()");
    for (size_t i = 0; i < items.size(); ++i) out += (i ? s : "") + RequireString(items[i], "join()");
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace") {
    NoArgs(name, a);
    if (s.empty()) return Value(false);
    for (const std::string& cp : CodePoints(s)) {
      size_t n;
      uint32_t c = DecodeUtf8(cp, 0, &n);
      bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                : name == "isalpha" ? ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
                                    : IsPySpace(c);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "islower" || name == "isupper")
    return NoArgs(name, a), Value(IsLowerOrUpper(Value(s), name == "isupper"));
  throw Error("unsupported str method '" + name + "'");
}

Value DictMethod(const Value& d, const std::string& name, Args& a) {
  if (name == "items") return NoArgs(name, a), ItemsOf(d.as_dict());
  if (name == "keys" || name == "values") {
    NoArgs(name, a);
    std::vector<Value> out;
    for (const auto& [k, v] : d.as_dict().entries) out.push_back(name == "keys" ? Value(k) : v);
    return Value::List(std::move(out));
  }
  Params p(name, a, {"key", "default"});  // get
  Value key = p.Required(0);
  const Value* v = key.is_string() ? d.as_dict().Find(key.as_string()) : nullptr;
  return v ? *v : p.Get(1);
}

}  // namespace

bool IsKnownTest(const std::string& name) { return Tests().count(name) > 0; }

bool ApplyTest(const std::string& name, const Value& operand, Args& args) {
  auto it = Tests().find(name);
  if (it == Tests().end()) throw Error("unsupported test '" + name + "'");
  return it->second(operand, args);
}

Value BoundMethod(const Value& obj, const std::string& name) {
  static const char* const kStringMethods[] = {"strip",    "lstrip",  "rstrip",  "split",  "startswith",
                                               "endswith", "upper",   "lower",   "title",  "capitalize",
                                               "replace",  "find",    "count",   "join",   "isdigit",
                                               "isalpha",  "isspace", "islower", "isupper"};
  if (obj.is_string()) {
    for (const char* m : kStringMethods)
      if (name == m)
        return Value::Func([s = obj.as_string(), name](Args& a) { return StringMethod(s, name, a); });
  } else if (obj.is_dict()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get")
      return Value::Func([obj, name](Args& a) { return DictMethod(obj, name, a); });
  }
  return Value::Undef();
}

void AddGlobals(Dict& globals) {
  globals.Set("raise_exception", Value::Func([](Args& a) -> Value {
                Params p("raise_exception", a, {"message"});
                throw TemplateRaised{Str(p.Get(0, Value("")))};
              }));
  auto make_dict = [](const char* fn, Args& a) {
    if (a.positional.size() > 1) throw Error(std::string(fn) + "() takes at most one positional argument");
    Dict d;
    if (!a.positional.empty()) {
      if (!a.positional[0].is_dict())
        throw Error(std::string(fn) + "() positional argument must be a mapping");
      d = a.positional[0].as_dict();
    }
    for (auto& [k, v] : a.named) d.Set(k, v);
    return d;
  };
  globals.Set("namespace",
              Value::Func([make_dict](Args& a) { return Value::MakeNamespace(make_dict("namespace", a)); }));
  globals.Set("dict", Value::Func([make_dict](Args& a) { return Value::MakeDict(make_dict("dict", a)); }));
  globals.Set("range", Value::Func([](Args& a) {
                if (!a.named.empty() || a.positional.empty() || a.positional.size() > 3)
                  throw Error("range() takes 1 to 3 positional arguments");
                for (const Value& v : a.positional)
                  if (!v.is_integer()) throw Error("range() arguments must be integers, got " + TypeName(v));
                int64_t start = 0, stop, step = 1;
                if (a.positional.size() == 1) {
                  stop = a.positional[0].as_int();
                } else {
                  start = a.positional[0].as_int();
                  stop = a.positional[1].as_int();
                  if (a.positional.size() == 3) step = a.positional[2].as_int();
                }
                if (step == 0) throw Error("range() step must not be zero");
                std::vector<Value> out;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                  if (out.size() >= 100000)
                    throw Error("range() too big (over 100000 items)");  // as jinja2's sandbox
                  out.emplace_back(i);
                }
                return Value::List(std::move(out));
              }));
  globals.Set("strftime_now", Value::Func([](Args& a) {
                Params p("strftime_now", a, {"format"});
                std::string fmt = p.String(0);
                std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                char buf[256];
                size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
                return Value(std::string(buf, n));
              }));
}

}  // namespace prism::jinja
