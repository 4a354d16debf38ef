// Jinja evaluator: executes statements with jinja2's scoping (a fresh scope per loop iteration and
// per macro call; `set` elsewhere writes the current scope) and Python operator semantics.
#include "io/chat/jinja_eval.h"

#include <cmath>
#include <unordered_map>

#include "io/chat/jinja_builtins.h"
#include "ir/error.h"

namespace prism::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxMacroDepth = 256;

// Adds the template position to errors thrown by built-ins, which do not know it.
[[noreturn]] void Rethrow(Pos pos, const Error& e) {
  std::string msg = e.what();
  if (msg.rfind("chat template ", 0) == 0) throw e;
  throw Error(Where(pos) + msg);
}

[[noreturn]] void FailUndefined(Pos pos, const Value& v) {
  const std::string& why = v.undefined_why();
  throw Error(Where(pos) + (why.empty() ? std::string("value is undefined") : why));
}

Value Arith(const std::string& op, const Value& l, const Value& r) {
  if (op == "~") return Value(Str(l) + Str(r));
  const bool nums = l.is_number() && r.is_number();
  const bool ints = l.is_integer() && r.is_integer();
  if (op == "+") {
    if (nums) return ints ? Value(l.as_int() + r.as_int()) : Value(l.as_float() + r.as_float());
    if (l.is_string() && r.is_string()) return Value(l.as_string() + r.as_string());
    if (l.is_list() && r.is_list() && l.as_list().is_tuple == r.as_list().is_tuple) {
      std::vector<Value> items = l.as_list().items;
      items.insert(items.end(), r.as_list().items.begin(), r.as_list().items.end());
      return Value::List(std::move(items), l.as_list().is_tuple);
    }
  } else if (op == "-") {
    if (nums) return ints ? Value(l.as_int() - r.as_int()) : Value(l.as_float() - r.as_float());
  } else if (op == "*") {
    if (nums) return ints ? Value(l.as_int() * r.as_int()) : Value(l.as_float() * r.as_float());
    const Value& seq = l.is_integer() ? r : l;
    const Value& count = l.is_integer() ? l : r;
    if (count.is_integer() && (seq.is_string() || seq.is_list())) {
      int64_t n = std::max<int64_t>(0, count.as_int());
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq.as_string();
        return Value(std::move(out));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < n; ++i)
        items.insert(items.end(), seq.as_list().items.begin(), seq.as_list().items.end());
      return Value::List(std::move(items), seq.as_list().is_tuple);
    }
  } else if (op == "/" || op == "//" || op == "%") {
    if (nums) {
      if (r.as_float() == 0.0) throw Error("division by zero");
      if (op == "/") return Value(l.as_float() / r.as_float());
      if (ints) {  // Python floors toward negative infinity
        int64_t a = l.as_int(), b = r.as_int(), q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          --q;
          m += b;
        }
        return op == "//" ? Value(q) : Value(m);
      }
      double a = l.as_float(), b = r.as_float();
      if (op == "//") return Value(std::floor(a / b));
      double m = std::fmod(a, b);
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value(m);
    }
    if (op == "%" && l.is_string()) throw Error("unsupported construct: printf-style '%' string formatting");
  } else if (op == "**") {
    if (ints && r.as_int() >= 0) {
      int64_t result = 1, base = l.as_int();
      for (int64_t e = r.as_int(); e > 0; e >>= 1, base *= base)
        if (e & 1) result *= base;
      return Value(result);
    }
    if (nums) return Value(std::pow(l.as_float(), r.as_float()));
  }
  throw Error("unsupported operand type(s) for " + op + ": '" + TypeName(l) + "' and '" + TypeName(r) + "'");
}

bool Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      throw Error("'in <string>' requires string as left operand, not " + TypeName(item));
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list().items)
      if (Equal(v, item)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().Find(item.as_string()) != nullptr;
  if (container.is_undefined()) return false;
  throw Error("argument of type '" + TypeName(container) + "' is not iterable");
}

