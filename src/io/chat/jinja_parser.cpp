// Jinja parser: recursive descent over lexer tokens with jinja2's operator precedence
// (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary < postfix/filters).
#include <algorithm>

#include "io/chat/jinja_ast.h"
#include "io/chat/jinja_eval.h"
#include "ir/error.h"

namespace prism::jinja {
namespace {

using T = Token::Type;

ExprPtr MakeExpr(Expr::Kind kind, Pos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

std::unique_ptr<Stmt> MakeStmt(Stmt::Kind kind, Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->pos = pos;
  return s;
}

std::string Describe(const Token& t) {
  switch (t.type) {
    case T::kText: return "template text";
    case T::kVarBegin: return "'{{'";
    case T::kVarEnd: return "'}}'";
    case T::kBlockBegin: return "'{%'";
    case T::kBlockEnd: return "'%}'";
    case T::kString: return "string literal";
    case T::kInt:
    case T::kFloat: return "number " + t.text;
    case T::kEof: return "end of template";
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body ParseTemplate() {
    std::string end;
    Body body = ParseBody({}, &end);
    return body;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  void Advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsOp(const char* op) const { return Cur().type == T::kOp && Cur().text == op; }
  bool IsName(const char* name) const { return Cur().type == T::kName && Cur().text == name; }
  [[noreturn]] void Fail(Pos pos, const std::string& what) const { throw Error(Where(pos) + what); }
  [[noreturn]] void Unexpected(const std::string& expected) const {
    Fail(Cur().pos, "expected " + expected + ", got " + Describe(Cur()));
  }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Unexpected(std::string("'") + op + "'");
    Advance();
  }
  std::string ExpectName(const char* what = "a name") {
    if (Cur().type != T::kName) Unexpected(what);
    std::string name = Cur().text;
    Advance();
    return name;
  }
  void ExpectBlockEnd() {
    if (Cur().type != T::kBlockEnd) Unexpected("'%}'");
    Advance();
  }

  // ---- statements ----

  // Parses until a `{% tag %}` whose name is in end_tags (left current, name in *found) or EOF.
  Body ParseBody(const std::vector<std::string>& end_tags, std::string* found) {
    Body body;
    while (true) {
      const Token& tok = Cur();
      if (tok.type == T::kEof) {
        found->clear();
        return body;
      }
      if (tok.type == T::kText) {
        auto s = MakeStmt(Stmt::Kind::kText, tok.pos);
        s->text = tok.text;
        body.push_back(std::move(s));
        Advance();
      } else if (tok.type == T::kVarBegin) {
        Advance();
        auto s = MakeStmt(Stmt::Kind::kOutput, tok.pos);
        s->expr = ParseTuple(true);
        if (Cur().type != T::kVarEnd) Unexpected("'}}'");
        Advance();
        body.push_back(std::move(s));
      } else if (tok.type == T::kBlockBegin) {
        Advance();
        if (Cur().type != T::kName) Unexpected("a tag name");
        if (std::find(end_tags.begin(), end_tags.end(), Cur().text) != end_tags.end()) {
          *found = Cur().text;
          return body;
        }
        ParseStatement(tok.pos, body);
      } else {
        Unexpected("template text or a tag");
      }
    }
  }

  // Parses a block body that must end in one of end_tags; reports the opening tag if it does not.
  Body ParseBlockBody(const std::vector<std::string>& end_tags, std::string* found, Pos opened,
                      const char* tag) {
    Body body = ParseBody(end_tags, found);
    if (found->empty())
      Fail(opened, std::string("unclosed '{% ") + tag + " %}': missing '{% " + end_tags.back() + " %}'");
    Advance();  // the end tag's name
    return body;
  }

  void ParseStatement(Pos pos, Body& out) {
    const std::string tag = Cur().text;
    if (tag == "if") return out.push_back(ParseIf(pos));
    if (tag == "for") return out.push_back(ParseFor(pos));
    if (tag == "set") return out.push_back(ParseSet(pos));
    if (tag == "macro") return out.push_back(ParseMacro(pos));
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) Fail(pos, "'{% " + tag + " %}' outside of a loop");
      Advance();
      ExpectBlockEnd();
      return out.push_back(MakeStmt(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, pos));
    }
    if (tag == "generation") {  // transformers' assistant-mask marker: renders its body unchanged
      Advance();
      ExpectBlockEnd();
      std::string found;
      Body body = ParseBlockBody({"endgeneration"}, &found, pos, "generation");
      ExpectBlockEnd();
      for (auto& s : body) out.push_back(std::move(s));
      return;
    }
    static const char* const kUnsupported[] = {"include", "import", "from",       "extends", "block", "call",
                                               "filter",  "with",   "autoescape", "do",      "trans"};
    for (const char* u : kUnsupported)
      if (tag == u) Fail(pos, "unsupported tag '{% " + tag + " %}'");
    static const char* const kEnds[] = {"elif",     "else",   "endif",         "endfor",   "endset",
                                        "endmacro", "endraw", "endgeneration", "endblock", "endfilter"};
    for (const char* e : kEnds)
      if (tag == e) Fail(pos, "unexpected '{% " + tag + " %}' with no matching open block");
    Fail(pos, "unknown tag '{% " + tag + " %}'");
  }

  std::unique_ptr<Stmt> ParseIf(Pos pos) {
    auto s = MakeStmt(Stmt::Kind::kIf, pos);
    Advance();  // if
    std::string found = "elif";
    while (found == "elif") {
      ExprPtr cond = ParseExpression(true);
      ExpectBlockEnd();
      Body body = ParseBlockBody({"elif", "else", "endif"}, &found, pos, "if");
      s->branches.emplace_back(std::move(cond), std::move(body));
    }
    if (found == "else") {
      ExpectBlockEnd();
      s->else_body = ParseBlockBody({"endif"}, &found, pos, "if");
    }
    ExpectBlockEnd();
    return s;
  }

  // Loop and set targets: `a`, `a, b` or `(a, b)`.
  std::vector<std::string> ParseTargets() {
    bool paren = IsOp("(");
    if (paren) Advance();
    std::vector<std::string> names{ExpectName("a variable name")};
    while (IsOp(",")) {
      Advance();
      names.push_back(ExpectName("a variable name"));
    }
    if (paren) ExpectOp(")");
    return names;
  }

  std::unique_ptr<Stmt> ParseFor(Pos pos) {
    auto s = MakeStmt(Stmt::Kind::kFor, pos);
    Advance();  // for
    s->targets = ParseTargets();
    if (!IsName("in")) Unexpected("'in'");
    Advance();
    s->expr = ParseTuple(false);
    if (IsName("if")) {
      Advance();
      s->filter = ParseExpression(true);
    }
    if (IsName("recursive")) Fail(Cur().pos, "unsupported construct 'recursive' loop");
    ExpectBlockEnd();
    ++loop_depth_;
    std::string found;
    s->body = ParseBlockBody({"else", "endfor"}, &found, pos, "for");
    --loop_depth_;
    if (found == "else") {
      ExpectBlockEnd();
      s->else_body = ParseBlockBody({"endfor"}, &found, pos, "for");
    }
    ExpectBlockEnd();
    return s;
  }

  std::unique_ptr<Stmt> ParseSet(Pos pos) {
    Advance();  // set
    std::vector<std::string> targets = ParseTargets();
    std::string attr;
    if (targets.size() == 1 && IsOp(".")) {
      Advance();
      attr = ExpectName("an attribute name");
    }
    if (IsOp("=")) {
      Advance();
      auto s = MakeStmt(Stmt::Kind::kSet, pos);
      s->targets = std::move(targets);
      s->attr = std::move(attr);
      s->expr = ParseTuple(true);
      ExpectBlockEnd();
      return s;
    }
    if (targets.size() != 1 || !attr.empty()) Unexpected("'='");
    if (IsOp("|")) Fail(Cur().pos, "unsupported construct: filter on a block set");
    ExpectBlockEnd();
    auto s = MakeStmt(Stmt::Kind::kSetBlock, pos);
    s->targets = std::move(targets);
    std::string found;
    s->body = ParseBlockBody({"endset"}, &found, pos, "set");
    ExpectBlockEnd();
    return s;
  }

  std::unique_ptr<Stmt> ParseMacro(Pos pos) {
    auto s = MakeStmt(Stmt::Kind::kMacro, pos);
    Advance();  // macro
    s->name = ExpectName("a macro name");
    ExpectOp("(");
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) Fail(Cur().pos, "unsupported construct: *args in a macro signature");
      s->targets.push_back(ExpectName("a parameter name"));
      ExprPtr def;
      if (IsOp("=")) {
        Advance();
        def = ParseExpression(true);
      }
      s->defaults.push_back(std::move(def));
      if (!IsOp(",")) break;
      Advance();
    }
    ExpectOp(")");
    ExpectBlockEnd();
    int saved_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro boundary
    std::string found;
    s->body = ParseBlockBody({"endmacro"}, &found, pos, "macro");
    loop_depth_ = saved_depth;
    if (Cur().type == T::kName && Cur().text == s->name) Advance();
    ExpectBlockEnd();
    return s;
  }

