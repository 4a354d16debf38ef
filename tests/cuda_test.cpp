// The CUDA backend. Without a GPU (CI): every kernel of the op graphs, of the stories260K model
// and of a Llama-3.2-1B-shaped model is rendered as CUDA C and compiled by NVRTC for sm_90.
// With a GPU: the op graphs run on it against the interpreter, a CUDA graph is replayed, and
// stories260K's decode replayed as CUDA graphs equals its launch-by-launch decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "codegen/gpu_renderer.h"
#include "gpu_check.h"
#include "op_graphs.h"
#include "random_graph.h"
#include "runtime/language_model.h"

namespace prism {
namespace {

#define PRISM_REQUIRE_NVRTC()                   \
  std::string nvrtc_why_;                       \
  if (!NvrtcCompiler::Available(&nvrtc_why_)) { \
    GTEST_SKIP() << nvrtc_why_;                 \
  }

const char* kArch = "sm_90";

struct Compiled {
  size_t kernels = 0, functions = 0, cooperative = 0, source_bytes = 0, image_bytes = 0;
  double render_seconds = 0, nvrtc_seconds = 0;
};

// Renders the program's kernels as CUDA C and compiles them with NVRTC; fails the test with the
// compiler log on any error.
Compiled CompileCuda(const KernelProgram& kp, const GpuSchedule& schedule, const std::string& what) {
  Compiled c;
  auto t0 = std::chrono::steady_clock::now();
  GpuSource src = GpuRenderer(GpuDialect::Cuda).Render(kp, schedule);
  c.render_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.kernels = src.kernels.size();
  c.functions = src.functions.size();
  for (const auto& k : src.kernels) c.cooperative += k.cooperative;
  c.source_bytes = src.source.size();
  if (const char* dir = std::getenv("PRISM_DUMP_CUDA"); dir && *dir) {  // for reading the generated code
    std::string name = what;
    for (char& ch : name)
      if (!std::isalnum((unsigned char)ch)) ch = '_';
    std::ofstream(std::string(dir) + "/" + name + ".cu") << src.source;
  }
  try {
    NvrtcOutput out = NvrtcCompiler::Open().Compile(src.source, kArch);
    c.nvrtc_seconds = out.seconds;
    c.image_bytes = out.image.size();
    EXPECT_TRUE(out.cubin);
    EXPECT_EQ(out.log, "") << what << ": NVRTC warnings";
    EXPECT_GT(out.image.size(), 0u) << what;
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
  return c;
}

void Report(const std::string& what, const Compiled& c) {
  std::printf(
      "%s: %zu kernels -> %zu CUDA functions (%zu cooperative), %zu bytes of CUDA C -> %zu byte %s CUBIN; "
      "render %.3f s, NVRTC %.2f s\n",
      what.c_str(), c.kernels, c.functions, c.cooperative, c.source_bytes, c.image_bytes, kArch,
      c.render_seconds, c.nvrtc_seconds);
}

TEST(Nvrtc, ReportsAMissingLibraryClearly) {
  std::string why;
  if (NvrtcCompiler::Available(&why)) {
    std::printf("NVRTC %s from %s\n", NvrtcCompiler::Open().version().c_str(),
                NvrtcCompiler::Open().library().c_str());
    SUCCEED();
  } else {
    EXPECT_NE(why.find("no NVRTC found"), std::string::npos) << why;
    EXPECT_THROW(NvrtcCompiler::Open(), Error);
  }
}

TEST(Nvrtc, CompileErrorsCarryTheLog) {
  PRISM_REQUIRE_NVRTC();
  try {
    NvrtcCompiler::Open().Compile("extern \"C\" __global__ void k(float* a) { a[0] = undefined_name; }",
                                  kArch);
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undefined_name"), std::string::npos) << e.what();
  }
}

TEST(Nvrtc, EveryOpGraphKernelCompilesForSm90UnderEachSchedule) {
  PRISM_REQUIRE_NVRTC();
  GpuSchedule coop, per_thread;
  coop.reduce = GpuSchedule::Reduce::Cooperative;
  per_thread.reduce = GpuSchedule::Reduce::PerThread;
  Compiled total;
  for (const testing::OpGraphCase& c : testing::OpGraphCases()) {
    Graph g;
    c.build(g);
    KernelProgram kp = BuildKernelProgram(g);
    for (const GpuSchedule& s : {GpuSchedule{}, coop, per_thread}) {
      Compiled r = CompileCuda(kp, s, c.name);
      total.kernels += r.kernels;
      total.cooperative += r.cooperative;
      total.nvrtc_seconds += r.nvrtc_seconds;
    }
  }
  std::printf("op graphs: %zu kernels compiled (%zu cooperative) in %.2f s of NVRTC\n", total.kernels,
              total.cooperative, total.nvrtc_seconds);
}

TEST(Nvrtc, RandomGraphKernelsCompileForSm90) {
  PRISM_REQUIRE_NVRTC();
  // One NVRTC call per graph, alternating the two reduction schedules.
  size_t kernels = 0;
  double seconds = 0;
  for (int seed = 0; seed < 40; ++seed) {
    Graph g;
    testing::RandomGraphBuilder(seed).Build(&g);
    GpuSchedule s;
    s.reduce = seed % 2 ? GpuSchedule::Reduce::Cooperative : GpuSchedule::Reduce::PerThread;
    Compiled r = CompileCuda(BuildKernelProgram(g), s, "fuzz seed " + std::to_string(seed));
    kernels += r.kernels;
    seconds += r.nvrtc_seconds;
  }
  std::printf("40 random graphs: %zu kernels compiled in %.2f s of NVRTC\n", kernels, seconds);
}

TEST(Nvrtc, Stories260KCompilesForSm90) {
  PRISM_REQUIRE_NVRTC();
  ModelFiles mf = OpenModelFiles(PRISM_SOURCE_DIR "/models/stories260K/stories260K.bin");
  LmGraphOptions go;
  go.max_context = 512;
  Graph g = BuildCausalLM(mf.config, mf.Lookup(), go);
  KernelProgram kp = BuildKernelProgram(g);
  Compiled c = CompileCuda(kp, GpuSchedule{}, "stories260K");
  EXPECT_EQ(c.kernels, kp.kernels.size());
  Report("stories260K (" + std::to_string(g.size()) + " graph nodes)", c);
}

TEST(Nvrtc, Llama32_1BShapedGraphCompilesForSm90) {
  PRISM_REQUIRE_NVRTC();
  ModelConfig cfg;
  cfg.architecture = "llama";
  cfg.vocab_size = 128256;
  cfg.hidden_size = 2048;
  cfg.intermediate_size = 8192;
  cfg.num_layers = 16;
  cfg.num_heads = 32;
  cfg.num_kv_heads = 8;
  cfg.head_dim = 64;
  cfg.max_position = 131072;
  cfg.rope_theta = 500000;
  cfg.rope_factor = 32;  // Llama 3.2's llama3 rope scaling
  cfg.tie_word_embeddings = true;
  LmGraphOptions go;
  go.max_context = 4096;
  // As in the Hugging Face files: llama3 rope scaling comes from the config, there is no
  // rope_freqs.weight tensor (that is GGUF's form of it).
  WeightLookup synthetic = SyntheticWeights(cfg, DType::BF16);
  WeightLookup hf_like = [synthetic](const std::string& name) -> std::optional<WeightSpec> {
    if (name == "rope_freqs.weight") return std::nullopt;
    return synthetic(name);
  };
  Graph g = BuildCausalLM(cfg, hf_like, go);
  KernelProgram kp = BuildKernelProgram(g);
  Compiled c = CompileCuda(kp, GpuSchedule{}, "llama-3.2-1B shape");
  EXPECT_EQ(c.kernels, kp.kernels.size());
  EXPECT_GT(c.cooperative, 0u);  // the projections are work-group reductions
  Report("Llama-3.2-1B shape, bf16 (" + std::to_string(g.size()) + " graph nodes)", c);
}

// ---- on a GPU (skipped without one)

std::shared_ptr<CudaDevice> TestGpu(std::string* why) {
  static std::shared_ptr<CudaDevice> dev;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      dev = CudaDevice::Open();
      std::printf("CUDA device: %s (%s)\n", dev->name().c_str(), dev->arch().c_str());
    } catch (const Error& e) {
      reason = e.what();
    }
  }
  *why = reason;
  return dev;
}

TEST(CudaDevice, AbsenceIsAClearErrorNotACrash) {
  std::string why;
  if (CudaDevice::Available(&why)) {
    GTEST_SKIP() << "a CUDA GPU is present";
  }
  EXPECT_NE(why.find("no CUDA driver/GPU found"), std::string::npos) << why;
  try {
    CudaDevice::Open();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA driver/GPU found"), std::string::npos) << e.what();
  }
}

TEST(CudaDevice, OpGraphsMatchInterpreterOnTheGpu) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  GpuSchedule coop, per_thread;
  coop.reduce = GpuSchedule::Reduce::Cooperative;
  per_thread.reduce = GpuSchedule::Reduce::PerThread;
  for (const testing::OpGraphCase& c : testing::OpGraphCases()) {
    Graph g;
    c.build(g);
    for (const GpuSchedule& s : {GpuSchedule{}, coop, per_thread}) {
      GpuCompileOptions opts;
      opts.schedule = s;
      testing::CheckGpuGraph(g, c.bindings, dev, opts, c.atol, c.rtol, 1, c.stateful, c.name);
    }
  }
  for (int seed = 0; seed < 100; ++seed) {
    Graph g;
    testing::RandomGraphBuilder(seed).Build(&g);
    GpuCompileOptions opts;
    opts.schedule.reduce = seed % 2 ? GpuSchedule::Reduce::Cooperative : GpuSchedule::Reduce::PerThread;
    testing::CheckGpuGraph(g, {{{"n", 1}}, {{"n", 4}}}, dev, opts, 1e-3, 1e-3, seed, false,
                           "fuzz seed " + std::to_string(seed));
  }
}

