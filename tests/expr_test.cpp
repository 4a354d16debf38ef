// Tests of symbolic expressions: canonical forms, simplification with ranges, evaluation.
#include <gtest/gtest.h>

#include "ir/error.h"
#include "ir/expr.h"
#include "ir/movement.h"

namespace prism {

TEST(Expr, CanonicalSumsCancel) {
  Expr s = Expr::Sym("seq"), p = Expr::Sym("past");
  EXPECT_EQ((s + p - s).str(), "past");
  EXPECT_TRUE((s * 4 - s * 4).IsConst(0));
  EXPECT_EQ((s + 1 + p + 2), (p + s + 3));
  EXPECT_EQ(((s + 1) * 2).str(), (s * 2 + 2).str());
}

TEST(Expr, FloorDivModFollowPython) {
  EXPECT_EQ(FloorDiv(-7, 2), -4);
  EXPECT_EQ(FloorMod(-7, 2), 1);
  Expr x = Expr::Sym("x");
  std::map<std::string, int64_t> b{{"x", -7}};
  EXPECT_EQ((x / 2).Eval(b), -4);
  EXPECT_EQ((x % 2).Eval(b), 1);
}

TEST(Expr, DivModOfMultiplesSimplify) {
  Expr i = Expr::Sym("i"), j = Expr::Sym("j"), n = Expr::Sym("n");
  EXPECT_EQ(((i * 8 + 16) / 8).str(), (i + 2).str());
  EXPECT_TRUE(((i * n) % n).IsConst(0));
  EXPECT_EQ(((i * n + j) / n).str(), (i + j / n).str());
  RangeMap r{{"j", {0, kUnbounded, Expr::Sym("n")}}, {"i", {0, 9, {}}}};
  EXPECT_EQ(Simplify((i * n + j) / n, r).str(), "i");
  EXPECT_EQ(Simplify((i * n + j) % n, r).str(), "j");
  EXPECT_EQ(Simplify(i % 10, r).str(), "i");
  EXPECT_TRUE(Simplify(i / 10, r).IsConst(0));
  EXPECT_TRUE(Simplify(Lt(i, Expr(10)), r).IsConst(1));
  // Bounds through symbolic extents: 8*j + 7 < 8*n when j < n.
  RangeMap r2{{"j", {0, kUnbounded, n}}, {"k", {0, 7, {}}}, {"n", {0, kUnbounded, {}}}};
  Expr k = Expr::Sym("k");
  EXPECT_TRUE(Simplify((j * 8 + k) / (n * 8), r2).IsConst(0));
  EXPECT_EQ(Simplify((j * 8 + k) % (n * 8), r2), j * 8 + k);
  EXPECT_EQ(((j % n) % n).str(), (j % n).str());
  EXPECT_EQ((k % 2 + (k / 2) * 2 + 5).str(), (k + 5).str());  // a split index recombines
  EXPECT_EQ(((i * (n * 8 + 8) + j) / (n * 8 + 8)).str(), (i + j / (n * 8 + 8)).str());
  // A key t < 16 * blocks lies in block t / 16 < blocks: the modulo goes.
  Expr t = Expr::Sym("t"), blocks = Expr::Sym("blocks");
  RangeMap r3{{"t", {0, kUnbounded, blocks * 16}}, {"blocks", {0, kUnbounded, {}}}};
  EXPECT_EQ(Simplify((t / 16) % blocks, r3).str(), (t / 16).str());
  EXPECT_NE(Simplify((t / 8) % blocks, r3).str(), (t / 8).str());  // t / 8 may reach 2 * blocks - 1
}

TEST(Expr, ReshapeRoundTripIsIdentityAfterSimplification) {
  Expr s = Expr::Sym("seq");
  std::vector<Expr> shape{s, Expr(8), Expr(4)};
  std::vector<Expr> idx{Expr::Sym("i0"), Expr::Sym("i1"), Expr::Sym("i2")};
  RangeMap r{{"i0", {0, kUnbounded, Expr::Sym("seq")}}, {"i1", {0, 7, {}}}, {"i2", {0, 3, {}}}};
  auto back = UnravelIndex(shape, LinearIndex(shape, idx));
  for (int a = 0; a < 3; ++a) EXPECT_EQ(Simplify(back[a], r), idx[a]) << back[a].str();
}

TEST(Expr, EvalNamesUnboundSymbol) {
  Expr e = Expr::Sym("past") + 1;
  try {
    e.Eval({});
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("past"), std::string::npos);
  }
  EXPECT_THROW(Expr::Sym("x") / Expr(0), Error);
}

TEST(Expr, SubstituteAndMinMax) {
  Expr a = Expr::Sym("a");
  EXPECT_EQ((a + 3).Substitute({{"a", Expr(4)}}).value(), 7);
  EXPECT_EQ(Min(a, a + 2), a);
  EXPECT_EQ(Max(a, a + 2), a + 2);
  EXPECT_EQ(Min(Expr(3), Expr(5)).value(), 3);
}

}  // namespace prism
