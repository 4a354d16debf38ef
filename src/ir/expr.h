// Symbolic integer expressions (sizes, indices, offsets) with simplification and evaluation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace prism {

// Floor division and floor modulo (Python semantics), used everywhere an Expr is evaluated.
int64_t FloorDiv(int64_t a, int64_t b);
int64_t FloorMod(int64_t a, int64_t b);

class Expr {
 public:
  enum class Kind : uint8_t { Const, Sym, Add, Mul, Div, Mod, Min, Max, Lt };
  struct Node;

  Expr() : Expr(int64_t{0}) {}
  Expr(int64_t v);  // NOLINT: integers convert implicitly
  Expr(int v) : Expr(int64_t{v}) {}
  static Expr Sym(const std::string& name);

  Kind kind() const;
  bool IsConst() const { return kind() == Kind::Const; }
  bool IsConst(int64_t v) const { return IsConst() && value() == v; }
  int64_t value() const;                // Const only
  const std::string& name() const;      // Sym only
  const std::vector<Expr>& args() const;
  const std::string& str() const;       // canonical text; equal text means equal expression
  bool operator==(const Expr& o) const { return node_ == o.node_ || str() == o.str(); }
  bool operator!=(const Expr& o) const { return !(*this == o); }

  // Evaluates with every symbol bound; throws prism::Error naming an unbound symbol.
  int64_t Eval(const std::map<std::string, int64_t>& bindings) const;
  // Replaces symbols by expressions (and simplifies).
  Expr Substitute(const std::map<std::string, Expr>& subst) const;
  void CollectSymbols(std::vector<std::string>* out) const;
  // Renders as C/C++ source; sym maps a symbol name to its variable expression.
  std::string Render(const std::function<std::string(const std::string&)>& sym) const;

  const Node* node() const { return node_.get(); }

 private:
  friend Expr MakeExpr(Kind, std::vector<Expr>, int64_t, std::string);
  std::shared_ptr<const Node> node_;
};

Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);  // floor division
Expr operator%(const Expr& a, const Expr& b);  // floor modulo
Expr Min(const Expr& a, const Expr& b);
Expr Max(const Expr& a, const Expr& b);
Expr Lt(const Expr& a, const Expr& b);        // 1 if a < b else 0
Expr And(const Expr& a, const Expr& b);       // of 0/1 expressions

// Known bounds of symbols (inclusive lo, hi; hi may be kUnbounded), with an optional symbolic
// exclusive upper bound for loop variables of symbolic extent (i in [0, N)).
constexpr int64_t kUnbounded = INT64_MAX / 4;
struct SymRange {
  int64_t lo = 0, hi = kUnbounded;
  std::optional<Expr> upper_excl;  // a symbolic extent the symbol is known to be below
};
using RangeMap = std::map<std::string, SymRange>;

struct Bounds {
  int64_t lo, hi;
};
Bounds BoundsOf(const Expr& e, const RangeMap& ranges);
// Simplification that needs bounds (div/mod/min/max/lt of values in known ranges).
Expr Simplify(const Expr& e, const RangeMap& ranges);

std::string ShapeStr(const std::vector<Expr>& shape);  // "[2, seq, 64]"
Expr Product(const std::vector<Expr>& v);

}  // namespace prism