TEST(CudaDevice, CapturedGraphReplaysLaunchesAndEventsTimeThem) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  auto m = dev->Compile(
      "extern \"C\" __global__ void add_one(float* a, long long n) {\n"
      "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
      "  if (i < n) a[i] += 1.0f;\n}\n",
      {"add_one"});
  const int64_t n = 1000;
  GpuMem buf = dev->Alloc(n * sizeof(float));
  std::vector<GpuArg> args = {GpuArg::Buffer(buf), GpuArg::Int(n)};
  auto graph = dev->Capture([&] {
    for (int i = 0; i < 3; ++i) dev->Launch(*m, 0, args, (n + 127) / 128, 128);
  });
  double ms = dev->TimeMs([&] {
    graph->Replay();
    graph->Replay();
  });
  dev->Finish();
  std::vector<float> host(n);
  dev->Download(host.data(), buf, n * sizeof(float));
  dev->Free(buf);
  for (float v : host) ASSERT_EQ(v, 6.0f);
  std::printf("2 replays of a 3-launch CUDA graph: %.3f ms\n", ms);
}

TEST(CudaDevice, GraphReplayedDecodeEqualsLaunchByLaunch) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  // stories260K on the GPU twice: decode steps replayed from one CUDA graph (its nodes' `past`
  // arguments and attention grids rewritten each step) and launched kernel by kernel. The same
  // kernels on the same data: the logits must be bit-identical, and near the CPU's.
  const std::string model = PRISM_SOURCE_DIR "/models/stories260K/stories260K.bin";
  LoadOptions graphs, launches;
  graphs.device = launches.device = "cuda";
  launches.gpu_graphs = false;
  auto a = LanguageModel::Load(model, graphs), b = LanguageModel::Load(model, launches);
  auto cpu = LanguageModel::Load(model);
  std::vector<int32_t> ids = cpu->tokenizer().Encode("Once upon a time", true);
  std::vector<float> la = a->Forward(ids), lb = b->Forward(ids), lc = cpu->Forward(ids);
  double graph_ms = 0, launch_ms = 0;
  for (int step = 0; step < 40; ++step) {
    ASSERT_EQ(la, lb) << "step " << step;
    for (size_t i = 0; i < la.size(); ++i)
      ASSERT_NEAR(la[i], lc[i], 1e-3) << "step " << step << " logit " << i;
    int32_t next = (int32_t)(std::max_element(la.begin(), la.end()) - la.begin());
    auto t0 = std::chrono::steady_clock::now();
    la = a->Forward({next});  // synchronous: each step waits for the GPU and reads the logits back
    auto t1 = std::chrono::steady_clock::now();
    lb = b->Forward({next});
    auto t2 = std::chrono::steady_clock::now();
    graph_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
    launch_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
    lc = cpu->Forward({next});
  }
  EXPECT_GE(a->gpu_program()->graph_replays(), 40);
  EXPECT_EQ(b->gpu_program()->graph_replays(), 0);
  std::printf(
      "40 stories260K decode steps (wall clock, logits read back): %.3f ms replayed as CUDA graphs, %.3f ms "
      "launch by launch\n",
      graph_ms, launch_ms);
}

}  // namespace
}  // namespace prism
