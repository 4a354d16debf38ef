// Memory plan: arena placement never lets live buffers share bytes, reuses bytes across lifetimes, and
// programs running in the arena (two threads, barrier intervals) still match the interpreter.
#include "backends/cpu/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "frontend/nn.h"
#include "graph_check.h"

namespace prism {
namespace {

// The graph compiled for `threads` and its reference interpreter, bound to the same random weights.
struct Compiled {
  std::unique_ptr<Program> prog;
  std::unique_ptr<Interpreter> interp;
};
Compiled CompileWithReference(const Graph& g, int threads, uint64_t seed) {
  CompileOptions opts;
  opts.threads = threads;
  Compiled c{Program::Compile(g, opts), std::make_unique<Interpreter>(g)};
  for (auto& [name, t] : testing::RandomTensors(g, Op::Weight, {}, seed)) {
    c.prog->BindWeight(name, t);
    c.interp->BindWeight(name, t);
  }
  return c;
}

}  // namespace

TEST(MemoryPlan, LiveBuffersNeverShareBytesAndDeadOnesDo) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<ScratchItem> items;
    for (int i = 0; i < 40; ++i) {
      int a = (int)(rng() % 20), b = a + (int)(rng() % 6);
      items.push_back({(int64_t)(rng() % 5000) * (rng() % 4 == 0 ? 0 : 1), a, b});
    }
    int64_t arena = 0;
    std::vector<int64_t> off = PlaceInArena(items, &arena);
    int64_t biggest = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      biggest = std::max(biggest, items[i].bytes);
      if (items[i].bytes == 0) {
        EXPECT_EQ(off[i], -1);
        continue;
      }
      EXPECT_EQ(off[i] % 64, 0);
      EXPECT_LE(off[i] + items[i].bytes, arena);
      for (size_t j = 0; j < i; ++j) {
        if (items[j].bytes == 0 || items[i].last < items[j].first || items[j].last < items[i].first) continue;
        EXPECT_TRUE(off[i] + items[i].bytes <= off[j] || off[j] + items[j].bytes <= off[i])
            << "items " << i << " and " << j << " are live together and overlap";
      }
    }
    EXPECT_GE(arena, biggest);
  }
  // Three buffers live one after another fit in the bytes of the largest.
  int64_t arena = 0;
  PlaceInArena({{1000, 0, 0}, {640, 1, 1}, {900, 2, 2}}, &arena);
  EXPECT_EQ(arena, 1024);
}

TEST(MemoryPlan, ProgramsInTheArenaMatchTheInterpreterAndUseLessThanSeparateBuffers) {
  Graph g;
  const Expr seq = Expr::Sym("seq");
  Tensor x{&g, g.Input("x", DType::F32, {seq, Expr(96)})};
  Tensor h = x;
  auto weight = [&](const std::string& name, std::vector<Expr> shape) {
    return Tensor{&g, g.Weight(name, DType::F32, std::move(shape))};
  };
  // Layers of three independent products (kernels that share barrier intervals) joined by softmax,
  // sigmoid and a norm: many short-lived buffers.
  for (int l = 0; l < 6; ++l) {
    std::string p = std::to_string(l);
    Tensor a = Linear(h, weight("a" + p, {Expr(96), Expr(96)})),
           b = Linear(h, weight("b" + p, {Expr(96), Expr(96)}));
    Tensor c = Linear(h, weight("c" + p, {Expr(96), Expr(96)}));
    h = RmsNorm(h + Softmax(a * 0.05, -1) * b * 0.05 + (c * 0.05).sigmoid(), weight("n" + p, {Expr(96)}),
                1e-5);
  }
  g.MarkOutput(h.id(), "y");
  for (int threads : {1, 2}) {
    auto [prog, interp] = CompileWithReference(g, threads, 3);
    for (int64_t n : {70, 1, 5}) {
      SymbolBindings b{{"seq", n}};
      auto in = testing::RandomTensors(g, Op::Input, b, 11 + n);
      testing::ExpectClose(interp->Run(in, b), prog->Run(in, b), 1e-5, 1e-4, "seq=" + std::to_string(n));
      EXPECT_EQ(prog->ArenaConflicts(), 0) << "threads=" << threads << " seq=" << n;
    }
    nlohmann::json m = prog->MemoryReport({{"seq", 70}});
    EXPECT_GT(m["scratch_buffers"].get<int64_t>(), 6);
    EXPECT_LT(m["arena_bytes"].get<int64_t>(), m["scratch_bytes_separate"].get<int64_t>()) << m.dump();
  }
}

// A result's memory is written again by a later run only once the caller has let the result go (a serving
// step's logits: not allocated and zeroed each step); one the caller keeps is never touched, even at
// another size.
TEST(MemoryPlan, AResultIsReusedOnlyAfterTheCallerLetsItGo) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(40)})};
  g.MarkOutput(Linear(x, Tensor{&g, g.Weight("w", DType::F32, {Expr(24), Expr(40)})}).id(), "y");
  auto [prog, interp] = CompileWithReference(g, 2, 5);
  auto run = [&](int64_t n, uint64_t seed) {
    SymbolBindings b{{"seq", n}};
    auto in = testing::RandomTensors(g, Op::Input, b, seed);
    std::vector<HostTensor> got = prog->Run(in, b);
    testing::ExpectClose(interp->Run(in, b), got, 1e-5, 1e-4, "seq=" + std::to_string(n));
    return got[0];
  };
  HostTensor kept = run(9, 1);
  const std::vector<float> kept_values = kept.ToFloats();
  const void* first = kept.data;
  HostTensor second = run(9, 2);  // the first is held: new memory, the first unchanged
  EXPECT_NE(second.data, first);
  EXPECT_EQ(kept.ToFloats(), kept_values);
  const void* second_memory = second.data;
  second = HostTensor();  // let go: the next run of fewer rows writes there
  EXPECT_EQ(run(5, 3).data, second_memory);
  EXPECT_NE(run(30, 4).data, second_memory);  // more rows than that memory holds: fresh memory
  EXPECT_EQ(kept.ToFloats(), kept_values);
}

