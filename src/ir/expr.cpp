// Symbolic integer expressions: canonical construction, range-based simplification, evaluation.
#include "ir/expr.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "ir/error.h"

namespace prism {

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t FloorMod(int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; }

struct Expr::Node {
  Kind kind;
  int64_t value = 0;  // Const: the value; Add: the constant term
  std::string name;
  std::vector<Expr> args;  // Add: terms (each maybe c*x); others: operands
  std::string text;
};

Expr MakeExpr(Expr::Kind k, std::vector<Expr> args, int64_t value, std::string name) {
  auto n = std::make_shared<Expr::Node>();
  n->kind = k;
  n->value = value;
  n->name = std::move(name);
  n->args = std::move(args);
  auto& a = n->args;
  switch (k) {
    case Expr::Kind::Const: n->text = std::to_string(value); break;
    case Expr::Kind::Sym: n->text = n->name; break;
    case Expr::Kind::Add: {
      n->text = "(";
      for (size_t i = 0; i < a.size(); ++i) n->text += (i ? " + " : "") + a[i].str();
      if (value) n->text += " + " + std::to_string(value);
      n->text += ")";
      break;
    }
    case Expr::Kind::Mul: n->text = "(" + a[0].str() + " * " + a[1].str() + ")"; break;
    case Expr::Kind::Div: n->text = "(" + a[0].str() + " / " + a[1].str() + ")"; break;
    case Expr::Kind::Mod: n->text = "(" + a[0].str() + " % " + a[1].str() + ")"; break;
    case Expr::Kind::Min: n->text = "min(" + a[0].str() + ", " + a[1].str() + ")"; break;
    case Expr::Kind::Max: n->text = "max(" + a[0].str() + ", " + a[1].str() + ")"; break;
    case Expr::Kind::Lt: n->text = "(" + a[0].str() + " < " + a[1].str() + ")"; break;
  }
  Expr e;
  e.node_ = std::move(n);
  return e;
}

Expr::Expr(int64_t v) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::Const;
  n->value = v;
  n->text = std::to_string(v);
  node_ = std::move(n);
}

Expr Expr::Sym(const std::string& name) { return MakeExpr(Kind::Sym, {}, 0, name); }
Expr::Kind Expr::kind() const { return node_->kind; }
int64_t Expr::value() const { return node_->value; }
const std::string& Expr::name() const { return node_->name; }
const std::vector<Expr>& Expr::args() const { return node_->args; }
const std::string& Expr::str() const { return node_->text; }

