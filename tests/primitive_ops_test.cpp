// Primitive ops against closed forms where the interpreter is not enough: the generated code's own 2^x
// over its whole range, and state bounds. Every op against the interpreter on every device, the CPU
// included, is device_ops_test.cpp over the catalog in op_graphs.h.
#include <gtest/gtest.h>

#include <cmath>

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