  // ---- expressions ----

  bool AtExpressionEnd() const {
    return Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd || IsOp(")") || IsOp("]") || IsOp("}") ||
           Cur().type == T::kEof;
  }

  // `a, b` without brackets is a tuple (as in `{% set a = 1, 2 %}`).
  ExprPtr ParseTuple(bool with_condexpr) {
    Pos pos = Cur().pos;
    ExprPtr first = ParseExpression(with_condexpr);
    if (!IsOp(",")) return first;
    auto tuple = MakeExpr(Expr::Kind::kTuple, pos);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      Advance();
      if (AtExpressionEnd() || IsName("if")) break;
      tuple->children.push_back(ParseExpression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr ParseExpression(bool with_condexpr) { return with_condexpr ? ParseCondExpr() : ParseOr(); }

  ExprPtr ParseCondExpr() {
    ExprPtr e = ParseOr();
    while (IsName("if")) {
      auto cond = MakeExpr(Expr::Kind::kCond, Cur().pos);
      Advance();
      ExprPtr test = ParseOr();
      ExprPtr otherwise;
      if (IsName("else")) {
        Advance();
        otherwise = ParseCondExpr();
      }
      cond->children.push_back(std::move(e));
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(otherwise));
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr Binary(const std::string& op, Pos pos, ExprPtr l, ExprPtr r) {
    auto b = MakeExpr(Expr::Kind::kBinary, pos);
    b->name = op;
    b->children.push_back(std::move(l));
    b->children.push_back(std::move(r));
    return b;
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) {
      Pos pos = Cur().pos;
      Advance();
      e = Binary("or", pos, std::move(e), ParseAnd());
    }
    return e;
  }

  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      Pos pos = Cur().pos;
      Advance();
      e = Binary("and", pos, std::move(e), ParseNot());
    }
    return e;
  }

