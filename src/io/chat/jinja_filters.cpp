// Jinja filters used by chat templates (trim, tojson, selectattr, map, ...), with jinja2's
// semantics; tojson follows transformers' override (no ASCII escaping, insertion order kept).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "io/chat/jinja_builtins.h"
#include "io/chat/jinja_eval.h"

namespace prism::jinja {
namespace {

// select/reject/selectattr/rejectattr: args are [attr,] [test, test args...].
Value SelectFilter(const Value& v, Args& args, bool by_attr, bool keep_if) {
  const char* fn = by_attr ? (keep_if ? "selectattr" : "rejectattr") : (keep_if ? "select" : "reject");
  if (!args.named.empty()) throw Error(std::string(fn) + "() takes no keyword arguments");
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) throw Error(std::string(fn) + "() needs an attribute name");
    attr = RequireString(args.positional[next++], fn);
  }
  std::string test;
  if (next < args.positional.size()) test = RequireString(args.positional[next++], fn);
  if (!test.empty() && !IsKnownTest(test))
    throw Error(std::string(fn) + "(): unsupported test '" + test + "'");
  std::vector<Value> out;
  for (const Value& item : ToList(v, fn)) {
    Value subject = by_attr ? AttrPath(item, attr) : item;
    bool pass;
    if (test.empty()) {
      pass = Truthy(subject);
    } else {
      Args test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                                  args.positional.end());
      pass = ApplyTest(test, subject, test_args);
    }
    if (pass == keep_if) out.push_back(item);
  }
  return Value::List(std::move(out));
}

// Sort key: strings compare case-insensitively unless asked otherwise, as jinja2 does.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(Lower(v.as_string()));
  return v;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

using FilterFn = Value (*)(const Value&, Args&);

Value FilterToJson(const Value& v, Args& args) {
  // transformers' own tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False)
  Params p("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = p.Bool(0, false);
  o.indent = static_cast<int>(p.Int(1, -1));
  Value seps = p.Get(2);
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.as_list().items.size() != 2)
      throw Error("tojson(): separators must be an (item, key) pair");
    o.item_separator = RequireString(seps.as_list().items[0], "tojson() separators");
    o.key_separator = RequireString(seps.as_list().items[1], "tojson() separators");
  }
  o.sort_keys = p.Bool(3, false);
  return Value(ToJson(v, o));
}

Value FilterIndent(const Value& v, Args& args) {
  Params p("indent", args, {"width", "first", "blank"});
  Value w = p.Get(0, Value(4));
  std::string pad = w.is_string() ? w.as_string()
                                  : std::string(static_cast<size_t>(std::max<int64_t>(0, p.Int(0, 4))), ' ');
  bool first = p.Bool(1, false), blank = p.Bool(2, false);
  std::vector<std::string> lines;
  std::string s = Str(v) + "\n";
  for (size_t start = 0, nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(s.substr(start, nl - start));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    bool indent_line = (i > 0 || first) && (blank || !lines[i].empty());
    out += (indent_line ? pad : "") + lines[i];
  }
  return Value(std::move(out));
}

Value FilterMap(const Value& v, Args& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    Params p("map", args, {"attribute", "default"});
    std::string attr = p.String(0);
    if (attr.empty()) throw Error("map() needs a filter name or attribute=");
    const Value* dflt = p.Find(1);
    for (const Value& item : ToList(v, "map")) {
      Value got = AttrPath(item, attr);
      out.push_back(got.is_undefined() && dflt ? *dflt : got);
    }
    return Value::List(std::move(out));
  }
  std::string filter = RequireString(args.positional[0], "map()");
  if (!IsKnownFilter(filter)) throw Error("map(): unsupported filter '" + filter + "'");
  for (const Value& item : ToList(v, "map")) {
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.named = args.named;
    out.push_back(ApplyFilter(filter, item, rest));
  }
  return Value::List(std::move(out));
}

Value FilterSort(const Value& v, Args& args) {
  Params p("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = p.Bool(0, false), cs = p.Bool(1, false);
  std::string attr = p.String(2);
  std::vector<Value> items = ToList(v, "sort");
  auto key = [&](const Value& x) { return SortKey(attr.empty() ? x : AttrPath(x, attr), cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? Compare(key(b), key(a)) < 0 : Compare(key(a), key(b)) < 0;
  });
  return Value::List(std::move(items));
}

Value FilterDictSort(const Value& v, Args& args) {
  Params p("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw Error("dictsort() needs a mapping, got " + TypeName(v));
  bool cs = p.Bool(0, false), reverse = p.Bool(2, false);
  std::string by = p.String(1, "key");
  if (by != "key" && by != "value") throw Error("dictsort(): 'by' must be 'key' or 'value'");
  std::vector<Value> items = ItemsOf(v.as_dict()).as_list().items;
  size_t k = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    int c = Compare(SortKey(a.as_list().items[k], cs), SortKey(b.as_list().items[k], cs));
    return reverse ? c > 0 : c < 0;
  });
  return Value::List(std::move(items));
}