namespace {

// A sum as (term text → (term, coefficient)) plus a constant; terms are non-constant, non-Add.
struct Linear {
  std::map<std::string, std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;
};

// Splits c*x (with c constant) into (x, c).
std::pair<Expr, int64_t> SplitCoef(const Expr& e) {
  if (e.kind() == Expr::Kind::Mul && e.args()[0].IsConst()) return {e.args()[1], e.args()[0].value()};
  return {e, 1};
}

void Accumulate(Linear* lin, const Expr& e, int64_t scale) {
  if (e.IsConst()) {
    lin->constant += scale * e.value();
  } else if (e.kind() == Expr::Kind::Add) {
    for (const Expr& t : e.args()) Accumulate(lin, t, scale);
    lin->constant += scale * e.value();
  } else {
    auto [x, c] = SplitCoef(e);
    auto& slot = lin->terms.try_emplace(x.str(), x, 0).first->second;
    slot.second += c * scale;
  }
}

Expr Term(const Expr& x, int64_t c) {
  if (c == 1) return x;
  return MakeExpr(Expr::Kind::Mul, {Expr(c), x}, 0, "");
}

// (x % c) * k + (x / c) * (c * k) == x * k: recombine a split index.
void Recombine(Linear* lin) {
  for (auto& [key, tc] : lin->terms) {
    const Expr& t = tc.first;
    if (t.kind() != Expr::Kind::Mod || tc.second == 0 || !t.args()[1].IsConst()) continue;
    const Expr& x = t.args()[0];
    int64_t c = t.args()[1].value();
    Expr div = MakeExpr(Expr::Kind::Div, {x, t.args()[1]}, 0, "");
    auto it = lin->terms.find(div.str());
    if (it == lin->terms.end() || it->second.second != c * tc.second) continue;
    int64_t k = tc.second;
    tc.second = 0;
    it->second.second = 0;
    Accumulate(lin, x, k);
    return Recombine(lin);  // the map changed: start over
  }
}

Expr FromLinear(const Linear& in) {
  Linear lin = in;
  Recombine(&lin);
  std::vector<Expr> terms;
  for (const auto& [key, tc] : lin.terms)
    if (tc.second != 0) terms.push_back(Term(tc.first, tc.second));
  if (terms.empty()) return Expr(lin.constant);
  if (terms.size() == 1 && lin.constant == 0) return terms[0];
  return MakeExpr(Expr::Kind::Add, std::move(terms), lin.constant, "");
}

Linear ToLinear(const Expr& e) {
  Linear lin;
  Accumulate(&lin, e, 1);
  return lin;
}

// Multiplicative factors of a product (constants folded into the returned coefficient).
void Factors(const Expr& e, std::vector<Expr>* out, int64_t* coef) {
  if (e.IsConst()) {
    *coef *= e.value();
  } else if (e.kind() == Expr::Kind::Mul) {
    Factors(e.args()[0], out, coef);
    Factors(e.args()[1], out, coef);
  } else {
    out->push_back(e);
  }
}

// If e == d * q exactly (structurally), returns q.
bool DivideExactly(const Expr& e, const Expr& d, Expr* q) {
  if (d.IsConst()) {
    if (d.value() == 0) return false;
    Linear lin = ToLinear(e);
    if (lin.constant % d.value() != 0) return false;
    for (auto& [k, tc] : lin.terms) {
      if (tc.second % d.value() != 0) return false;
      tc.second /= d.value();
    }
    lin.constant /= d.value();
    *q = FromLinear(lin);
    return true;
  }
  std::vector<Expr> ef, df;
  int64_t ec = 1, dc = 1;
  Factors(e, &ef, &ec);
  Factors(d, &df, &dc);
  // A sum with a common factor (8*p + 8*s) divides as 8 * (p + s): match the reduced sum.
  for (auto* fs : {&ef, &df}) {
    int64_t* coef = fs == &ef ? &ec : &dc;
    for (Expr& f : *fs) {
      if (f.kind() != Expr::Kind::Add) continue;
      Linear lin = ToLinear(f);
      int64_t g = std::llabs(lin.constant);
      for (const auto& [k, tc] : lin.terms) g = std::gcd(g, std::llabs(tc.second));
      if (g <= 1) continue;
      for (auto& [k, tc] : lin.terms) tc.second /= g;
      lin.constant /= g;
      f = FromLinear(lin);
      *coef *= g;
    }
  }
  if (dc == 0 || ec % dc != 0) return false;
  for (const Expr& f : df) {
    auto it = std::find(ef.begin(), ef.end(), f);
    if (it == ef.end()) return false;
    ef.erase(it);
  }
  Expr r(ec / dc);
  for (const Expr& f : ef) r = r * f;
  *q = r;
  return true;
}

}  // namespace

Expr operator+(const Expr& a, const Expr& b) {
  if (a.IsConst() && b.IsConst()) return Expr(a.value() + b.value());
  if (b.IsConst(0)) return a;
  if (a.IsConst(0)) return b;
  Linear lin;
  Accumulate(&lin, a, 1);
  Accumulate(&lin, b, 1);
  return FromLinear(lin);
}

Expr operator-(const Expr& a, const Expr& b) { return a + Expr(-1) * b; }