  ExprPtr ParseNot() {
    if (!IsName("not")) return ParseCompare();
    auto u = MakeExpr(Expr::Kind::kUnary, Cur().pos);
    u->name = "not";
    Advance();
    u->children.push_back(ParseNot());
    return u;
  }

  ExprPtr ParseCompare() {
    Pos pos = Cur().pos;
    ExprPtr first = ParseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == T::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                   Cur().text == ">" || Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        Advance();
      } else if (IsName("in")) {
        op = "in";
        Advance();
      } else if (IsName("not") && Peek().type == T::kName && Peek().text == "in") {
        op = "not in";
        Advance();
        Advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = MakeExpr(Expr::Kind::kCompare, pos);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  template <typename Next>
  ExprPtr ParseLeftAssoc(std::initializer_list<const char*> ops, Next next) {
    ExprPtr e = (this->*next)();
    while (true) {
      const char* matched = nullptr;
      for (const char* op : ops)
        if (IsOp(op)) matched = op;
      if (matched == nullptr) return e;
      Pos pos = Cur().pos;
      Advance();
      e = Binary(matched, pos, std::move(e), (this->*next)());
    }
  }

  ExprPtr ParseMath1() { return ParseLeftAssoc({"+", "-"}, &Parser::ParseConcat); }
  ExprPtr ParseConcat() { return ParseLeftAssoc({"~"}, &Parser::ParseMath2); }
  ExprPtr ParseMath2() { return ParseLeftAssoc({"*", "/", "//", "%"}, &Parser::ParsePow); }
  ExprPtr ParsePow() { return ParseLeftAssoc({"**"}, &Parser::ParseUnaryWithFilter); }
  ExprPtr ParseUnaryWithFilter() { return ParseUnary(true); }

  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      e = MakeExpr(Expr::Kind::kUnary, Cur().pos);
      e->name = Cur().text;
      Advance();
      e->children.push_back(ParseUnary(false));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }

