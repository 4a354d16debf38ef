// The OpenCL backend (on PoCL here and in CI) against the reference interpreter: every op graph
// under each reduction schedule, fuzzed random graphs, state across steps, and rendering checks.
// PRISM_GPU_FUZZ_COUNT sets how many random graphs (default 200); PRISM_FUZZ_SEED=S replays one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "backends/opencl/opencl_device.h"
#include "codegen/gpu_renderer.h"
#include "gpu_check.h"
#include "op_graphs.h"
#include "opencl_device.h"
#include "random_graph.h"
#include "runtime/language_model.h"

namespace prism {
namespace {

struct NamedSchedule {
  const char* name;
  GpuSchedule schedule;
};

std::vector<NamedSchedule> Schedules() {
  GpuSchedule coop, per_thread, tiny_groups;
  coop.reduce = GpuSchedule::Reduce::Cooperative;
  coop.threads = 64;
  per_thread.reduce = GpuSchedule::Reduce::PerThread;
  per_thread.threads = 32;
  tiny_groups.reduce = GpuSchedule::Reduce::Cooperative;  // 2 threads, 3 groups: grid-stride loops
  tiny_groups.threads = 2;
  tiny_groups.max_groups = 3;
  return {{"auto", GpuSchedule{}},
          {"cooperative", coop},
          {"per_thread", per_thread},
          {"tiny_groups", tiny_groups}};
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Totals over the whole binary, printed at the end as the test's evidence.
struct Totals {
  int graphs = 0, kernels = 0, cooperative = 0, runs = 0;
  ~Totals() {
    if (graphs)
      std::cout << "OpenCL verified: " << graphs << " compiled graphs, " << kernels << " kernels ("
                << cooperative << " cooperative), " << runs << " runs against the interpreter\n";
  }
  void Add(const testing::GpuCheckStats& s) {
    ++graphs;
    kernels += s.kernels;
    cooperative += s.cooperative;
    runs += s.runs;
  }
} totals;

class OpenClOps : public ::testing::TestWithParam<std::string> {};

TEST_P(OpenClOps, MatchesInterpreterUnderEverySchedule) {
  PRISM_REQUIRE_OPENCL(dev);
  for (const testing::OpGraphCase& c : testing::OpGraphCases()) {
    if (c.name != GetParam()) continue;
    Graph g;
    c.build(g);
    // The graph once per schedule, all in one OpenCL build.
    std::vector<NamedSchedule> schedules = Schedules();
    std::vector<GpuCompileOptions> opts(schedules.size());
    for (size_t i = 0; i < schedules.size(); ++i) opts[i].schedule = schedules[i].schedule;
    auto progs = GpuProgram::CompileMany(std::vector<const Graph*>(schedules.size(), &g), dev, opts);
    int coop = 0, kernels = 0;
    for (size_t i = 0; i < schedules.size(); ++i) {
      SCOPED_TRACE(std::string("schedule ") + schedules[i].name);
      auto st = testing::CheckGpuProgram(*progs[i], c.bindings, c.atol, c.rtol, 1, c.stateful, c.name);
      totals.Add(st);
      coop += st.cooperative;
      kernels += st.kernels;
      if (schedules[i].schedule.reduce == GpuSchedule::Reduce::PerThread) {
        EXPECT_EQ(st.cooperative, 0);
      }
    }
    std::cout << c.name << ": " << kernels << " kernels over " << schedules.size() << " schedules, " << coop
              << " cooperative\n";
    return;
  }
  FAIL() << "no case " << GetParam();
}

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  for (const auto& c : testing::OpGraphCases()) names.push_back(c.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Graphs, OpenClOps, ::testing::ValuesIn(CaseNames()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(OpenCl, StateWritePastItsSizeIsAnErrorBeforeAnyLaunch) {
  PRISM_REQUIRE_OPENCL(dev);
  Graph g;
  NodeId cache = g.State("cache", DType::F32, {Expr(4), Expr(2)});
  NodeId v = g.Input("v", DType::F32, {Expr::Sym("n"), Expr(2)});
  g.MarkOutput(g.StateWrite(cache, v, 0, Expr::Sym("past")), "cache_out");
  auto prog = GpuProgram::Compile(g, dev);
  SymbolBindings b{{"n", 3}, {"past", 2}};
  auto in = testing::RandomTensors(g, Op::Input, b, 1);
  EXPECT_THROW(prog->Run(in, b), Error);
  EXPECT_THROW(prog->BindWeight("nope", HostTensor::Zeros(DType::F32, {1})), Error);
}

TEST(OpenCl, BuildErrorsCarryTheCompilerLog) {
  PRISM_REQUIRE_OPENCL(dev);
  try {
    dev->Compile("__kernel void broken(__global float* a) { a[0] = undefined_name; }", {"broken"});
    FAIL() << "expected a build error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("clBuildProgram"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined_name"), std::string::npos) << m;
  }
}

// Schedule for fuzz graph `seed`: rotates through the reduction strategies; group sizes vary so
// partial groups, odd sizes, single-thread groups and capped grids (grid-stride loops) appear.
GpuCompileOptions FuzzOptions(int seed) {
  GpuCompileOptions opts;
  static const int kThreads[] = {1, 2, 7, 32, 64, 128};
  opts.schedule.threads = kThreads[seed % 6];
  opts.schedule.reduce = seed % 3 == 0   ? GpuSchedule::Reduce::Auto
                         : seed % 3 == 1 ? GpuSchedule::Reduce::Cooperative
                                         : GpuSchedule::Reduce::PerThread;
  opts.schedule.cooperative_min = 4;
  if (seed % 5 == 4) opts.schedule.max_groups = 2;
  return opts;
}

TEST(OpenCl, RandomGraphsMatchInterpreter) {
  PRISM_REQUIRE_OPENCL(dev);
  int count = EnvInt("PRISM_GPU_FUZZ_COUNT", 200);
  int only = EnvInt("PRISM_FUZZ_SEED", -1);
  const int batch = 20;  // graphs per OpenCL build (the build, not the run, dominates on PoCL)
  int failures = 0, coop = 0, per_thread = 0, graphs = 0;
  for (int first = 0; first < count && failures < 5; first += batch) {
    std::vector<int> seeds;
    for (int seed = first; seed < std::min(count, first + batch); ++seed)
      if (only < 0 || seed == only) seeds.push_back(seed);
    if (seeds.empty()) continue;
    std::vector<Graph> gs(seeds.size());
    std::vector<const Graph*> ptrs;
    std::vector<GpuCompileOptions> opts;
    for (size_t i = 0; i < seeds.size(); ++i) {
      testing::RandomGraphBuilder(seeds[i]).Build(&gs[i]);
      ptrs.push_back(&gs[i]);
      opts.push_back(FuzzOptions(seeds[i]));
    }
    std::vector<std::unique_ptr<GpuProgram>> progs;
    try {
      progs = GpuProgram::CompileMany(ptrs, dev, opts);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "seeds " << seeds.front() << ".." << seeds.back() << ": " << e.what();
      ++failures;
      continue;
    }
    for (size_t i = 0; i < seeds.size(); ++i) {
      int seed = seeds[i];
      SCOPED_TRACE("fuzz seed " + std::to_string(seed) + " (replay: PRISM_FUZZ_SEED=" + std::to_string(seed) +
                   ")");
      int before = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
      try {
        auto st = testing::CheckGpuProgram(*progs[i], {{{"n", 1}}, {{"n", 4}}}, 1e-3, 1e-3, seed, false,
                                           "fuzz graph");
        totals.Add(st);
        coop += st.cooperative;
        per_thread += st.kernels - st.cooperative;
        ++graphs;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "exception: " << e.what() << "\n" << gs[i].ToText();
      }
      int after = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
      if (after != before) {
        std::cerr << "failing fuzz graph, seed " << seed << ":\n" << gs[i].ToText();
        if (++failures >= 5) break;
      }
    }
  }
  if (only < 0) {
    EXPECT_GT(coop, 0);
    EXPECT_GT(per_thread, 0);
  }
  std::cout << "fuzzed " << graphs << " random graphs on OpenCL: " << coop << " cooperative and "
            << per_thread << " per-thread kernels\n";
}

// A device that records graphs the way CudaDevice does (launches fixed at record time, changed only
// through Set) and replays them through OpenCL: GpuProgram's record/update/replay logic runs here.
class RecordingDevice : public GpuDevice {
 public:
  explicit RecordingDevice(std::shared_ptr<GpuDevice> d) : d_(std::move(d)) {}
  std::string name() const override { return "recording " + d_->name(); }
  GpuDialect dialect() const override { return d_->dialect(); }
  int max_threads_per_group() const override { return d_->max_threads_per_group(); }
  GpuMem Alloc(size_t bytes) override { return d_->Alloc(bytes); }
  void Free(GpuMem m) override { d_->Free(m); }
  void UploadAt(GpuMem dst, size_t offset, const void* src, size_t bytes) override {
    d_->UploadAt(dst, offset, src, bytes);
  }
  void DownloadAt(void* dst, GpuMem src, size_t offset, size_t bytes) override {
    d_->DownloadAt(dst, src, offset, bytes);
  }
  std::unique_ptr<GpuModule> Compile(const std::string& source,
                                     const std::vector<std::string>& fns) override {
    return d_->Compile(source, fns);
  }
  void Launch(GpuModule& m, int f, const std::vector<GpuArg>& args, int64_t groups, int threads) override {
    ++direct_launches;
    d_->Launch(m, f, args, groups, threads);
  }
  void Finish() override { d_->Finish(); }
  struct Recorded : GpuLaunchGraph {
    RecordingDevice* dev;
    GpuModule* module;
    std::vector<GpuLaunchParams> launches;
    size_t size() const override { return launches.size(); }
    void Set(size_t i, const GpuLaunchParams& p) override {
      if (launches.at(i).function != p.function) throw Error("recorded graph: launch changed function");
      if (!(launches[i] == p)) ++dev->updates;
      launches[i] = p;
    }
    void Replay() override {
      for (const GpuLaunchParams& l : launches)
        dev->d_->Launch(*module, l.function, l.args, l.groups, l.threads);
    }
  };
  std::unique_ptr<GpuLaunchGraph> RecordGraph(GpuModule& m,
                                              const std::vector<GpuLaunchParams>& launches) override {
    auto g = std::make_unique<Recorded>();
    g->dev = this;
    g->module = &m;
    g->launches = launches;
    return g;
  }
  int64_t direct_launches = 0, updates = 0;

 private:
  std::shared_ptr<GpuDevice> d_;
};

TEST(OpenCl, GraphReplayEqualsLaunchByLaunch) {
  PRISM_REQUIRE_OPENCL(dev);
  // stories260K's step with random weights: a prefill, then decode steps whose `past` (an argument
  // of every kernel) and attention grids change each step, replayed from one recorded graph.
  ModelFiles mf = OpenModelFiles(PRISM_SOURCE_DIR "/models/stories260K/stories260K.bin");
  LmGraphOptions go;
  go.max_context = 16;
  Graph g = BuildCausalLM(mf.config, mf.Lookup(), go);
  auto rec = std::make_shared<RecordingDevice>(dev);
  auto progs = GpuProgram::CompileMany({&g, &g}, rec, {GpuCompileOptions{}});
  GpuProgram &plain = *progs[0], &replayed = *progs[1];
  replayed.SetGraphReplay(true);
  for (auto& [name, t] : testing::RandomTensors(g, Op::Weight, {}, 5)) {
    plain.BindWeight(name, t);
    replayed.BindWeight(name, t);
  }
  std::vector<int32_t> tokens = {1, 7, 3, 5};
  int64_t past = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<int32_t> in = step == 0 ? tokens : std::vector<int32_t>{(int32_t)(step * 11)};
    std::map<std::string, HostTensor> inputs{{"tokens", HostTensor::FromInts({(int64_t)in.size()}, in)}};
    int64_t before = rec->direct_launches;
    auto want = plain.Run(inputs, {{"past", past}});
    EXPECT_GT(rec->direct_launches, before);
    before = rec->direct_launches;
    auto got = replayed.Run(inputs, {{"past", past}});
    EXPECT_EQ(rec->direct_launches, before) << "the replayed program launched directly";
    ASSERT_EQ(want[0].numel(), got[0].numel());
    for (int64_t i = 0; i < want[0].numel(); ++i)
      ASSERT_EQ(want[0].At(i), got[0].At(i)) << "step " << step << " logit " << i;
    past += (int64_t)in.size();
  }
  EXPECT_EQ(replayed.graph_records(), 1);
  EXPECT_EQ(replayed.graph_replays(), 6);
  EXPECT_GE(rec->updates, 5 * replayed.stats().kernels);  // every kernel takes `past`
  // A device without graphs (OpenCL itself) runs a program launch by launch.
  Graph small;
  Tensor x{&small, small.Input("x", DType::F32, {Expr::Sym("n")})};
  small.MarkOutput(x.sin().id(), "y");
  auto direct = GpuProgram::Compile(small, dev);
  direct->SetGraphReplay(true);
  auto y = direct->Run({{"x", HostTensor::FromFloats({2}, {0.0f, 1.0f})}});
  EXPECT_NEAR(y[0].At(1), std::sin(1.0), 1e-6);
  EXPECT_EQ(direct->graph_replays(), 0);
}

// Rendering properties that need no device.
TEST(GpuRenderer, SchedulesAndDialectsAreExplicit) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("n"), Expr(4096)})};
  g.MarkOutput(x.sum({1}).id(), "wide");  // 4096-element reduction per output
  g.MarkOutput(x.slice(1, 0, 8).sum({1}).id(), "narrow");
  KernelProgram kp = BuildKernelProgram(g);
  ASSERT_EQ(kp.kernels.size(), 2u);
  GpuSource cl = GpuRenderer(GpuDialect::OpenCL).Render(kp);
  EXPECT_TRUE(cl.kernels[0].cooperative);
  EXPECT_FALSE(cl.kernels[1].cooperative);
  EXPECT_NE(cl.source.find("__kernel"), std::string::npos);
  EXPECT_NE(cl.source.find("barrier(CLK_LOCAL_MEM_FENCE)"), std::string::npos);
  EXPECT_NE(cl.source.find("__local float prism_redf[256]"), std::string::npos);
  GpuSchedule per_thread;
  per_thread.reduce = GpuSchedule::Reduce::PerThread;
  GpuSource cu = GpuRenderer(GpuDialect::Cuda).Render(kp, per_thread);
  EXPECT_FALSE(cu.kernels[0].cooperative);
  EXPECT_EQ(cu.source.find("__syncthreads"), std::string::npos);
  EXPECT_NE(cu.source.find("extern \"C\" __global__ void __launch_bounds__(256)"), std::string::npos);
  GpuSchedule odd;
  odd.reduce = GpuSchedule::Reduce::Cooperative;
  odd.threads = 100;  // a tree reduction needs a power of two
  EXPECT_EQ(GpuRenderer(GpuDialect::Cuda).Render(kp, odd).kernels[0].threads, 64);
  EXPECT_THROW(GpuRenderer(GpuDialect::Cuda).Render(kp, std::vector<GpuSchedule>(1)), Error);
}

TEST(GpuRenderer, IdenticalKernelsShareOneFunction) {
  Graph g;
  Expr n = Expr::Sym("n");
  Tensor a{&g, g.Input("a", DType::F32, {n})}, b{&g, g.Input("b", DType::F32, {n})};
  g.MarkOutput(a.sin().id(), "sa");
  g.MarkOutput(b.sin().id(), "sb");  // same body over a different buffer
  g.MarkOutput(b.sqrt().id(), "qb");
  GpuSource s = GpuRenderer(GpuDialect::OpenCL).Render(BuildKernelProgram(g));
  ASSERT_EQ(s.kernels.size(), 3u);
  EXPECT_EQ(s.functions.size(), 2u);
  EXPECT_EQ(s.kernels[0].function, s.kernels[1].function);
  EXPECT_NE(s.kernels[1].buffers, s.kernels[0].buffers);
}

}  // namespace
}  // namespace prism
