// stories260K on GPU-style devices: every kernel of its step graph on OpenCL (PoCL here and in CI)
// against the reference interpreter, the published greedy text on OpenCL, and on CUDA where a GPU is.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/program.h"
#include "backends/cuda/cuda_device.h"
#include "backends/gpu/gpu_program.h"
#include "backends/opencl/opencl_device.h"
#include "gpu_check.h"
#include "ir/error.h"
#include "stories_reference.h"
#include "test_util.h"

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

// Prompts on one device and generation on another, each way: the KV cache read from and written to the
// device's buffers at each hand-over, and the published text either way.
void ExpectSplitText(const std::vector<std::pair<std::string, std::string>>& pairs) {
  for (const auto& [prefill, decode] : pairs) {
    LoadOptions lo = OnDevice(decode);
    lo.prefill_device = prefill;
    auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", lo);
    testing::ExpectReferenceText(*lm, "stories260K.bin prefilled on " + prefill + ", decoded on " + decode);
    ASSERT_FALSE(lm->last_handover().is_null());
    EXPECT_EQ(lm->last_handover()["from"], prefill);
    EXPECT_GT(lm->last_handover()["bytes"].get<double>(), 0);
  }
}

TEST(Stories260KOpenCl, PrefillOnOneDeviceDecodeOnAnother) {
  PRISM_REQUIRE_DEVICE(OpenClDevice);
  ExpectSplitText({{"opencl", "cpu"}, {"cpu", "opencl"}});
}

// The one search on OpenCL through the language model, as `prism compile --device opencl` runs it:
// kernels searched per bucket and saved to the tuning database, the chosen schedules keeping the
// published greedy text, an artifact holding them, a second load deciding everything from the
// database, and a replay searching one kernel again.
TEST(Stories260KOpenCl, SearchSavesToTheDatabaseAndArtifactAndReplays) {
  PRISM_REQUIRE_DEVICE(OpenClDevice);
  testing::FreshCache cache("opencl-search", "cache");
  LoadOptions lo = OnDevice("opencl");
  lo.max_context = 256;       // the reference text's length
  lo.search_busy_limit = 1;  // ctest runs other tests beside this one: save whatever was timed
  auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", lo);
  const nlohmann::json receipts = lm->Tune(120);
  const std::string device = OpenClDevice::Open()->name();
  int searched = 0;
  for (const auto& r : receipts) {
    if (r.value("scope", "") == "search") continue;
    EXPECT_EQ(r["device"], device) << r.dump();
    EXPECT_NE(r["chosen"], "") << r.dump();
    searched += r.contains("candidates");
  }
  EXPECT_GT(searched, 40);
  const auto& choices = lm->step_as<GpuProgram>().choices();
  // decode, batch (2 to 11 tokens), batch-wide (12 to 31), prefill and (attention at 256) prefill-long
  ASSERT_EQ(choices.size(), 5u);
  testing::ExpectReferenceText(*lm, "stories260K.bin on OpenCL, searched");
  // The artifact keeps the choices; loaded (on OpenCL), it runs them.
  const std::string dir = (cache.dir / "stories.prism").string();
  lm->SaveArtifact(dir, receipts);
  auto loaded = LanguageModel::Load(dir, lo);
  const auto& loaded_choices = loaded->step_as<GpuProgram>().choices();
  ASSERT_EQ(loaded_choices.size(), choices.size());
  for (const auto& [bucket, cs] : choices) {
    ASSERT_EQ(loaded_choices.at(bucket).size(), cs.size());
    for (size_t k = 0; k < cs.size(); ++k)
      EXPECT_EQ(GpuChoiceToJson(loaded_choices.at(bucket)[k]), GpuChoiceToJson(cs[k])) << bucket << " " << k;
  }
  testing::ExpectReferenceText(*loaded, "stories260K.prism on OpenCL");
  // A second load finds every decision in the database; a replay searches its kernel again.
  auto again = LanguageModel::Load(kStoriesDir + "stories260K.bin", lo);
  for (const auto& r : again->Tune(120)) EXPECT_EQ(r["reason"], "tuning database") << r.dump();
  const std::string replayed = receipts[0]["kernel"];
  int replay_searched = 0;
  for (const auto& r : again->Tune(120, replayed, /*replay=*/true)) {
    if (r.value("scope", "") == "search" || r["kernel"] != replayed) continue;
    EXPECT_TRUE(r.contains("candidates")) << r.dump();
    replay_searched++;
  }
  EXPECT_EQ(replay_searched, 4);  // decode, batch, batch-wide, prefill (prefill-long: attention only)
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

// The pairings issue 20 names: a GPU prefilling for the CPU or for the simulated systolic system
// (its f32 description, whose greedy text is the reference's), and the reverse.
TEST(Stories260KCuda, PrefillOnOneDeviceDecodeOnAnother) {
  PRISM_REQUIRE_DEVICE(CudaDevice);
  ExpectSplitText({{"cuda", "cpu"}, {"cpu", "cuda"}, {"cuda", "systolic:quad-f32"}, {"systolic:quad-f32", "cuda"}});
}

}  // namespace
}  // namespace prism
