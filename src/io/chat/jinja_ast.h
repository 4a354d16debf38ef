// Tokens and syntax tree of the Jinja subset used by chat templates, and the lexer/parser entry points.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/chat/jinja_value.h"

namespace prism::jinja {

struct Pos {
  int line = 1, col = 1;
};
// "line:col" prefix used by every template error.
std::string Where(Pos p);

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string text;  // text data, name, operator, or the decoded string literal
  Pos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

// Splits a template into text and tag tokens, applying whitespace control the way transformers
// configures jinja2 (trim_blocks and lstrip_blocks on, trailing newline dropped).
std::vector<Token> Lex(const std::string& source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // children = items
    kTuple,    // children = items
    kDict,     // children = key, value, key, value, ...
    kAttr,     // children[0] . name
    kIndex,    // children[0] [ children[1] ]
    kSlice,    // children[0] [ children[1] : children[2] : children[3] ], each of 1..3 may be null
    kCall,     // children[0] ( children[1..] ); the last kw_names.size() arguments are keyword arguments
    kFilter,   // children[0] | name ( children[1..] ), kw_names as for kCall
    kTest,     // children[0] is [not] name ( children[1..] )
    kUnary,    // name ∈ {"-", "+", "not"} children[0]
    kBinary,   // children[0] name children[1]; name ∈ + - * / // % ** ~ and or
    kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ... (chained like Python)
    kCond,     // children[0] if children[1] else children[2] (children[2] may be null)
  };
  Kind kind;
  Pos pos;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::string> kw_names;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body) in order; else_body
    kFor,       // for targets in expr [if filter]: body [else: else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr when attr is not empty
    kSetBlock,  // set targets[0] %} body {% endset
    kMacro,     // macro name(targets = defaults): body
    kBreak,
    kContinue,
  };
  Kind kind;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;
  std::vector<ExprPtr> defaults;  // macro parameter defaults, null where none
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
};

// Parses tokens into statements; throws prism::Error naming line:col for syntax errors and for
// constructs outside the supported subset.
Body Parse(const std::vector<Token>& tokens);

}  // namespace prism::jinja