Expr operator*(const Expr& a, const Expr& b) {
  if (a.IsConst() && b.IsConst()) return Expr(a.value() * b.value());
  if (a.IsConst(0) || b.IsConst(0)) return Expr(0);
  if (a.IsConst(1)) return b;
  if (b.IsConst(1)) return a;
  if (b.IsConst()) return b * a;
  if (a.IsConst()) {  // distribute constants over sums so that terms can cancel
    Linear lin;
    Accumulate(&lin, b, a.value());
    return FromLinear(lin);
  }
  const Expr& lo = a.str() < b.str() ? a : b;
  const Expr& hi = a.str() < b.str() ? b : a;
  return MakeExpr(Expr::Kind::Mul, {lo, hi}, 0, "");
}

Expr operator/(const Expr& a, const Expr& b) {
  if (b.IsConst(0)) throw Error("symbolic division by zero: " + a.str() + " / 0");
  if (b.IsConst(1)) return a;
  if (a.IsConst() && b.IsConst()) return Expr(FloorDiv(a.value(), b.value()));
  Expr q;
  if (DivideExactly(a, b, &q)) return q;
  // (d*q + r) / d == q + r / d for floor division: pull out the divisible terms.
  if (a.kind() == Expr::Kind::Add) {
    Linear lin = ToLinear(a), rest;
    Expr quotient(0);
    bool any = false;
    for (const auto& [k, tc] : lin.terms) {
      Expr t = Term(tc.first, tc.second), tq;
      if (DivideExactly(t, b, &tq)) {
        quotient = quotient + tq;
        any = true;
      } else {
        Accumulate(&rest, t, 1);
      }
    }
    if (b.IsConst() && lin.constant % b.value() == 0) {
      quotient = quotient + Expr(lin.constant / b.value());
      any = any || lin.constant != 0;
    } else {
      rest.constant = lin.constant;
    }
    if (any) return quotient + FromLinear(rest) / b;
  }
  return MakeExpr(Expr::Kind::Div, {a, b}, 0, "");
}

Expr operator%(const Expr& a, const Expr& b) {
  if (b.IsConst(0)) throw Error("symbolic modulo by zero: " + a.str() + " % 0");
  if (b.IsConst(1)) return Expr(0);
  if (a.kind() == Expr::Kind::Mod && a.args()[1] == b) return a;  // (x % m) % m
  if (a.IsConst() && b.IsConst()) return Expr(FloorMod(a.value(), b.value()));
  Expr q;
  if (DivideExactly(a, b, &q)) return Expr(0);
  if (a.kind() == Expr::Kind::Add) {  // (d*q + r) % d == r % d
    Linear lin = ToLinear(a), rest;
    bool dropped = false;
    for (const auto& [k, tc] : lin.terms) {
      Expr t = Term(tc.first, tc.second), tq;
      if (DivideExactly(t, b, &tq)) dropped = true;
      else Accumulate(&rest, t, 1);
    }
    rest.constant = b.IsConst() ? FloorMod(lin.constant, b.value()) : lin.constant;
    if (b.IsConst() && rest.constant != lin.constant) dropped = true;
    if (dropped) return FromLinear(rest) % b;
  }
  return MakeExpr(Expr::Kind::Mod, {a, b}, 0, "");
}

Expr Min(const Expr& a, const Expr& b) {
  if (a.IsConst() && b.IsConst()) return Expr(std::min(a.value(), b.value()));
  if (a == b) return a;
  Expr d = a - b;
  if (d.IsConst()) return d.value() <= 0 ? a : b;
  return MakeExpr(Expr::Kind::Min, {a, b}, 0, "");
}

Expr Max(const Expr& a, const Expr& b) {
  if (a.IsConst() && b.IsConst()) return Expr(std::max(a.value(), b.value()));
  if (a == b) return a;
  Expr d = a - b;
  if (d.IsConst()) return d.value() >= 0 ? a : b;
  return MakeExpr(Expr::Kind::Max, {a, b}, 0, "");
}