bool CompareOp(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return Equal(l, r);
  if (op == "!=") return !Equal(l, r);
  if (op == "in") return Contains(r, l);
  if (op == "not in") return !Contains(r, l);
  int c = Compare(l, r);
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

// Python slice semantics on a sequence of length n: the selected indices.
std::vector<int64_t> SliceIndices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_index = [](const Value& v, const char* what) {
    if (!v.is_integer())
      throw Error(std::string("slice ") + what + " must be an integer or none, got " + TypeName(v));
    return v.as_int();
  };
  int64_t st = step.is_none() || step.is_undefined() ? 1 : as_index(step, "step");
  if (st == 0) throw Error("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = as_index(v, "bound");
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(i);
  return out;
}

class Evaluator {
 public:
  explicit Evaluator(const Dict& context) {
    frames_.emplace_back();
    Dict globals;
    AddGlobals(globals);
    for (auto& [k, v] : globals.entries) frames_[0].vars[k] = v;
    for (const auto& [k, v] : context.entries) frames_[0].vars[k] = v;
  }

  std::string Run(const Body& body) {
    std::string out;
    Exec(body, out);
    return out;
  }

 private:
  struct Frame {
    std::unordered_map<std::string, Value> vars;
    bool macro_boundary = false;  // lookups skip from here straight to the globals
  };

  Value Lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i-- > 0;) {
      auto it = frames_[i].vars.find(name);
      if (it != frames_[i].vars.end()) return it->second;
      if (frames_[i].macro_boundary && i > 1) i = 1;
    }
    return Value::Undef("'" + name + "' is undefined");
  }

  void Bind(const std::vector<std::string>& targets, const Value& v, Pos pos) {
    if (targets.size() == 1) {
      frames_.back().vars[targets[0]] = v;
      return;
    }
    if (!v.is_list() || v.as_list().items.size() != targets.size())
      throw Error(Where(pos) + "cannot unpack " + TypeName(v) + " into " + std::to_string(targets.size()) +
                  " names");
    for (size_t i = 0; i < targets.size(); ++i) frames_.back().vars[targets[i]] = v.as_list().items[i];
  }

  // What a for loop walks: as ToList (jinja_builtins.h), with the error naming the loop's position.
  std::vector<Value> Iterate(const Value& v, Pos pos) const {
    switch (v.kind()) {
      case Value::Kind::kUndefined:  // jinja2's Undefined iterates as empty
      case Value::Kind::kList:
      case Value::Kind::kDict:
      case Value::Kind::kString: return ToList(v, "for");
      default: throw Error(Where(pos) + "'" + TypeName(v) + "' object is not iterable");
    }
  }

  Flow Exec(const Body& body, std::string& out) {
    for (const auto& s : body) {
      Flow f = ExecOne(*s, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow ExecOne(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText: out += s.text; return Flow::kNormal;
      case Stmt::Kind::kOutput: out += Str(Eval(*s.expr)); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (Truthy(Eval(*cond))) return Exec(body, out);
        return Exec(s.else_body, out);
      case Stmt::Kind::kFor: return ExecFor(s, out);
      case Stmt::Kind::kSet: {
        Value v = Eval(*s.expr);
        if (s.attr.empty()) {
          Bind(s.targets, v, s.pos);
        } else {
          Value ns = Lookup(s.targets[0]);
          if (ns.kind() != Value::Kind::kNamespace)
            throw Error(Where(s.pos) + "cannot set attribute '" + s.attr + "' on '" + s.targets[0] +
                        "', which is not a namespace()");
          ns.as_namespace().attrs.Set(s.attr, std::move(v));
        }
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        Exec(s.body, captured);
        frames_.back().vars[s.targets[0]] = Value(std::move(captured));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: {
        const Stmt* macro = &s;
        frames_.back().vars[s.name] =
            Value::Func([this, macro](Args& args) { return CallMacro(*macro, args); });
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow ExecFor(const Stmt& s, std::string& out) {
    std::vector<Value> items = Iterate(Eval(*s.expr), s.expr->pos);
    if (s.filter) {  // `for x in xs if cond` filters first; loop.length counts what is left
      std::vector<Value> kept;
      for (Value& item : items) {
        frames_.emplace_back();
        Bind(s.targets, item, s.pos);
        bool keep = Truthy(Eval(*s.filter));
        frames_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return Exec(s.else_body, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Dict loop;
      loop.entries = {{"index0", Value(i)},       {"index", Value(i + 1)},  {"revindex0", Value(n - i - 1)},
                      {"revindex", Value(n - i)}, {"first", Value(i == 0)}, {"last", Value(i == n - 1)},
                      {"length", Value(n)},       {"depth", Value(1)},      {"depth0", Value(0)}};
      loop.entries.emplace_back(
          "previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undef("there is no previous item"));
      loop.entries.emplace_back(
          "nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::Undef("there is no next item"));
      loop.entries.emplace_back("cycle", Value::Func([i](Args& args) {
                                  if (args.positional.empty())
                                    throw Error("loop.cycle() needs at least one value");
                                  return args.positional[static_cast<size_t>(i) % args.positional.size()];
                                }));
      frames_.emplace_back();
      frames_.back().vars["loop"] = Value::MakeDict(std::move(loop));
      Bind(s.targets, items[static_cast<size_t>(i)], s.pos);
      Flow f = Exec(s.body, out);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value CallMacro(const Stmt& m, Args& args) {
    if (macro_depth_ >= kMaxMacroDepth)
      throw Error(Where(m.pos) + "macro recursion too deep in '" + m.name + "'");
    if (args.positional.size() > m.targets.size())
      throw Error("macro '" + m.name + "' takes " + std::to_string(m.targets.size()) + " arguments, got " +
                  std::to_string(args.positional.size()));
    frames_.emplace_back();
    frames_.back().macro_boundary = true;
    std::vector<bool> bound(m.targets.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      frames_.back().vars[m.targets[i]] = std::move(args.positional[i]);
      bound[i] = true;
    }
    for (auto& [name, v] : args.named) {
      auto it = std::find(m.targets.begin(), m.targets.end(), name);
      if (it == m.targets.end()) {
        frames_.pop_back();
        throw Error("macro '" + m.name + "' has no parameter '" + name + "'");
      }
      bound[static_cast<size_t>(it - m.targets.begin())] = true;
      frames_.back().vars[name] = std::move(v);
    }
    std::string out;
    ++macro_depth_;
    try {
      for (size_t i = 0; i < m.targets.size(); ++i)
        if (!bound[i])
          frames_.back().vars[m.targets[i]] =
              m.defaults[i] ? Eval(*m.defaults[i]) : Value::Undef("'" + m.targets[i] + "' is undefined");
      Exec(m.body, out);
    } catch (...) {
      --macro_depth_;
      frames_.pop_back();
      throw;
    }
    --macro_depth_;
    frames_.pop_back();
    return Value(std::move(out));
  }

  Args EvalArgs(const Expr& e, size_t first) {
    Args args;
    size_t n_named = e.kw_names.size();
    size_t n_pos = e.children.size() - first - n_named;
    for (size_t i = 0; i < n_pos; ++i) args.positional.push_back(Eval(*e.children[first + i]));
    for (size_t i = 0; i < n_named; ++i)
      args.named.emplace_back(e.kw_names[i], Eval(*e.children[first + n_pos + i]));
    return args;
  }

  Value GetAttr(const Value& obj, const std::string& name, Pos pos) {
    switch (obj.kind()) {
      case Value::Kind::kUndefined: FailUndefined(pos, obj);
      case Value::Kind::kDict: {
        Value method = BoundMethod(obj, name);  // like Python's getattr, methods win over keys
        if (!method.is_undefined()) return method;
        if (const Value* v = obj.as_dict().Find(name)) return *v;
        return Value::Undef("'dict object' has no attribute '" + name + "'");
      }
      case Value::Kind::kNamespace:
        if (const Value* v = obj.as_namespace().attrs.Find(name)) return *v;
        return Value::Undef("'Namespace' has no attribute '" + name + "'");
      default: {
        Value method = BoundMethod(obj, name);
        if (!method.is_undefined()) return method;
        return Value::Undef("'" + TypeName(obj) + " object' has no attribute '" + name + "'");
      }
    }
  }

  Value GetItem(const Value& obj, const Value& key, Pos pos) {
    switch (obj.kind()) {
      case Value::Kind::kUndefined: FailUndefined(pos, obj);
      case Value::Kind::kDict:
        if (key.is_string()) {
          if (const Value* v = obj.as_dict().Find(key.as_string())) return *v;
          return GetAttr(obj, key.as_string(), pos);  // jinja2 falls back to attributes
        }
        return Value::Undef("'dict object' has no element " + Repr(key));
      case Value::Kind::kNamespace:
        if (key.is_string()) return GetAttr(obj, key.as_string(), pos);
        return Value::Undef("'Namespace' has no element " + Repr(key));
      case Value::Kind::kList:
      case Value::Kind::kString: {
        if (!key.is_integer()) return key.is_string() ? GetAttr(obj, key.as_string(), pos) : Value::Undef();
        int64_t n = obj.is_list() ? static_cast<int64_t>(obj.as_list().items.size())
                                  : static_cast<int64_t>(CodePointCount(obj.as_string()));
        int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        if (i < 0 || i >= n)
          return Value::Undef("'" + TypeName(obj) + " object' has no element " + Repr(key));
        if (obj.is_list()) return obj.as_list().items[static_cast<size_t>(i)];
        return Value(CodePoints(obj.as_string())[static_cast<size_t>(i)]);
      }
      default: return Value::Undef("'" + TypeName(obj) + " object' has no element " + Repr(key));
    }
  }

  Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Pos pos) {
    if (obj.is_undefined()) FailUndefined(pos, obj);
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      std::vector<Value> out;
      for (int64_t i : SliceIndices(static_cast<int64_t>(items.size()), start, stop, step))
        out.push_back(items[static_cast<size_t>(i)]);
      return Value::List(std::move(out), obj.as_list().is_tuple);
    }
    if (obj.is_string()) {
      std::vector<std::string> cps = CodePoints(obj.as_string());
      std::string out;
      for (int64_t i : SliceIndices(static_cast<int64_t>(cps.size()), start, stop, step))
        out += cps[static_cast<size_t>(i)];
      return Value(std::move(out));
    }
    throw Error("'" + TypeName(obj) + "' object is not subscriptable");
  }

  Value Eval(const Expr& e) {
    try {
      return EvalUnwrapped(e);
    } catch (const Error& err) {
      Rethrow(e.pos, err);
    }
  }

  Value EvalUnwrapped(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const auto& c : e.children) items.push_back(Eval(*c));
        return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i < e.children.size(); i += 2) {
          Value key = Eval(*e.children[i]);
          if (!key.is_string()) throw Error("dict literal keys must be strings, got " + TypeName(key));
          d.Set(key.as_string(), Eval(*e.children[i + 1]));
        }
        return Value::MakeDict(std::move(d));
      }
      case Expr::Kind::kAttr: return GetAttr(Eval(*e.children[0]), e.name, e.children[0]->pos);
      case Expr::Kind::kIndex: return GetItem(Eval(*e.children[0]), Eval(*e.children[1]), e.children[0]->pos);
      case Expr::Kind::kSlice: {
        auto opt = [&](size_t i) { return e.children[i] ? Eval(*e.children[i]) : Value::None(); };
        return Slice(Eval(*e.children[0]), opt(1), opt(2), opt(3), e.children[0]->pos);
      }
      case Expr::Kind::kCall: {
        Value callee = Eval(*e.children[0]);
        Args args = EvalArgs(e, 1);
        if (callee.is_undefined()) FailUndefined(e.children[0]->pos, callee);
        if (callee.kind() != Value::Kind::kFunction)
          throw Error("'" + TypeName(callee) + "' object is not callable");
        return callee.as_function()(args);
      }
      case Expr::Kind::kFilter: {
        Value operand = Eval(*e.children[0]);
        Args args = EvalArgs(e, 1);
        return ApplyFilter(e.name, operand, args);
      }
      case Expr::Kind::kTest: {
        Value operand = Eval(*e.children[0]);
        Args args = EvalArgs(e, 1);
        return Value(ApplyTest(e.name, operand, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        Value v = Eval(*e.children[0]);
        if (e.name == "not") return Value(!Truthy(v));
        if (v.is_undefined()) FailUndefined(e.pos, v);
        if (!v.is_number()) throw Error("bad operand type for unary " + e.name + ": '" + TypeName(v) + "'");
        if (e.name == "+") return v.is_integer() ? Value(v.as_int()) : v;
        return v.is_integer() ? Value(-v.as_int()) : Value(-v.as_float());
      }
      case Expr::Kind::kBinary: {
        Value l = Eval(*e.children[0]);
        if (e.name == "and") return Truthy(l) ? Eval(*e.children[1]) : l;
        if (e.name == "or") return Truthy(l) ? l : Eval(*e.children[1]);
        Value r = Eval(*e.children[1]);
        if (e.name != "~") {
          if (l.is_undefined()) FailUndefined(e.children[0]->pos, l);
          if (r.is_undefined()) FailUndefined(e.children[1]->pos, r);
        }
        return Arith(e.name, l, r);
      }
      case Expr::Kind::kCompare: {
        Value l = Eval(*e.children[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = Eval(*e.children[i + 1]);
          if (!CompareOp(e.ops[i], l, r)) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case Expr::Kind::kCond:
        if (Truthy(Eval(*e.children[1]))) return Eval(*e.children[0]);
        return e.children[2] ? Eval(*e.children[2]) : Value::Undef();
    }
    return Value::Undef();
  }

  std::vector<Frame> frames_;
  int macro_depth_ = 0;
};

}  // namespace

std::string Render(const Body& body, const Dict& context) { return Evaluator(context).Run(body); }

}  // namespace prism::jinja
