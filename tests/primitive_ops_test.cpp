// Primitive ops against closed forms where the interpreter is not enough: the generated code's own 2^x
// over its whole range, and state bounds. Every op against the interpreter on every device, the CPU
// included, is device_ops_test.cpp over the catalog in op_graphs.h.
#include <gtest/gtest.h>

#include <cmath>

#include "frontend/nn.h"
#include "frontend/tensor.h"
#include "graph_check.h"

namespace prism {
namespace {
Expr N() { return Expr::Sym("n"); }
}  // namespace

// The generated code's own 2^x (straight-line, so its loops vectorize) over its whole range, against
// the interpreter's std::exp2: NaN and infinities pass, it overflows where f32 does, and what is
// subnormal in f32 (below 2^-126) becomes 0.
TEST(PrimitiveOps, Exp2OverItsWholeRange) {
  Graph g;
  NodeId x = g.Input("x", DType::F32, {N()});
  g.MarkOutput(g.Unary(Op::Exp2, x), "exp2");
  std::vector<float> xs = {NAN,       INFINITY, -INFINITY, 0.0f,    -0.0f,  1.0f,   -1.0f,
                           0.5f,      -0.5f,    127.0f,    127.99f, 128.0f, 300.0f, -126.0f,
                           -125.999f, -126.5f,  -149.0f,   -1e30f,  1e-30f};
  for (float v = -140.0f; v < 140.0f; v += 0.377f) xs.push_back(v);
  const int64_t n = (int64_t)xs.size();
  SymbolBindings b{{"n", n}};
  std::map<std::string, HostTensor> in{{"x", HostTensor::FromFloats({n}, xs)}};
  const std::vector<float> got = Program::Compile(g)->Run(in, b)[0].ToFloats();
  for (int64_t i = 0; i < n; ++i) {
    const double want = std::exp2((double)xs[i]);
    if (std::isnan(xs[i])) {
      EXPECT_TRUE(std::isnan(got[i]));
    } else if (want > 3.4028234663852886e38) {
      EXPECT_EQ(got[i], INFINITY) << xs[i];
    } else if (want < 1.1754943508222875e-38) {
      EXPECT_EQ(got[i], 0.0f) << xs[i];
    } else {
      EXPECT_NEAR(got[i], want, 2e-7 * want) << xs[i];
      if (xs[i] == std::floor(xs[i])) {
        EXPECT_EQ(got[i], want) << xs[i];  // exact at integers
      }
    }
  }
}

// Max propagates NaN from either side, in either order, against a tensor and against a number (ReLU's
// zero, which the generated code takes with a single max), over vectorized lengths.
TEST(PrimitiveOps, MaxPropagatesNaNFromEitherSide) {
  Graph g;
  Tensor a{&g, g.Input("a", DType::F32, {N()})}, b{&g, g.Input("b", DType::F32, {N()})};
  Tensor zero{&g, g.Constant(0.0, DType::F32)}, two{&g, g.Constant(-2.0, DType::F32)};
  g.MarkOutput(Maximum(a, b).id(), "ab");
  g.MarkOutput(Maximum(b, a).id(), "ba");
  g.MarkOutput(Maximum(a, zero).id(), "a0");
  g.MarkOutput(Maximum(two, a).id(), "2a");
  const int64_t n = 67;
  std::vector<float> av(n), bv(n);
  for (int64_t i = 0; i < n; ++i) {
    av[i] = (float)(i % 7) - 3.5f, bv[i] = (float)(i % 5) - 2.25f;
    if (i % 3 == 0) av[i] = NAN;
    if (i % 4 == 0) bv[i] = NAN;
  }
  const auto got = Program::Compile(g)->Run(
      {{"a", HostTensor::FromFloats({n}, av)}, {"b", HostTensor::FromFloats({n}, bv)}}, {{"n", n}});
  for (int64_t i = 0; i < n; ++i) {
    const float ab = got[0].ToFloats()[i], ba = got[1].ToFloats()[i], a0 = got[2].ToFloats()[i],
                a2 = got[3].ToFloats()[i];
    if (std::isnan(av[i]) || std::isnan(bv[i])) {
      EXPECT_TRUE(std::isnan(ab) && std::isnan(ba)) << i;
    } else {
      EXPECT_EQ(ab, std::max(av[i], bv[i])) << i;
      EXPECT_EQ(ba, std::max(av[i], bv[i])) << i;
    }
    if (std::isnan(av[i])) {
      EXPECT_TRUE(std::isnan(a0) && std::isnan(a2)) << i;
    } else {
      EXPECT_EQ(a0, std::max(av[i], 0.0f)) << i;
      EXPECT_EQ(a2, std::max(av[i], -2.0f)) << i;
    }
  }
}

// A concatenation along an axis outside the innermost is a sum of padded pieces whose guards hold or fail
// for a whole inner loop: each piece's loop runs alone (no masked loads of the others), and where pieces
// overlap (pads summed, not a concatenation) the later ones add onto the earlier. NaN and infinities
// inside a piece stay there.
TEST(PrimitiveOps, PiecesOfASumUnderOuterGuardsRunAlone) {
  Graph g;
  Tensor a{&g, g.Input("a", DType::F32, {N(), Expr(5), Expr(19)})};
  Tensor b{&g, g.Input("b", DType::F32, {Expr(3), Expr(5), Expr(19)})};
  g.MarkOutput(Concat({a, (b * b).exp(), a.sin()}, 0).id(), "cat");
  Tensor c{&g, g.Input("c", DType::F32, {N(), Expr(7)})};
  g.MarkOutput((c.pad(0, Expr(0), Expr(2)) + c.exp().pad(0, Expr(2), Expr(0))).id(), "overlap");
  auto prog = Program::Compile(g);
  EXPECT_NE(prog->source().find("bool live = false;"), std::string::npos) << "no piecewise kernel rendered";
  testing::CheckGraph(g, {{{"n", 1}}, {{"n", 4}}, {{"n", 17}}}, 1e-6, 1e-6);
  SymbolBindings b4{{"n", 4}};
  auto in = testing::RandomTensors(g, Op::Input, b4, 3);
  std::vector<float> av = in.at("a").ToFloats();
  av[7] = NAN, av[8] = INFINITY, av[9] = -INFINITY;
  in["a"] = HostTensor::FromFloats({4, 5, 19}, av);
  const std::vector<float> cat = prog->Run(in, b4)[0].ToFloats();
  EXPECT_TRUE(std::isnan(cat[7]));
  EXPECT_EQ(cat[8], INFINITY);
  EXPECT_EQ(cat[9], -INFINITY);
  EXPECT_TRUE(std::isnan(cat[(4 + 3) * 95 + 7]));  // sin(NaN) in the third piece
}

// Kernels alike but for the buffers they read (a model's layers) are one generated function under each
// kernel's name, each called with its own buffers: three blocks of the same shapes over their own weights
// render each of their kernels once, and every block's result is its own (against the interpreter, at odd
// sizes, one and two threads).
TEST(PrimitiveOps, KernelsAlikeButForTheirBuffersAreGeneratedOnce) {
  Graph g;
  Tensor h{&g, g.Input("x", DType::F32, {N(), Expr(13)})};
  for (int i = 0; i < 3; ++i) {
    Tensor w{&g, g.Weight("w" + std::to_string(i), DType::F32, {Expr(13), Expr(13)})};
    Tensor s{&g, g.Weight("s" + std::to_string(i), DType::F32, {Expr(13)})};
    h = RmsNorm(Linear(h, w).sin() * h + h, s, 1e-5f);
  }
  g.MarkOutput(h.id(), "y");
  auto prog = Program::Compile(g);
  const std::string& src = prog->source();
  int defined = 0, aliased = 0;
  for (size_t at = src.find("extern \"C\" void"); at != std::string::npos;
       at = src.find("extern \"C\" void", at + 1))
    (src.compare(src.find(')', at) + 1, 15, " __attribute__(") == 0 ? aliased : defined)++;
  EXPECT_GT(aliased, 0) << src;
  EXPECT_LT(defined * 2, defined + aliased)
      << "the later blocks' kernels are not the first block's functions";
  // CheckGraph's default tolerance, 1e-4: on AVX2 the rows form sums 8 lanes, then across them, and three
  // blocks of sin and RMS norm carried that order's rounding to 4.4e-5 in one of 429 outputs (two threads,
  // seed 3) and to 1.3e-5 at 0.14 in the sanitized build (one thread).
  testing::CheckGraph(g, {{{"n", 1}}, {{"n", 5}}, {{"n", 33}}});
  CompileOptions two;
  two.threads = 2;
  auto team = Program::Compile(g, two);
  testing::CheckExecutable(*team, {{{"n", 1}}, {{"n", 33}}}, 1e-4, 1e-4, 3, false, "two threads");
}

// A step whose writes would land past the end of the state is refused before anything runs.
TEST(PrimitiveOps, StateWriteBeyondTheStateIsAnError) {
  Graph g;
  NodeId cache = g.State("cache", DType::F32, {Expr(16), Expr(3)});
  NodeId v = g.Input("v", DType::F32, {N(), Expr(3)});
  g.MarkOutput(g.Reduce(Op::SumReduce, g.StateWrite(cache, v, 0, Expr::Sym("past")), {0}), "sum");
  auto prog = Program::Compile(g);
  SymbolBindings fits{{"n", 8}, {"past", 8}}, overflow{{"n", 8}, {"past", 10}};
  EXPECT_NO_THROW(prog->Run(testing::RandomTensors(g, Op::Input, fits, 1), fits));
  EXPECT_THROW(prog->Run(testing::RandomTensors(g, Op::Input, overflow, 1), overflow), Error);
}

}  // namespace prism
