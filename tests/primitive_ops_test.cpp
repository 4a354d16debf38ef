// Every primitive op, compiled for the CPU, against the reference interpreter on random inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "frontend/tensor.h"
#include "graph_check.h"

namespace prism {
using testing::CheckGraph;

namespace {
Expr N() { return Expr::Sym("n"); }
std::vector<SymbolBindings> Sizes() { return {{{"n", 1}}, {{"n", 3}}, {{"n", 17}}, {{"n", 4097}}}; }
}  // namespace

TEST(PrimitiveOps, UnaryOpsOverSymbolicSizes) {
  Graph g;
  NodeId x = g.Input("x", DType::F32, {N()});
  Tensor t{&g, x};
  Tensor pos = t.abs() + 0.1;  // log2/sqrt/recip need positive inputs
  g.MarkOutput(g.Unary(Op::Exp2, x), "exp2");
  g.MarkOutput(g.Unary(Op::Log2, pos.id()), "log2");
  g.MarkOutput(g.Unary(Op::Sin, x), "sin");
  g.MarkOutput(g.Unary(Op::Sqrt, pos.id()), "sqrt");
  g.MarkOutput(g.Unary(Op::Recip, pos.id()), "recip");
  CheckGraph(g, Sizes(), 1e-5, 1e-5);
}

// The generated code's own 2^x (straight-line, so its loops vectorize) over its whole range, against
// the interpreter's std::exp2: NaN and infinities pass, it overflows where f32 does, and what is
// subnormal in f32 (below 2^-126) becomes 0.
TEST(PrimitiveOps, Exp2OverItsWholeRange) {
  Graph g;
  NodeId x = g.Input("x", DType::F32, {N()});
  g.MarkOutput(g.Unary(Op::Exp2, x), "exp2");
  std::vector<float> xs = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 127.0f, 127.99f,
                           128.0f, 300.0f, -126.0f, -125.999f, -126.5f, -149.0f, -1e30f, 1e-30f};
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

TEST(PrimitiveOps, BinaryOpsAndWhere) {
  Graph g;
  NodeId a = g.Input("a", DType::F32, {N(), Expr(3)});
  NodeId b = g.Input("b", DType::F32, {N(), Expr(3)});
  for (Op op : {Op::Add, Op::Mul, Op::Max, Op::LessThan}) g.MarkOutput(g.Binary(op, a, b), std::string(OpName(op)));
  Tensor bt{&g, b};
  g.MarkOutput(g.Binary(Op::Mod, a, (bt.abs() + 0.5).id()), "mod");
  NodeId c = g.Binary(Op::LessThan, a, b);
  g.MarkOutput(g.Where(c, a, b), "where");
  CheckGraph(g, Sizes(), 1e-6, 1e-6);
}

TEST(PrimitiveOps, CastsBetweenAllPlainTypes) {
  Graph g;
  NodeId x = g.Input("x", DType::F32, {N()});
  Tensor t = Tensor{&g, x} * 40.0;
  for (DType d : {DType::F16, DType::BF16, DType::I32, DType::I8, DType::U8, DType::Bool})
    g.MarkOutput(g.Cast(t.id(), d), "to_" + std::string(DTypeName(d)));
  NodeId i = g.Input("i", DType::I32, {N()});
  g.MarkOutput(g.Cast(i, DType::F32), "int_to_f32");
  g.MarkOutput(g.Binary(Op::Add, i, i), "int_add");
  CheckGraph(g, Sizes(), 0, 0);
}

TEST(PrimitiveOps, HalfAndQuantizedStorage) {
  Graph g;
  NodeId h = g.Input("h", DType::F16, {N(), Expr(64)});
  NodeId bf = g.Input("bf", DType::BF16, {N(), Expr(64)});
  NodeId q8 = g.Weight("q8", DType::Q8_0, {Expr(5), Expr(64)});
  NodeId q4 = g.Weight("q4", DType::Q4_0, {Expr(5), Expr(64)});
  g.MarkOutput(g.Binary(Op::Add, h, bf), "sum");   // promotes to f32
  g.MarkOutput(g.Binary(Op::Mul, h, h), "f16_mul");  // stays f16
  g.MarkOutput(g.Cast(q8, DType::F32), "q8");
  g.MarkOutput(g.Cast(q4, DType::F32), "q4");
  CheckGraph(g, {{{"n", 1}}, {{"n", 7}}}, 2e-3, 2e-3);
}

TEST(PrimitiveOps, ReductionsOverEachAxis) {
  Graph g;
  NodeId x = g.Input("x", DType::F32, {Expr(3), N(), Expr(17)});
  for (std::vector<int64_t> axes : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
    g.MarkOutput(g.Reduce(Op::SumReduce, x, axes), "sum");
    g.MarkOutput(g.Reduce(Op::MaxReduce, x, axes), "max");
  }
  CheckGraph(g, Sizes(), 1e-3, 1e-4);
}

TEST(PrimitiveOps, IotaAndConstant) {
  Graph g;
  NodeId io = g.Iota({N(), Expr(4)}, 0, DType::I32);
  NodeId io1 = g.Iota({N(), Expr(4)}, 1, DType::F32);
  g.MarkOutput(io, "iota0");
  g.MarkOutput(g.Binary(Op::Add, io1, g.Constant(0.5, DType::F32, {N(), Expr(4)})), "iota1");
  CheckGraph(g, Sizes(), 0, 0);
}

TEST(PrimitiveOps, GatherRowsAndColumns) {
  Graph g;
  NodeId table = g.Weight("table", DType::F32, {Expr(11), Expr(6)});
  NodeId ids = g.Input("ids", DType::I32, {N(), Expr(6)});
  g.MarkOutput(g.Gather(table, ids, 0), "rows");
  NodeId cols = g.Input("cols", DType::I32, {Expr(11), N()});
  g.MarkOutput(g.Gather(g.Slice(table, {0, 0}, {Expr(11), N()}, {}), cols, 1), "cols");
  CheckGraph(g, {{{"n", 1}}, {{"n", 3}}, {{"n", 6}}}, 0, 0);
}

TEST(PrimitiveOps, MovementViewsComposeWithoutCopies) {
  Graph g;
  NodeId x = g.Input("x", DType::F32, {N(), Expr(6), Expr(4)});
  NodeId p = g.Permute(x, {2, 0, 1});
  g.MarkOutput(p, "permute");
  g.MarkOutput(g.Reshape(p, {Expr(4), N() * 6}), "permute_reshape");  // non-contiguous reshape
  NodeId r = g.Reshape(x, {N(), Expr(3), Expr(8)});
  g.MarkOutput(g.Slice(r, {0, 1, 1}, {N(), Expr(2), Expr(3)}, {1, 1, 3}), "strided_slice");
  g.MarkOutput(g.Pad(x, {1, 0, 2}, {0, 3, 1}), "pad");
  NodeId one = g.Reduce(Op::SumReduce, x, {1});
  g.MarkOutput(g.Expand(one, {N(), Expr(5), Expr(4)}), "expand");
  g.MarkOutput(g.Binary(Op::Add, g.Permute(p, {1, 2, 0}), x), "permute_back_add");
  CheckGraph(g, Sizes(), 1e-4, 1e-5);
}

TEST(PrimitiveOps, StateWriteAtSymbolicOffset) {
  Graph g;
  NodeId cache = g.State("cache", DType::F32, {Expr(16), Expr(3)});
  NodeId v = g.Input("v", DType::F32, {N(), Expr(3)});
  NodeId w = g.StateWrite(cache, v, 0, Expr::Sym("past"));
  g.MarkOutput(g.Slice(w, {0, 0}, {Expr::Sym("past") + N(), Expr(3)}, {}), "visible");
  g.MarkOutput(g.Reduce(Op::SumReduce, w, {0}), "sum");
  // Several steps on one compiled program: state persists between runs.
  auto prog = Program::Compile(g);
  Interpreter interp(g);
  int64_t past = 0;
  for (int64_t n : {3, 1, 1, 5}) {
    SymbolBindings b{{"n", n}, {"past", past}};
    auto in = testing::RandomTensors(g, Op::Input, b, 42 + past);
    testing::ExpectClose(interp.Run(in, b), prog->Run(in, b), 1e-5, 1e-5, "state step past=" + std::to_string(past));
    past += n;
  }
  SymbolBindings overflow{{"n", 8}, {"past", past}};
  auto in = testing::RandomTensors(g, Op::Input, overflow, 1);
  EXPECT_THROW(prog->Run(in, overflow), Error);
}

}  // namespace prism
