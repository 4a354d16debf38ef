// The GPU schedule search on OpenCL (PoCL): receipts per kernel, chosen schedules that match the
// interpreter, a deliberately wrong candidate rejected, and device timestamps behind the timings.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "backends/opencl/opencl_device.h"
#include "gpu_check.h"
#include "op_graphs.h"
#include "opencl_device.h"

namespace prism {
namespace {

// The default rendering of kernel k with every stored value scaled by 1.01: runs, is fast, and is
// wrong by 1% (the check tolerates 0.2% of the samples' largest magnitude).
GpuCandidate ScaledByOnePercent(const KernelProgram& kp, size_t k, GpuDialect dialect) {
  KernelProgram one = kp;
  one.kernels = {kp.kernels[k]};
  GpuSource src = GpuRenderer(dialect).Render(one, GpuSchedule{}, "wrong" + std::to_string(k) + "_");
  GpuCandidate c;
  c.name = "wrong";
  c.rendered = false;
  c.source = src.functions_source;
  // The store is the last line naming the output (a0); its value's cast comes first in that line.
  size_t line = c.source.rfind('\n', c.source.rfind("a0"));
  size_t at = c.source.find("(float)(", line);
  EXPECT_NE(at, std::string::npos);
  c.source.replace(at, 8, "1.01f * (float)(");
  c.functions = src.functions;
  GpuKernelPlan plan = src.kernels[0];
  Kernel kn = kp.kernels[k];
  std::vector<std::string> symbols = kp.symbols;
  c.launch = [plan, kn, symbols](GpuDevice& dev, GpuModule& m, int fn, const std::vector<GpuMem>& mems,
                                 const SymbolBindings& b) {
    GpuLaunchDims d = GpuLaunch(kn, plan, b);
    std::vector<GpuArg> args;
    for (int buf : plan.buffers) args.push_back(GpuArg::Buffer(mems[buf]));
    for (const std::string& s : symbols) args.push_back(GpuArg::Int(b.at(s)));
    if (d.elements) dev.Launch(m, fn, args, d.groups, d.threads);
  };
  return c;
}

class GpuSearch : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuSearch, ChoosesCheckedSchedulesAndRejectsAWrongCandidate) {
  PRISM_REQUIRE_OPENCL(dev);
  for (const testing::OpGraphCase& c : testing::OpGraphCases()) {
    if (c.name != GetParam()) continue;
    Graph g;
    c.build(g);
    auto prog = GpuProgram::Compile(g, dev);
    int wrong_added = 0;
    prog->AddSearchCandidates([&](const KernelProgram& kp, size_t k) -> std::vector<GpuCandidate> {
      if (!IsFloat(kp.buffers[kp.kernels[k].out_buffer].dtype)) return {};
      ++wrong_added;
      return {ScaledByOnePercent(kp, k, dev->dialect())};
    });
    // Every bucket the case's sizes fall in, so that each size checked below runs searched choices.
    SearchOptions opts = testing::OneBucketSearch(c.bindings.back());
    for (const SymbolBindings& b : c.bindings) {
      const std::string bucket = BucketOf(b, std::set<std::string>{});
      if (std::none_of(opts.buckets.begin(), opts.buckets.end(),
                       [&](const auto& x) { return x.first == bucket; }))
        opts.buckets.push_back({bucket, b});
    }
    auto t0 = std::chrono::steady_clock::now();
    const nlohmann::json receipts = SearchSchedules(*prog, opts);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const KernelProgram& kp = prog->kernels();
    const size_t nk = kp.kernels.size();
    EXPECT_GT(wrong_added, 0);
    int candidates = 0, wrong_rejected = 0, wrong_seen = 0;
    size_t searched = 0;
    for (const nlohmann::json& r : receipts) {
      if (r.value("scope", "") == "search") continue;  // how busy the machine was
      SCOPED_TRACE(r.dump(1));
      EXPECT_EQ(r["kernel"], kp.kernels[searched++ % nk].name);
      EXPECT_EQ(r["device"], dev->name());
      const bool largest = r["bucket"] == opts.buckets[0].first;
      if (largest) {
        EXPECT_NE(r["chosen"], "wrong");
      }
      if (r["reason"] == "tuning database") continue;  // a kernel of the same structure decided it before
      EXPECT_EQ(r["timer"], "device");
      ASSERT_TRUE(r.contains("candidates"));
      EXPECT_NE(r["chosen"], "");
      bool chosen_passed = false;
      for (const nlohmann::json& t : r["candidates"]) {
        ++candidates;
        // The wrong candidate is checked at the case's largest sizes (at seq 1 some outputs, such as a
        // variance over one row, are exactly 0, which scaling leaves right).
        if (t["candidate"] == "wrong" && largest) {
          ++wrong_seen;
          EXPECT_FALSE(t["passed"].get<bool>());
          EXPECT_GT(t["max_rel_error"].get<double>(), 2e-3);
          wrong_rejected += !t["passed"].get<bool>();
          EXPECT_FALSE(t.contains("median_us"));  // failing candidates are not timed
          continue;
        }
        if (!t["passed"].get<bool>()) continue;
        EXPECT_LE(t["min_us"].get<double>(), t["median_us"].get<double>());
        EXPECT_LE(t["median_us"].get<double>(), t["max_us"].get<double>());
        EXPECT_GT(t["max_us"].get<double>(), 0);
        EXPECT_GE(t["runs"], t.value("raced_out", false) ? 1 : opts.min_runs);
        EXPECT_LE(t["runs"], opts.max_runs);
        if (t["candidate"] == r["chosen"]) {
          chosen_passed = true;
          EXPECT_EQ(t["median_us"], r["median_us"]);
        }
      }
      EXPECT_TRUE(chosen_passed);
    }
    EXPECT_EQ(searched, nk * opts.buckets.size());
    // Every wrong candidate a receipt shows was rejected (kernels whose twin decided before show none).
    EXPECT_EQ(wrong_rejected, wrong_seen);
    EXPECT_GT(wrong_seen, 0);
    EXPECT_LE(wrong_seen, wrong_added);
    // The program now runs the chosen schedules: against the interpreter at every size of the case.
    testing::CheckGpuProgram(*prog, c.bindings, c.atol, c.rtol, 1, c.stateful, c.name);
    std::printf("%s: %zu kernels, %d candidates (%d wrong, all rejected), searched in %.2f s\n",
                c.name.c_str(), nk, candidates, wrong_seen, secs);
    return;
  }
  FAIL() << "no case " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Graphs, GpuSearch,
                         ::testing::Values("matmul", "softmax_family_and_norms", "quantized_and_half_linear",
                                           "causal_gqa_attention_with_kv_state", "embedding"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(GpuSearch, MissingSizeSymbolIsAnError) {
  PRISM_REQUIRE_OPENCL(dev);
  Graph g;
  NodeId x = g.Input("x", DType::F32, {Expr::Sym("n")});
  g.MarkOutput(g.Unary(Op::Sqrt, x), "y");
  try {
    auto prog = GpuProgram::Compile(g, dev);
    SearchSchedules(*prog, testing::OneBucketSearch({}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'n'"), std::string::npos) << e.what();
  }
}

// Device timestamps: a kernel doing 64x the work takes measurably longer than a tiny one.
TEST(GpuSearch, DeviceTimerSeesKernelDuration) {
  PRISM_REQUIRE_OPENCL(dev);
  ASSERT_TRUE(dev->device_timer());
  const char* src =
      "__kernel void spin(__global float* a, const long n) {\n"
      "  float x = a[get_global_id(0)];\n"
      "  for (long i = 0; i < n; ++i) x = x * 0.999f + 0.5f;\n"
      "  a[get_global_id(0)] = x;\n"
      "}\n";
  auto m = dev->Compile(src, {"spin"});
  GpuMem buf = dev->Alloc(64 * sizeof(float));
  auto time = [&](int64_t n) {
    double best = 1e30;
    for (int i = 0; i < 3; ++i)
      best = std::min(best, dev->TimeMs([&] {
        dev->Launch(*m, 0, {GpuArg::Buffer(buf), GpuArg::Int(n)}, 1, 64);
      }));
    return best;
  };
  double small = time(1000), big = time(64000);
  dev->Free(buf);
  std::printf("device timer: 1000 iterations %.3f ms, 64000 iterations %.3f ms\n", small, big);
  EXPECT_GT(small, 0);
  EXPECT_GT(big, 8 * small);
  EXPECT_EQ(dev->TimeMs([] {}), 0);  // nothing launched: nothing timed
}

}  // namespace
}  // namespace prism