TEST(MemoryPlan, AnItemWrittenInPlaceTakesTheBytesOfTheOneItOverwrites) {
  // b is written over a (a's last use is b's first), c over b; d lives through all three.
  std::vector<ScratchItem> items = {{1000, 0, 2}, {1000, 2, 4}, {640, 4, 6}, {500, 0, 6}};
  items[1].over = 0;
  items[2].over = 1;
  int64_t arena = 0;
  std::vector<int64_t> off = PlaceInArena(items, &arena);
  EXPECT_EQ(off[1], off[0]);
  EXPECT_EQ(off[2], off[0]);
  EXPECT_TRUE(off[3] >= off[0] + 1024 || off[3] + 512 <= off[0]) << "d overlaps the chain";
  EXPECT_EQ(arena, 1024 + 512);
}

// One product's output, SiLU-gated by another's, is written over the gate's bytes (its last use) but
// not over the first product's, which is read again later; nothing is written in place over a buffer
// read at another element (a transpose).
TEST(MemoryPlan, ElementwiseKernelsWriteInPlaceOnlyWhereLegal) {
  auto build = [](bool transposed) {
    Graph g;
    const Expr seq = Expr::Sym("seq");
    auto weight = [&](const std::string& name, std::vector<Expr> shape) {
      return Tensor{&g, g.Weight(name, DType::F32, std::move(shape))};
    };
    Tensor x{&g, g.Input("x", DType::F32, {seq, Expr(96)})};
    Tensor a = Linear(x, weight("wa", {Expr(96), Expr(96)})) * 0.1,
           b = Linear(x, weight("wb", {Expr(96), Expr(96)})) * 0.1;
    Tensor gate =
        transposed ? b.reshape({seq, Expr(8), Expr(12)}).permute({0, 2, 1}).reshape({seq, Expr(96)}) : b;
    Tensor h = a.sigmoid() * a * gate;  // a is read again below: only the gate may be overwritten
    g.MarkOutput((Linear(h, weight("wc", {Expr(96), Expr(96)})) + a).id(), "y");
    return g;
  };
  for (bool transposed : {false, true})
    for (int threads : {1, 2}) {
      Graph g = build(transposed);
      auto [prog, interp] = CompileWithReference(g, threads, 6);
      for (int64_t n : {40, 1, 7}) {
        SymbolBindings b{{"seq", n}};
        auto in = testing::RandomTensors(g, Op::Input, b, 21 + n);
        testing::ExpectClose(interp->Run(in, b), prog->Run(in, b), 1e-5, 1e-4, "seq=" + std::to_string(n));
        EXPECT_EQ(prog->ArenaConflicts(), 0) << "threads=" << threads << " seq=" << n;
      }
      const int64_t in_place = prog->MemoryReport({{"seq", 40}})["written_in_place"].get<int64_t>();
      if (transposed)
        EXPECT_EQ(in_place, 0) << "threads=" << threads;
      else
        EXPECT_GE(in_place, 1) << "threads=" << threads;
    }
}

// A parallel product reads X for the last time while, in the same barrier interval, thread 0 runs an
// independent serial product writing Y: X's bytes are still being read, so Y must not take them.
TEST(MemoryPlan, KernelsThatRunAtOnceNeverShareBytes) {
  Graph g;
  const Expr seq = Expr::Sym("seq");
  auto weight = [&](const std::string& name, std::vector<Expr> shape) {
    return Tensor{&g, g.Weight(name, DType::F32, std::move(shape))};
  };
  Tensor x{&g, g.Input("x", DType::F32, {seq, Expr(96)})}, z{&g, g.Input("z", DType::F32, {seq, Expr(8)})};
  Tensor xn = RmsNorm(x, weight("n", {Expr(96)}), 1e-5);
  Tensor big = Linear(xn, weight("w1", {Expr(512), Expr(96)}));  // parallel: xn's last use
  Tensor y = Linear(z, weight("w2", {Expr(96), Expr(8)}));       // serial, independent of big
  g.MarkOutput((Linear(y, weight("w3", {Expr(512), Expr(96)})) + big).id(), "out");
  auto [prog, interp] = CompileWithReference(g, 2, 4);
  EXPECT_THROW(prog->ArenaConflicts(), Error);  // nothing planned yet: no answer, rather than a 0
  SymbolBindings b{{"seq", 70}};
  auto in = testing::RandomTensors(g, Op::Input, b, 12);
  testing::ExpectClose(interp->Run(in, b), prog->Run(in, b), 1e-4, 1e-4, "two products at once");
  EXPECT_EQ(prog->ArenaConflicts(), 0);
}

}  // namespace prism