Expr Lt(const Expr& a, const Expr& b) {
  Expr d = a - b;
  if (d.IsConst()) return Expr(d.value() < 0 ? 1 : 0);
  return MakeExpr(Expr::Kind::Lt, {a, b}, 0, "");
}

Expr And(const Expr& a, const Expr& b) {
  if (a.IsConst()) return a.value() ? b : Expr(0);
  if (b.IsConst()) return b.value() ? a : Expr(0);
  if (a == b) return a;
  return a * b;
}

int64_t Expr::Eval(const std::map<std::string, int64_t>& bindings) const {
  const auto& a = args();
  switch (kind()) {
    case Kind::Const: return value();
    case Kind::Sym: {
      auto it = bindings.find(name());
      if (it == bindings.end()) throw Error("unbound symbol '" + name() + "'");
      return it->second;
    }
    case Kind::Add: {
      int64_t s = value();
      for (const Expr& t : a) s += t.Eval(bindings);
      return s;
    }
    case Kind::Mul: return a[0].Eval(bindings) * a[1].Eval(bindings);
    case Kind::Div: {
      int64_t d = a[1].Eval(bindings);
      if (d == 0) throw Error("division by zero evaluating " + str());
      return FloorDiv(a[0].Eval(bindings), d);
    }
    case Kind::Mod: {
      int64_t d = a[1].Eval(bindings);
      if (d == 0) throw Error("modulo by zero evaluating " + str());
      return FloorMod(a[0].Eval(bindings), d);
    }
    case Kind::Min: return std::min(a[0].Eval(bindings), a[1].Eval(bindings));
    case Kind::Max: return std::max(a[0].Eval(bindings), a[1].Eval(bindings));
    case Kind::Lt: return a[0].Eval(bindings) < a[1].Eval(bindings) ? 1 : 0;
  }
  return 0;
}

static Expr Rebuild(Expr::Kind k, const std::vector<Expr>& a, int64_t value) {
  switch (k) {
    case Expr::Kind::Add: {
      Expr s(value);
      for (const Expr& t : a) s = s + t;
      return s;
    }
    case Expr::Kind::Mul: return a[0] * a[1];
    case Expr::Kind::Div: return a[0] / a[1];
    case Expr::Kind::Mod: return a[0] % a[1];
    case Expr::Kind::Min: return Min(a[0], a[1]);
    case Expr::Kind::Max: return Max(a[0], a[1]);
    case Expr::Kind::Lt: return Lt(a[0], a[1]);
    default: return Expr(value);
  }
}

Expr Expr::Substitute(const std::map<std::string, Expr>& subst) const {
  if (kind() == Kind::Const) return *this;
  if (kind() == Kind::Sym) {
    auto it = subst.find(name());
    return it == subst.end() ? *this : it->second;
  }
  std::vector<Expr> a;
  for (const Expr& x : args()) a.push_back(x.Substitute(subst));
  return Rebuild(kind(), a, value());
}

void Expr::CollectSymbols(std::vector<std::string>* out) const {
  if (kind() == Kind::Sym) {
    if (std::find(out->begin(), out->end(), name()) == out->end()) out->push_back(name());
    return;
  }
  for (const Expr& x : args()) x.CollectSymbols(out);
}

