// Graph simplification at build time (common subexpressions, constant folding, x*1 and x+0) and dead
// code: what each removes, and that the compiled program still matches the interpreter.
#include <gtest/gtest.h>

#include "compiler/kernel_ir.h"
#include "frontend/nn.h"
#include "graph_check.h"

namespace prism {
using testing::CheckGraph;

TEST(GraphRewrites, EqualNodesAreOneNode) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("n"), Expr(8)})};
  const int32_t before = g.size();
  Tensor a = (x * 2.0).sin(), b = (x * 2.0).sin();
  EXPECT_EQ(a.id(), b.id());
  const int32_t after_one = g.size();
  Tensor c = (x * 2.0).sin();
  EXPECT_EQ(c.id(), a.id());
  EXPECT_EQ(g.size(), after_one);  // nothing new
  EXPECT_GT(after_one, before);
  // Different operands, attributes or types stay different.
  EXPECT_NE((x * 3.0).sin().id(), a.id());
  EXPECT_NE(x.sum({0}).id(), x.sum({1}).id());
  EXPECT_NE(x.cast(DType::BF16).id(), x.cast(DType::F16).id());
  // Rotary embeddings for queries and keys share their sin/cos tables now: fewer kernels.
  g.MarkOutput((a + b).id(), "y");
  CheckGraph(g, {{{"n", 5}}}, 1e-6, 1e-6);
}

TEST(GraphRewrites, ConstantsFoldWithTheInterpretersRounding) {
  Graph g;
  const std::vector<Expr> shape = {Expr::Sym("n")};
  NodeId two = g.Constant(2.0, DType::F32, shape), three = g.Constant(3.0, DType::F32, shape);
  NodeId e = g.Unary(Op::Exp2, three);
  ASSERT_EQ(g.node(e).op, Op::Constant);
  EXPECT_EQ(g.node(e).scalar, 8.0);
  NodeId s = g.Binary(Op::Add, two, e);
  ASSERT_EQ(g.node(s).op, Op::Constant);
  EXPECT_EQ(g.node(s).scalar, 10.0);
  // In bf16 the operands and the sum round as the interpreter rounds them.
  NodeId hb = g.Constant(1.0, DType::BF16, shape), lb = g.Constant(0.0078125 * 1.3, DType::BF16, shape);
  NodeId sb = g.Binary(Op::Add, hb, lb);
  ASSERT_EQ(g.node(sb).op, Op::Constant);
  const double want =
      RoundToDType(RoundToDType(1.0, DType::BF16) + RoundToDType(0.0078125 * 1.3, DType::BF16), DType::BF16);
  EXPECT_EQ(g.node(sb).scalar, want);
  NodeId x = g.Input("x", DType::F32, shape);
  g.MarkOutput(g.Binary(Op::Mul, x, sb), "y");
  g.MarkOutput(g.Cast(g.Binary(Op::Mul, x, g.Unary(Op::Recip, three)), DType::F16), "z");
  CheckGraph(g, {{{"n", 7}}}, 1e-6, 1e-6);
}

TEST(GraphRewrites, MultiplyingByOneAndAddingZeroAreIdentities) {
  Graph g;
  const std::vector<Expr> shape = {Expr(4)};
  NodeId x = g.Input("x", DType::F32, shape);
  EXPECT_EQ(g.Binary(Op::Mul, x, g.Constant(1.0, DType::F32, shape)), x);
  EXPECT_EQ(g.Binary(Op::Add, g.Constant(0.0, DType::F32, shape), x), x);
  EXPECT_NE(g.Binary(Op::Mul, x, g.Constant(1.0009765625, DType::F32, shape)), x);
  // An integer times a float 1 becomes a float: not the same node.
  NodeId i = g.Input("i", DType::I32, shape);
  EXPECT_NE(g.Binary(Op::Mul, i, g.Constant(1.0, DType::F32, shape)), i);
}

TEST(GraphRewrites, DeadNodesGetNoKernels) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("n"), Expr(16)})};
  Tensor unused = (x.exp() * 3.0).sum({1});  // a reduction nothing reads
  (void)unused;
  g.MarkOutput((x * 2.0).id(), "y");
  KernelProgram p = BuildKernelProgram(g);
  EXPECT_EQ(p.kernels.size(), 1u) << KernelProgramToText(g, p);
  CheckGraph(g, {{{"n", 3}}}, 1e-6, 1e-6);
}

}  // namespace prism
