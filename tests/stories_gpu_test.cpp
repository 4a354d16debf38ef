// stories260K on GPU-style devices: every kernel of its step graph on OpenCL (PoCL here and in CI)
// against the reference interpreter, the published greedy text on OpenCL, and on CUDA where a GPU is.
#include <gtest/gtest.h>

#include <cstdio>

#include "backends/cpu/program.h"
#include "backends/cuda/cuda_device.h"
#include "backends/gpu/gpu_program.h"
#include "backends/opencl/opencl_device.h"
#include "gpu_check.h"
#include "ir/error.h"
#include "stories_reference.h"

namespace prism {
namespace {

using testing::kStoriesDir;

#define PRISM_REQUIRE_DEVICE(Kind)                 \
  if (std::string why_; !Kind::Available(&why_)) { \
    GTEST_SKIP() << why_;                          \
  }

LoadOptions OnDevice(const std::string& device) {
  LoadOptions lo;
  lo.device = device;
  return lo;
}

TEST(Stories260KOpenCl, EveryStepKernelMatchesInterpreter) {
  PRISM_REQUIRE_DEVICE(OpenClDevice);
  // The model's own step graph (all 5 layers) with random non-zero weights, run as a prefill and
  // two decode steps that read the KV cache the earlier steps wrote; each schedule form once.
  ModelFiles mf = OpenModelFiles(kStoriesDir + "stories260K.bin");
  LmGraphOptions go;
  go.max_context = 32;
  Graph g = BuildCausalLM(mf.config, mf.Lookup(), go);
  GpuCompileOptions auto_form, per_thread;
  per_thread.schedule.reduce = GpuSchedule::Reduce::PerThread;
  auto progs = GpuProgram::CompileMany({&g, &g}, OpenClDevice::Open(), {auto_form, per_thread});
  std::vector<SymbolBindings> steps = {
      {{"seq", 5}, {"past", 0}}, {{"seq", 1}, {"past", 5}}, {{"seq", 3}, {"past", 6}}};
  for (size_t i = 0; i < progs.size(); ++i) {
    SCOPED_TRACE(i == 0 ? "auto schedule" : "per-thread schedule");
    auto st = testing::CheckGpuProgram(*progs[i], steps, 1e-3, 1e-3, 11, true, "stories260K step");
    EXPECT_EQ(st.runs, 3);
    std::printf(
        "stories260K step graph (%d nodes): %d kernels, %d cooperative, %d steps match the interpreter\n",
        g.size(), st.kernels, st.cooperative, st.runs);
  }
  EXPECT_GT(progs[0]->stats().cooperative, 0);
  EXPECT_EQ(progs[1]->stats().cooperative, 0);
}

TEST(Stories260KOpenCl, GreedyTextMatchesReference) {
  PRISM_REQUIRE_DEVICE(OpenClDevice);
  auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", OnDevice("opencl"));
  ASSERT_NO_THROW(lm->step_as<GpuProgram>());
  testing::ExpectReferenceText(*lm, "stories260K.bin on OpenCL");
}

TEST(Stories260KOpenCl, LogitsMatchTheCpu) {
  PRISM_REQUIRE_DEVICE(OpenClDevice);
  // Prefill then decode (buffers sized by the prefill serve the decode steps), and the
  // all-positions program perplexity uses.
  auto gpu = LanguageModel::Load(kStoriesDir + "stories260K.bin", OnDevice("opencl"));
  auto cpu = LanguageModel::Load(kStoriesDir + "stories260K.bin");
  std::vector<int32_t> ids = cpu->tokenizer().Encode("Lily and Tom went to the park", true);
  auto expect_near = [](const std::vector<float>& want, const std::vector<float>& got, const char* what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(want[i], got[i], 1e-4) << what << " " << i;
  };
  expect_near(cpu->Forward(ids), gpu->Forward(ids), "prefill");
  for (int32_t t : {7, 100, 3}) expect_near(cpu->Forward({t}), gpu->Forward({t}), "decode");
  expect_near(cpu->ForwardAll(ids), gpu->ForwardAll(ids), "all logits");
  EXPECT_THROW(gpu->step_as<Program>(), Error);  // the CPU program does not exist on this device
}

TEST(Stories260KGpu, MissingOrUnknownDevicesAreClearErrors) {
  EXPECT_THROW(LanguageModel::Load(kStoriesDir + "stories260K.bin", OnDevice("tpu")), Error);
  std::string why;
  if (CudaDevice::Available(&why)) {
    GTEST_SKIP() << "a CUDA GPU is present";
  }
  try {
    LanguageModel::Load(kStoriesDir + "stories260K.bin", OnDevice("cuda"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("device cuda: no CUDA driver/GPU found"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Stories260KCuda, GreedyTextMatchesReference) {
  PRISM_REQUIRE_DEVICE(CudaDevice);
  auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", OnDevice("cuda"));
  testing::ExpectReferenceText(*lm, "stories260K.bin on CUDA");
}

}  // namespace
}  // namespace prism