Value FilterUnique(const Value& v, Args& args) {
  Params p("unique", args, {"case_sensitive", "attribute"});
  bool cs = p.Bool(0, false);
  std::string attr = p.String(1);
  std::vector<Value> out, seen;
  for (const Value& item : ToList(v, "unique")) {
    Value key = SortKey(attr.empty() ? item : AttrPath(item, attr), cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::List(std::move(out));
}

Value MinMax(const Value& v, Args& args, bool want_max) {
  Params p(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool cs = p.Bool(0, false);
  std::string attr = p.String(1);
  std::vector<Value> items = ToList(v, want_max ? "max" : "min");
  if (items.empty()) return Value::Undef("no min/max item, sequence was empty");
  size_t best = 0;
  auto key = [&](size_t i) { return SortKey(attr.empty() ? items[i] : AttrPath(items[i], attr), cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    int c = Compare(key(i), key(best));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value FilterRound(const Value& v, Args& args) {
  Params p("round", args, {"precision", "method"});
  int64_t precision = p.Int(0, 0);
  std::string method = p.String(1, "common");
  if (!v.is_number()) throw Error("round() needs a number, got " + TypeName(v));
  double scale = std::pow(10.0, static_cast<double>(precision)), x = v.as_float() * scale;
  double r = method == "common"  ? std::nearbyint(x)
             : method == "ceil"  ? std::ceil(x)
             : method == "floor" ? std::floor(x)
                                 : NAN;
  if (std::isnan(r)) throw Error("round(): method must be common, ceil or floor");
  return Value(r / scale);
}

Value FilterSum(const Value& v, Args& args) {
  Params p("sum", args, {"attribute", "start"});
  std::string attr = p.String(0);
  Value total = p.Get(1, Value(0));
  for (const Value& item : ToList(v, "sum")) {
    Value x = attr.empty() ? item : AttrPath(item, attr);
    if (!x.is_number() || !total.is_number()) throw Error("sum() needs numbers, got " + TypeName(x));
    total = x.is_integer() && total.is_integer() ? Value(total.as_int() + x.as_int())
                                                 : Value(total.as_float() + x.as_float());
  }
  return total;
}

Value ParseNumber(const Value& v, Args& args, bool as_int) {
  Params p(as_int ? "int" : "float", args, {"default"});
  Value dflt = p.Get(0, as_int ? Value(0) : Value(0.0));
  if (v.is_number()) return as_int ? Value(static_cast<int64_t>(v.as_float())) : Value(v.as_float());
  if (!v.is_string()) return dflt;
  std::string s = PyStrip(v.as_string(), true, true);
  try {
    size_t used = 0;
    double d = std::stod(s, &used);
    if (used != s.size() || s.empty()) return dflt;
    if (as_int) {
      bool integral = s.find_first_of(".eEnN") == std::string::npos;
      return integral ? Value(static_cast<int64_t>(std::stoll(s))) : Value(static_cast<int64_t>(d));
    }
    return Value(d);
  } catch (const std::exception&) {
    return dflt;
  }
}

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const std::unordered_map<std::string, FilterFn> filters = {
      {"trim",
       [](const Value& v, Args& a) {
         Params p("trim", a, {"chars"});
         Value chars = p.Get(0);
         std::string c = chars.is_none() ? "" : RequireString(chars, "trim()");
         return Value(PyStrip(Str(v), true, true, chars.is_none() ? nullptr : &c));
       }},
      {"length",
       [](const Value& v, Args& a) {
         NoArgs("length", a);
         return Value(static_cast<int64_t>(Length(v)));
       }},
      {"count",
       [](const Value& v, Args& a) {
         NoArgs("count", a);
         return Value(static_cast<int64_t>(Length(v)));
       }},
      {"tojson", FilterToJson},
      {"upper",
       [](const Value& v, Args& a) {
         NoArgs("upper", a);
         return Value(Upper(Str(v)));
       }},
      {"lower",
       [](const Value& v, Args& a) {
         NoArgs("lower", a);
         return Value(Lower(Str(v)));
       }},
      {"capitalize",
       [](const Value& v, Args& a) {
         NoArgs("capitalize", a);
         return Value(Capitalize(Str(v)));
       }},
      {"title",
       [](const Value& v, Args& a) {
         NoArgs("title", a);
         return Value(JinjaTitle(Str(v)));
       }},
      {"string",
       [](const Value& v, Args& a) {
         NoArgs("string", a);
         return Value(Str(v));
       }},
      {"safe",
       [](const Value& v, Args& a) {
         NoArgs("safe", a);
         return v;
       }},
      {"escape",
       [](const Value& v, Args& a) {
         NoArgs("escape", a);
         return Value(HtmlEscape(Str(v)));
       }},
      {"e",
       [](const Value& v, Args& a) {
         NoArgs("e", a);
         return Value(HtmlEscape(Str(v)));
       }},
      {"join",
       [](const Value& v, Args& a) {
         Params p("join", a, {"d", "attribute"});
         std::string sep = p.String(0), attr = p.String(1), out;
         std::vector<Value> items = ToList(v, "join");
         for (size_t i = 0; i < items.size(); ++i)
           out += (i ? sep : "") + Str(attr.empty() ? items[i] : AttrPath(items[i], attr));
         return Value(std::move(out));
       }},
      {"first",
       [](const Value& v, Args& a) {
         NoArgs("first", a);
         std::vector<Value> items = ToList(v, "first");
         return items.empty() ? Value::Undef("no first item, sequence was empty") : items.front();
       }},
      {"last",
       [](const Value& v, Args& a) {
         NoArgs("last", a);
         std::vector<Value> items = ToList(v, "last");
         return items.empty() ? Value::Undef("no last item, sequence was empty") : items.back();
       }},
      {"default",
       [](const Value& v, Args& a) {
         Params p("default", a, {"default_value", "boolean"});
         bool use_default = p.Bool(1, false) ? !Truthy(v) : v.is_undefined();
         return use_default ? p.Get(0, Value("")) : v;
       }},
      {"d", [](const Value& v, Args& a) { return ApplyFilter("default", v, a); }},
      {"replace",
       [](const Value& v, Args& a) {
         Params p("replace", a, {"old", "new", "count"});
         return Value(Replace(Str(v), RequireString(p.Required(0), "replace()"),
                              RequireString(p.Required(1), "replace()"), p.Int(2, -1)));
       }},
      {"items",
       [](const Value& v, Args& a) {
         NoArgs("items", a);
         if (v.is_undefined()) return Value::List({});
         if (!v.is_dict()) throw Error("items() can only get item pairs from a mapping, got " + TypeName(v));
         return ItemsOf(v.as_dict());
       }},
      {"list",
       [](const Value& v, Args& a) {
         NoArgs("list", a);
         return Value::List(ToList(v, "list"));
       }},
      {"selectattr", [](const Value& v, Args& a) { return SelectFilter(v, a, true, true); }},
      {"rejectattr", [](const Value& v, Args& a) { return SelectFilter(v, a, true, false); }},
      {"select", [](const Value& v, Args& a) { return SelectFilter(v, a, false, true); }},
      {"reject", [](const Value& v, Args& a) { return SelectFilter(v, a, false, false); }},
      {"map", FilterMap},
      {"sort", FilterSort},
      {"dictsort", FilterDictSort},
      {"unique", FilterUnique},
      {"min", [](const Value& v, Args& a) { return MinMax(v, a, false); }},
      {"max", [](const Value& v, Args& a) { return MinMax(v, a, true); }},
      {"reverse",
       [](const Value& v, Args& a) {
         NoArgs("reverse", a);
         std::vector<Value> items = ToList(v, "reverse");
         std::reverse(items.begin(), items.end());
         if (!v.is_string()) return Value::List(std::move(items));
         std::string out;
         for (const Value& c : items) out += c.as_string();
         return Value(std::move(out));
       }},
      {"indent", FilterIndent},
      {"int", [](const Value& v, Args& a) { return ParseNumber(v, a, true); }},
      {"float", [](const Value& v, Args& a) { return ParseNumber(v, a, false); }},
      {"abs",
       [](const Value& v, Args& a) {
         NoArgs("abs", a);
         if (!v.is_number()) throw Error("abs() needs a number, got " + TypeName(v));
         return v.is_integer() ? Value(std::abs(v.as_int())) : Value(std::fabs(v.as_float()));
       }},
      {"round", FilterRound},
      {"sum", FilterSum},
  };
  return filters;
}

}  // namespace

bool IsKnownFilter(const std::string& name) { return Filters().count(name) > 0; }

Value ApplyFilter(const std::string& name, const Value& operand, Args& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) throw Error("unsupported filter '" + name + "'");
  return it->second(operand, args);
}

}  // namespace prism::jinja
