// Pattern parsing, e-matching by backtracking over each class's nodes, and instantiation of right sides.
#include "compiler/egraph/pattern.h"

#include <cctype>
#include <cstdlib>

#include "ir/error.h"

namespace prism {

namespace {

struct Parser {
  const std::string& s;
  size_t i = 0;

  [[noreturn]] void Fail(const std::string& why) const {
    throw Error("pattern '" + s + "' at " + std::to_string(i) + ": " + why);
  }
  void Skip() {
    while (i < s.size() && std::isspace((unsigned char)s[i])) ++i;
  }
  std::string Word() {
    Skip();
    const size_t b = i;
    while (i < s.size() && !std::isspace((unsigned char)s[i]) && s[i] != '(' && s[i] != ')') ++i;
    if (b == i) Fail("expected a name");
    return s.substr(b, i - b);
  }
  Pattern Parse() {
    Skip();
    if (i >= s.size()) Fail("unexpected end");
    Pattern p;
    if (s[i] == '(') {
      ++i;
      std::string head = Word();
      if (const size_t colon = head.find(':'); colon != std::string::npos) {
        p.label = head.substr(colon + 1);
        head = head.substr(0, colon);
        if (p.label.empty()) Fail("empty label");
      }
      bool known = false;
      for (int o = 0; o <= (int)Op::StateScatter && !known; ++o)
        if (OpName((Op)o) == head) p.op = (Op)o, known = true;
      if (!known) Fail("unknown op '" + head + "'");
      p.kind = Pattern::Kind::Node;
      for (Skip(); i < s.size() && s[i] != ')'; Skip()) p.kids.push_back(Parse());
      if (i >= s.size()) Fail("missing ')'");
      ++i;
      return p;
    }
    const std::string w = Word();
    if (w[0] == '?') {
      if (w.size() == 1) Fail("a variable needs a name");
      p.kind = Pattern::Kind::Var;
      p.var = w.substr(1);
      return p;
    }
    char* end = nullptr;
    p.number = std::strtod(w.c_str(), &end);
    if (end != w.c_str() + w.size()) Fail("'" + w + "' is neither a variable, a number nor a node");
    p.kind = Pattern::Kind::Number;
    return p;
  }
};

bool SameAttributes(const ENode& a, const ENode& b) {
  return a.op == b.op && a.dtype == b.dtype && a.shape == b.shape && a.axes == b.axes && a.args == b.args &&
         a.name == b.name && a.scalar == b.scalar;
}

// Extends each partial match in `in` by matching p at class c.
std::vector<Match> MatchAt(const EGraph& eg, const Pattern& p, ClassId c, std::vector<Match> in) {
  c = eg.Find(c);
  std::vector<Match> out;
  switch (p.kind) {
    case Pattern::Kind::Var:
      for (Match& m : in) {
        auto it = m.vars.find(p.var);
        if (it == m.vars.end()) {
          m.vars[p.var] = c;
          out.push_back(std::move(m));
        } else if (eg.Find(it->second) == c) {
          out.push_back(std::move(m));
        }
      }
      return out;
    case Pattern::Kind::Number: {
      const EClass& k = eg.eclass(c);
      if (k.constant && *k.constant == RoundToDType(p.number, k.dtype)) return in;
      return out;
    }
    case Pattern::Kind::Node:
      for (const ENode& n : eg.eclass(c).nodes) {
        if (n.op != p.op || n.inputs.size() != p.kids.size()) continue;
        std::vector<Match> ms;
        for (const Match& m : in) {
          if (p.label.empty()) {
            ms.push_back(m);
            continue;
          }
          // A label seen twice names nodes with the same attributes (the same view of two operands).
          auto it = m.labels.find(p.label);
          if (it != m.labels.end() && !SameAttributes(it->second, n)) continue;
          ms.push_back(m);
          ms.back().labels[p.label] = n;
        }
        for (size_t k = 0; k < p.kids.size() && !ms.empty(); ++k)
          ms = MatchAt(eg, p.kids[k], n.inputs[k], ms);
        for (Match& m : ms) out.push_back(std::move(m));
      }
      return out;
  }
  return out;
}

// `like` is the class a number takes its dtype and shape from.
std::optional<ClassId> Build(EGraph& eg, const Pattern& p, const Match& m, std::optional<ClassId> like) {
  switch (p.kind) {
    case Pattern::Kind::Var: return m.vars.at(p.var);
    case Pattern::Kind::Number: {
      if (!like) return std::nullopt;
      const EClass k = eg.eclass(*like);
      return eg.Constant(p.number, k.dtype, k.shape);
    }
    case Pattern::Kind::Node: {
      std::vector<std::optional<ClassId>> kids(p.kids.size());
      std::optional<ClassId> sibling;
      for (size_t k = 0; k < p.kids.size(); ++k) {
        if (p.kids[k].kind == Pattern::Kind::Number) continue;
        kids[k] = Build(eg, p.kids[k], m, std::nullopt);
        if (!kids[k]) return std::nullopt;
        if (!sibling) sibling = kids[k];
      }
      for (size_t k = 0; k < p.kids.size(); ++k)
        if (!kids[k] && !(kids[k] = Build(eg, p.kids[k], m, sibling))) return std::nullopt;
      Node like_node{};
      if (!p.label.empty()) like_node = m.labels.at(p.label);
      like_node.op = p.op;
      std::vector<ClassId> ids;
      for (auto& k : kids) ids.push_back(*k);
      return eg.Make(like_node, ids);
    }
  }
  return std::nullopt;
}

}  // namespace

Pattern Pattern::Parse(const std::string& text) {
  Parser ps{text};
  Pattern p = ps.Parse();
  ps.Skip();
  if (ps.i != text.size()) ps.Fail("text after the pattern");
  return p;
}

std::string Pattern::str() const {
  switch (kind) {
    case Kind::Var: return "?" + var;
    case Kind::Number: {
      std::string s = std::to_string(number);
      while (s.size() > 1 && s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
      return s;
    }
    case Kind::Node: {
      std::string s = "(" + std::string(OpName(op)) + (label.empty() ? "" : ":" + label);
      for (const Pattern& k : kids) s += " " + k.str();
      return s + ")";
    }
  }
  return "";
}

void Pattern::Names(std::vector<std::string>* vars, std::vector<std::string>* labels) const {
  if (kind == Kind::Var) vars->push_back(var);
  if (kind == Kind::Node && !label.empty()) labels->push_back(label);
  for (const Pattern& k : kids) k.Names(vars, labels);
}

void MatchIn(const EGraph& eg, const Pattern& p, ClassId c, std::vector<Match>* out) {
  std::vector<Match> ms = MatchAt(eg, p, c, {Match{eg.Find(c), {}, {}}});
  for (Match& m : ms) out->push_back(std::move(m));
}

std::optional<ClassId> Instantiate(EGraph& eg, const Pattern& p, const Match& m) {
  // A bare number on the right is a constant of the matched class's dtype and shape.
  const std::optional<ClassId> r = Build(eg, p, m, m.root);
  if (!r) return std::nullopt;
  const EClass &got = eg.eclass(*r), &want = eg.eclass(m.root);
  if (got.dtype != want.dtype || got.shape != want.shape) return std::nullopt;
  return r;
}

}  // namespace prism