  ExprPtr Literal(Value v, Pos pos) {
    auto e = MakeExpr(Expr::Kind::kLiteral, pos);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr ParsePrimary() {
    const Token tok = Cur();
    switch (tok.type) {
      case T::kName:
        Advance();
        if (tok.text == "true" || tok.text == "True") return Literal(Value(true), tok.pos);
        if (tok.text == "false" || tok.text == "False") return Literal(Value(false), tok.pos);
        if (tok.text == "none" || tok.text == "None") return Literal(Value::None(), tok.pos);
        {
          auto e = MakeExpr(Expr::Kind::kName, tok.pos);
          e->name = tok.text;
          return e;
        }
      case T::kString: {
        std::string s;
        while (Cur().type == T::kString) {  // adjacent literals concatenate
          s += Cur().text;
          Advance();
        }
        return Literal(Value(std::move(s)), tok.pos);
      }
      case T::kInt: Advance(); return Literal(Value(tok.int_value), tok.pos);
      case T::kFloat: Advance(); return Literal(Value(tok.float_value), tok.pos);
      case T::kOp:
        if (tok.text == "(") return ParseParenthesized();
        if (tok.text == "[") return ParseList();
        if (tok.text == "{") return ParseDict();
        break;
      default: break;
    }
    Unexpected("an expression");
  }

  ExprPtr ParseParenthesized() {
    Pos pos = Cur().pos;
    Advance();  // (
    if (IsOp(")")) {
      Advance();
      return MakeExpr(Expr::Kind::kTuple, pos);
    }
    ExprPtr e = ParseExpression(true);
    if (IsOp(",")) {
      auto tuple = MakeExpr(Expr::Kind::kTuple, pos);
      tuple->children.push_back(std::move(e));
      while (IsOp(",")) {
        Advance();
        if (IsOp(")")) break;
        tuple->children.push_back(ParseExpression(true));
      }
      e = std::move(tuple);
    }
    ExpectOp(")");
    return e;
  }

  ExprPtr ParseList() {
    auto list = MakeExpr(Expr::Kind::kList, Cur().pos);
    Advance();  // [
    while (!IsOp("]")) {
      list->children.push_back(ParseExpression(true));
      if (!IsOp(",")) break;
      Advance();
    }
    ExpectOp("]");
    return list;
  }

  ExprPtr ParseDict() {
    auto dict = MakeExpr(Expr::Kind::kDict, Cur().pos);
    Advance();  // {
    while (!IsOp("}")) {
      dict->children.push_back(ParseExpression(true));
      ExpectOp(":");
      dict->children.push_back(ParseExpression(true));
      if (!IsOp(",")) break;
      Advance();
    }
    ExpectOp("}");
    return dict;
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        Pos pos = Cur().pos;
        Advance();
        if (Cur().type == T::kInt) {  // `x.0` is x[0]
          auto idx = MakeExpr(Expr::Kind::kIndex, pos);
          idx->children.push_back(std::move(e));
          idx->children.push_back(Literal(Value(Cur().int_value), Cur().pos));
          Advance();
          e = std::move(idx);
          continue;
        }
        auto attr = MakeExpr(Expr::Kind::kAttr, pos);
        attr->name = ExpectName("an attribute name");
        attr->children.push_back(std::move(e));
        e = std::move(attr);
      } else if (IsOp("[")) {
        e = ParseSubscript(std::move(e));
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr obj) {
    Pos pos = Cur().pos;
    Advance();  // [
    ExprPtr start, stop, step;
    if (!IsOp(":")) start = ParseExpression(true);
    if (!IsOp(":")) {
      ExpectOp("]");
      auto idx = MakeExpr(Expr::Kind::kIndex, pos);
      idx->children.push_back(std::move(obj));
      idx->children.push_back(std::move(start));
      return idx;
    }
    Advance();  // :
    if (!IsOp(":") && !IsOp("]")) stop = ParseExpression(true);
    if (IsOp(":")) {
      Advance();
      if (!IsOp("]")) step = ParseExpression(true);
    }
    ExpectOp("]");
    auto slice = MakeExpr(Expr::Kind::kSlice, pos);
    slice->children.push_back(std::move(obj));
    slice->children.push_back(std::move(start));
    slice->children.push_back(std::move(stop));
    slice->children.push_back(std::move(step));
    return slice;
  }

  // Parses `( args )` into e->children (after whatever is already there) and e->kw_names.
  void ParseArgs(Expr& e) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) Fail(Cur().pos, "unsupported construct: *args/**kwargs in a call");
      if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == "=") {
        e.kw_names.push_back(Cur().text);
        Advance();
        Advance();
      } else if (!e.kw_names.empty()) {
        Fail(Cur().pos, "positional argument after keyword argument");
      }
      e.children.push_back(ParseExpression(true));
      if (!IsOp(",")) break;
      Advance();
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto call = MakeExpr(Expr::Kind::kCall, Cur().pos);
    call->children.push_back(std::move(callee));
    ParseArgs(*call);
    return call;
  }

  std::string ParseDottedName(const char* what) {
    std::string name = ExpectName(what);
    while (IsOp(".")) {
      Advance();
      name += "." + ExpectName(what);
    }
    return name;
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        Advance();
        Pos pos = Cur().pos;
        auto f = MakeExpr(Expr::Kind::kFilter, pos);
        f->name = ParseDottedName("a filter name");
        if (!IsKnownFilter(f->name)) Fail(pos, "unsupported filter '" + f->name + "'");
        f->children.push_back(std::move(e));
        if (IsOp("(")) ParseArgs(*f);
        e = std::move(f);
      } else if (IsName("is")) {
        auto t = MakeExpr(Expr::Kind::kTest, Cur().pos);
        Advance();
        if (IsName("not")) {
          t->negated = true;
          Advance();
        }
        Pos pos = Cur().pos;
        t->name = ParseDottedName("a test name");
        if (!IsKnownTest(t->name)) Fail(pos, "unsupported test '" + t->name + "'");
        t->children.push_back(std::move(e));
        if (IsOp("(")) {
          ParseArgs(*t);
        } else if ((Cur().type == T::kName || Cur().type == T::kString || Cur().type == T::kInt ||
                    Cur().type == T::kFloat || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          // One bare argument, as in `x is divisibleby 3` or `x is sameas false`.
          if (IsName("is")) Fail(Cur().pos, "cannot chain tests with 'is'");
          t->children.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace prism::jinja