std::string Expr::Render(const std::function<std::string(const std::string&)>& sym) const {
  const auto& a = args();
  switch (kind()) {
    case Kind::Const: return std::to_string(value()) + (value() > INT32_MAX || value() < INT32_MIN ? "LL" : "");
    case Kind::Sym: return sym(name());
    case Kind::Add: {
      std::string s = "(";
      for (size_t i = 0; i < a.size(); ++i) s += (i ? " + " : "") + a[i].Render(sym);
      if (value()) s += " + " + std::to_string(value());
      return s + ")";
    }
    case Kind::Mul: return "(" + a[0].Render(sym) + " * " + a[1].Render(sym) + ")";
    // Renderers provide floor-semantics helpers; plain C '/' and '%' would truncate.
    case Kind::Div: return "prism_fdiv(" + a[0].Render(sym) + ", " + a[1].Render(sym) + ")";
    case Kind::Mod: return "prism_fmod(" + a[0].Render(sym) + ", " + a[1].Render(sym) + ")";
    case Kind::Min: return "prism_min(" + a[0].Render(sym) + ", " + a[1].Render(sym) + ")";
    case Kind::Max: return "prism_max(" + a[0].Render(sym) + ", " + a[1].Render(sym) + ")";
    case Kind::Lt: return "((int64_t)(" + a[0].Render(sym) + " < " + a[1].Render(sym) + "))";
  }
  return "";
}

static int64_t SatAdd(int64_t a, int64_t b) {
  if (a >= kUnbounded || b >= kUnbounded) return kUnbounded;
  if (a <= -kUnbounded || b <= -kUnbounded) return -kUnbounded;
  return std::clamp(a + b, -kUnbounded, kUnbounded);
}
static int64_t SatMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  __int128 p = (__int128)a * b;
  if (p >= kUnbounded) return kUnbounded;
  if (p <= -kUnbounded) return -kUnbounded;
  return (int64_t)p;
}

Bounds BoundsOf(const Expr& e, const RangeMap& ranges) {
  const auto& a = e.args();
  switch (e.kind()) {
    case Expr::Kind::Const: return {e.value(), e.value()};
    case Expr::Kind::Sym: {
      auto it = ranges.find(e.name());
      if (it == ranges.end()) return {-kUnbounded, kUnbounded};
      return {it->second.lo, it->second.hi};
    }
    case Expr::Kind::Add: {
      Bounds b{e.value(), e.value()};
      for (const Expr& t : a) {
        Bounds tb = BoundsOf(t, ranges);
        b.lo = SatAdd(b.lo, tb.lo);
        b.hi = SatAdd(b.hi, tb.hi);
      }
      return b;
    }
    case Expr::Kind::Mul: {
      Bounds x = BoundsOf(a[0], ranges), y = BoundsOf(a[1], ranges);
      int64_t c[4] = {SatMul(x.lo, y.lo), SatMul(x.lo, y.hi), SatMul(x.hi, y.lo), SatMul(x.hi, y.hi)};
      return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
    }
    case Expr::Kind::Div: {
      Bounds x = BoundsOf(a[0], ranges), y = BoundsOf(a[1], ranges);
      if (y.lo > 0 && x.lo >= 0) {
        return {x.lo / y.hi, x.hi >= kUnbounded ? kUnbounded : x.hi / y.lo};
      }
      return {-kUnbounded, kUnbounded};
    }
    case Expr::Kind::Mod: {
      Bounds y = BoundsOf(a[1], ranges);
      if (y.lo > 0) return {0, y.hi >= kUnbounded ? kUnbounded : y.hi - 1};
      return {-kUnbounded, kUnbounded};
    }
    case Expr::Kind::Min: {
      Bounds x = BoundsOf(a[0], ranges), y = BoundsOf(a[1], ranges);
      return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
    }
    case Expr::Kind::Max: {
      Bounds x = BoundsOf(a[0], ranges), y = BoundsOf(a[1], ranges);
      return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
    }
    case Expr::Kind::Lt: return {0, 1};
  }
  return {-kUnbounded, kUnbounded};
}

// True if 0 <= e < d is known, from constant bounds or a loop variable's symbolic extent.
// Replaces loop variables of symbolic extent by (extent - 1) where their coefficient is positive
// and by 0 where negative: the largest value e can take. Size symbols stay as they are.
static Expr MaxOverLoops(const Expr& e, const RangeMap& ranges, const std::map<std::string, Expr>& extents) {
  Linear lin = ToLinear(e);
  Expr m(lin.constant);
  for (const auto& [key, tc] : lin.terms) {
    const auto& [x, c] = tc;
    Bounds b = BoundsOf(x, ranges);
    if (x.kind() == Expr::Kind::Sym && extents.count(x.name())) {
      if (c > 0) m = m + Expr(c) * (extents.at(x.name()) - Expr(1));
    } else if (b.hi < kUnbounded && b.lo > -kUnbounded && x.kind() != Expr::Kind::Sym) {
      m = m + Expr(c > 0 ? c * b.hi : c * b.lo);
    } else if (x.kind() == Expr::Kind::Sym && b.hi < kUnbounded) {
      m = m + Expr(c > 0 ? c * b.hi : c * b.lo);
    } else {
      m = m + Expr(c) * x;
    }
  }
  return m;
}

// True if 0 <= e < d is known, from constant bounds or loop variables' symbolic extents.
static bool KnownBelow(const Expr& e, const Expr& d, const RangeMap& ranges) {
  Bounds eb = BoundsOf(e, ranges);
  if (eb.lo < 0) return false;
  if (d.IsConst()) return eb.hi < d.value();
  Bounds db = BoundsOf(d, ranges);
  if (eb.hi < db.lo) return true;
  if (e.kind() == Expr::Kind::Sym) {
    auto it = ranges.find(e.name());
    if (it != ranges.end() && it->second.upper_excl && *it->second.upper_excl == d) return true;
  }
  // x / c < d where x < c * d (a block's index below the block count).
  if (e.kind() == Expr::Kind::Div && e.args()[1].IsConst() && e.args()[1].value() > 0 &&
      KnownBelow(e.args()[0], e.args()[1] * d, ranges))
    return true;
  // d - max(e) >= 1 with every remaining symbol non-negative proves it.
  std::map<std::string, Expr> extents;
  for (const auto& [name, r] : ranges)
    if (r.upper_excl) extents[name] = *r.upper_excl;
  Expr gap = d - MaxOverLoops(e, ranges, extents);
  Bounds gb = BoundsOf(gap, ranges);
  return gb.lo >= 1;
}

Expr Simplify(const Expr& e, const RangeMap& ranges) {
  if (e.kind() == Expr::Kind::Const || e.kind() == Expr::Kind::Sym) return e;
  std::vector<Expr> a;
  for (const Expr& x : e.args()) a.push_back(Simplify(x, ranges));
  Expr r = Rebuild(e.kind(), a, e.value());
  if (r.kind() != e.kind()) return r == e ? r : Simplify(r, ranges);
  const auto& ra = r.args();
  switch (r.kind()) {
    case Expr::Kind::Div:
      if (KnownBelow(ra[0], ra[1], ranges)) return Expr(0);
      break;
    case Expr::Kind::Mod:
      if (KnownBelow(ra[0], ra[1], ranges)) return ra[0];
      break;
    case Expr::Kind::Min: {
      Bounds x = BoundsOf(ra[0], ranges), y = BoundsOf(ra[1], ranges);
      if (x.hi <= y.lo) return ra[0];
      if (y.hi <= x.lo) return ra[1];
      break;
    }
    case Expr::Kind::Max: {
      Bounds x = BoundsOf(ra[0], ranges), y = BoundsOf(ra[1], ranges);
      if (x.lo >= y.hi) return ra[0];
      if (y.lo >= x.hi) return ra[1];
      break;
    }
    case Expr::Kind::Lt: {
      Bounds d = BoundsOf(ra[0] - ra[1], ranges);
      if (d.hi < 0) return Expr(1);
      if (d.lo >= 0) return Expr(0);
      if (KnownBelow(ra[0], ra[1], ranges)) return Expr(1);
      break;
    }
    default: break;
  }
  return r;
}

std::string ShapeStr(const std::vector<Expr>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i].str();
  return s + "]";
}

Expr Product(const std::vector<Expr>& v) {
  Expr p(1);
  for (const Expr& x : v) p = p * x;
  return p;
}

}  // namespace prism
