// The CUDA backend. Without a GPU (CI): every kernel of the op graphs, of the stories260K model
// and of a Llama-3.2-1B-shaped model is rendered as CUDA C and compiled by NVRTC for sm_90.
// With a GPU: the op graphs run on it against the interpreter, a CUDA graph is replayed, and
// stories260K's decode replayed as CUDA graphs equals its launch-by-launch decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "backends/cuda/cublas_loader.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "codegen/cuda_mma_gemm.h"
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
    // Present: the library it loaded is NVRTC and answers with a "major.minor" version.
    const NvrtcCompiler& nvrtc = NvrtcCompiler::Open();
    const std::filesystem::path lib = nvrtc.library();  // a path, or a name the dynamic loader resolved
    EXPECT_EQ(lib.filename().string().rfind("libnvrtc", 0), 0u) << lib;
    if (lib.is_absolute()) {
      EXPECT_TRUE(std::filesystem::exists(lib)) << lib;
    }
    int major = 0, minor = -1;
    EXPECT_EQ(std::sscanf(nvrtc.version().c_str(), "%d.%d", &major, &minor), 2) << nvrtc.version();
    EXPECT_GE(major, 11) << nvrtc.version();  // sm_90 needs CUDA 11.8 or later
    EXPECT_GE(minor, 0) << nvrtc.version();
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

// A Llama-3.2-1B-shaped step graph with bf16 weights (synthetic: only shapes and dtypes matter).
Graph Llama32_1BShapedGraph() {
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
  return BuildCausalLM(cfg, hf_like, go);
}

TEST(Nvrtc, Llama32_1BShapedGraphCompilesForSm90) {
  PRISM_REQUIRE_NVRTC();
  Graph g = Llama32_1BShapedGraph();
  KernelProgram kp = BuildKernelProgram(g);
  Compiled c = CompileCuda(kp, GpuSchedule{}, "llama-3.2-1B shape");
  EXPECT_EQ(c.kernels, kp.kernels.size());
  EXPECT_GT(c.cooperative, 0u);  // the projections are work-group reductions
  Report("Llama-3.2-1B shape, bf16 (" + std::to_string(g.size()) + " graph nodes)", c);
}

Graph Stories260KGraph() {
  ModelFiles mf = OpenModelFiles(PRISM_SOURCE_DIR "/models/stories260K/stories260K.bin");
  LmGraphOptions go;
  go.max_context = 512;
  return BuildCausalLM(mf.config, mf.Lookup(), go);
}

// The tensor-core template for every GEMM shape (N, K) of stories260K and of the 1B-shaped graph,
// one translation unit, compiled for sm_90 (and sm_80, its lowest target).
TEST(Nvrtc, TensorCoreGemmCompilesForTheModelsGemmShapes) {
  PRISM_REQUIRE_NVRTC();
  std::set<std::pair<int64_t, int64_t>> shapes;
  int applies_1b = 0;
  for (int model = 0; model < 2; ++model) {
    Graph g = model ? Llama32_1BShapedGraph() : Stories260KGraph();
    KernelProgram kp = BuildKernelProgram(g);
    for (const Kernel& k : kp.kernels) {
      if (!k.gemm) continue;
      shapes.insert({k.gemm->n, k.gemm->k});
      applies_1b += model == 1 && CudaMmaGemmApplies(kp, k);
    }
  }
  EXPECT_GT(applies_1b, 0) << "the bf16 projections of the 1B shape are template GEMMs";
  ASSERT_GE(shapes.size(), 4u);
  std::string src = GpuRenderer(GpuDialect::Cuda).Prelude();
  std::string names;
  for (auto [n, k] : shapes) {
    src += CudaMmaGemmSource(n, k);
    names += " " + std::to_string(n) + "x" + std::to_string(k);
  }
  for (const char* arch : {"sm_90", "sm_80"}) {
    NvrtcOutput out = NvrtcCompiler::Open().Compile(src, arch);
    EXPECT_TRUE(out.cubin);
    EXPECT_EQ(out.log, "") << arch << ": NVRTC warnings";
    EXPECT_GT(out.image.size(), 0u);
    std::printf("tensor-core GEMM, %zu shapes (N x K:%s): %zu byte %s CUBIN in %.2f s\n", shapes.size(),
                names.c_str(), out.image.size(), arch, out.seconds);
  }
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
  EXPECT_GE(a->step_as<GpuProgram>().graph_replays(), 40);
  EXPECT_EQ(b->step_as<GpuProgram>().graph_replays(), 0);
  std::printf(
      "40 stories260K decode steps (wall clock, logits read back): %.3f ms replayed as CUDA graphs, %.3f ms "
      "launch by launch\n",
      graph_ms, launch_ms);
}

// x [seq, 172] . W^T for W [72, 172]: M, N and K all off the 64 x 64 x 32 tiling.
Graph LinearGraph(DType w_dtype) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(172)})};
  Tensor w{&g, g.Weight("w", w_dtype, {Expr(72), Expr(172)})};
  g.MarkOutput(Linear(x, w).id(), "y");
  return g;
}
Graph BfLinearGraph() { return LinearGraph(DType::BF16); }

// Checks a program of LinearGraph whose GEMM rounds the activations to the weight's type (the
// tensor-core template, cuBLAS in bf16/f16) against the interpreter, twice per size. With random
// activations in [-2, 2], every element must lie within the bound of that rounding
// (CublasGemmErrorBound: over K = 172 such products the error reaches 0.07, a fixed tolerance is
// wrong either way). With activations already representable in the weight's type the products are
// exact, and only the f32 sums' order may differ. A wrong fragment layout is off by ~10 in both.
void CheckRoundedActivationGemm(GpuProgram& prog, DType wt, const std::vector<int64_t>& seqs,
                                const std::string& what) {
  const Graph& g = prog.graph();
  const int64_t n = 72, k = 172;
  for (int64_t seq : seqs) {
    const SymbolBindings b{{"seq", seq}};
    auto weights = testing::RandomTensors(g, Op::Weight, b, 1000 + seq);
    Interpreter interp(g);
    for (auto& [name, t] : weights) {
      interp.BindWeight(name, t);
      prog.BindWeight(name, t);
    }
    auto inputs = testing::RandomTensors(g, Op::Input, b, seq);
    const uint16_t* w = static_cast<const uint16_t*>(weights.at("w").data);
    for (bool representable : {false, true}) {
      HostTensor& x = inputs.at("x");
      if (representable) {
        std::vector<float> v(x.numel());
        for (int64_t i = 0; i < x.numel(); ++i) v[i] = (float)RoundToDType(x.At(i), wt);
        x = HostTensor::FromFloats(x.shape, v);
      }
      interp.ResetState();
      prog.ResetState();
      const HostTensor want = interp.Run(inputs, b).at(0), got = prog.Run(inputs, b).at(0);
      ASSERT_EQ(want.shape, got.shape) << what;
      const float* xs = static_cast<const float*>(x.data);
      int reported = 0;
      for (int64_t i = 0; i < want.numel(); ++i) {
        const float* x_row = xs + i / n * k;
        const uint16_t* w_row = w + i % n * k;
        double sum_abs = 0;
        for (int64_t l = 0; l < k; ++l) sum_abs += std::fabs(x_row[l] * LoadAsDouble(w_row, wt, l));
        const double f32_sums = 4e-5 * sum_abs + 1e-6;  // two f32 sums of 172 terms, any order
        const double tol = f32_sums + (representable ? 0 : CublasGemmErrorBound(wt, x_row, w_row, k));
        if (!(std::fabs(want.At(i) - got.At(i)) <= tol) && reported++ < 3)  // NaN fails too
          ADD_FAILURE() << what << " seq=" << seq << (representable ? " (representable activations)" : "")
                        << ": element " << i << " expected " << want.At(i) << " got " << got.At(i)
                        << ", allowed error " << tol;
      }
    }
  }
}

// A CUDA-dialect device without a GPU: Compile runs NVRTC for sm_90, nothing else does anything.
class NvrtcOnlyDevice : public GpuDevice {
 public:
  std::string name() const override { return "nvrtc only"; }
  GpuDialect dialect() const override { return GpuDialect::Cuda; }
  int max_threads_per_group() const override { return 1024; }
  GpuMem Alloc(size_t) override { return ++next_; }
  void Free(GpuMem) override {}
  void UploadAt(GpuMem, size_t, const void*, size_t) override {}
  void DownloadAt(void*, GpuMem, size_t, size_t) override {}
  std::unique_ptr<GpuModule> Compile(const std::string& source, const std::vector<std::string>&) override {
    NvrtcOutput out = NvrtcCompiler::Open().Compile(source, kArch);
    EXPECT_EQ(out.log, "");
    source_ = source;
    return std::make_unique<GpuModule>();
  }
  void Launch(GpuModule&, int, const std::vector<GpuArg>&, int64_t, int) override {}
  void Finish() override {}
  std::string source_;

 private:
  GpuMem next_ = 0;
};

// Without a GPU: the search offers the tensor-core template for the bf16 GEMM only, and a program
// selecting it builds (its whole translation unit through NVRTC).
TEST(Nvrtc, TensorCoreGemmIsACandidateAndProgramsSelectingItBuild) {
  PRISM_REQUIRE_NVRTC();
  Graph g = BfLinearGraph();
  auto dev = std::make_shared<NvrtcOnlyDevice>();
  KernelProgram kp = BuildKernelProgram(g);
  GpuCompileOptions opts;
  int offered = 0;
  for (size_t k = 0; k < kp.kernels.size(); ++k) {
    int mma = 0;
    for (const GpuCandidate& c : GpuScheduleCandidates(kp, k, *dev)) mma += c.name == "mma-bf16";
    EXPECT_EQ(mma, CudaMmaGemmApplies(kp, kp.kernels[k]) ? 1 : 0);
    offered += mma;
    opts.mma_gemm.push_back(mma > 0);
  }
  EXPECT_EQ(offered, 1);
  auto prog = GpuProgram::Compile(g, dev, opts);
  EXPECT_NE(dev->source_.find(CudaMmaGemmName(72, 172)), std::string::npos);
  // Selecting it where it does not apply (f32 weights) is an error, not a silent fallback.
  Graph f32;
  Tensor x{&f32, f32.Input("x", DType::F32, {Expr::Sym("seq"), Expr(64)})};
  f32.MarkOutput(Linear(x, Tensor{&f32, f32.Weight("w", DType::F32, {Expr(64), Expr(64)})}).id(), "y");
  GpuCompileOptions forced;
  forced.mma_gemm.assign(BuildKernelProgram(f32).kernels.size(), true);
  EXPECT_THROW(GpuProgram::Compile(f32, dev, forced), Error);
}

// Compile options running every GEMM the tensor-core template takes on it.
GpuCompileOptions TensorCoresWhereTheyApply(const Graph& g) {
  GpuCompileOptions opts;
  KernelProgram kp = BuildKernelProgram(g);
  for (const Kernel& k : kp.kernels) opts.mma_gemm.push_back(CudaMmaGemmApplies(kp, k));
  return opts;
}

TEST(CudaDevice, TensorCoreGemmMatchesInterpreter) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  Graph g = BfLinearGraph();
  GpuCompileOptions opts = TensorCoresWhereTheyApply(g);
  ASSERT_EQ(std::count(opts.mma_gemm.begin(), opts.mma_gemm.end(), true), 1);
  auto prog = GpuProgram::Compile(g, dev, opts);
  CheckRoundedActivationGemm(*prog, DType::BF16, {1, 37, 130}, "tensor-core GEMM");
}

// A language model's step: the tensor cores from 16 rows on, the rendered GEMV below. Switching
// between them records a new CUDA graph (a recorded node's function cannot change); the same
// functions at another size only update the recorded one.
TEST(CudaDevice, TensorCoreGemmFromAMinimumOfRowsReRecordsTheGraph) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  Graph g = BfLinearGraph();
  GpuCompileOptions opts = TensorCoresWhereTheyApply(g);
  opts.mma_min_rows = 16;
  auto prog = GpuProgram::Compile(g, dev, opts);
  prog->SetGraphReplay(true);
  CheckRoundedActivationGemm(*prog, DType::BF16, {1, 37, 1, 15, 16, 130}, "tensor-core GEMM from 16 rows");
  EXPECT_EQ(prog->graph_records(), 4);  // at 1, 37, 1 again, 16
  EXPECT_EQ(prog->graph_replays(), 12);
}

TEST(CudaDevice, ScheduleSearchOffersAndChecksTheTensorCoreGemm) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  Graph g = BfLinearGraph();
  auto prog = GpuProgram::Compile(g, dev);
  const nlohmann::json receipts = SearchSchedules(*prog, testing::OneBucketSearch({{"seq", 130}}));
  bool offered = false;
  for (const nlohmann::json& r : receipts) {
    if (!r.contains("candidates")) continue;
    EXPECT_EQ(r["timer"], "device");
    for (const nlohmann::json& t : r["candidates"])
      if (t["candidate"] == "mma-bf16") {
        offered = true;
        EXPECT_TRUE(t["passed"].get<bool>()) << r.dump(1);
        EXPECT_GT(t["median_us"].get<double>(), 0);
      }
  }
  EXPECT_TRUE(offered);
  CheckRoundedActivationGemm(*prog, DType::BF16, {1, 130}, "searched");  // the program runs what was chosen
  std::printf("%s\n", receipts.dump(1).c_str());
}

// ---- cuBLAS as the library tier of template GEMMs

// The loader finds cuBLAS's entry points wherever the toolkit installed libcublas (dlopen works
// without a GPU); where it is absent the reason is one line naming libcublas.
TEST(Cublas, LoaderFindsTheEntryPointsOrSaysWhy) {
  std::string why;
  const CublasApi* api = LoadCublas(&why);
  bool installed = false;
  for (const char* d : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib"})
    installed = installed || std::filesystem::exists(std::string(d) + "/libcublas.so");
  if (!api) {
    EXPECT_FALSE(installed) << "libcublas is installed but did not load: " << why;
    EXPECT_NE(why.find("libcublas"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    GTEST_SKIP() << why;
  }
  EXPECT_EQ(why, "");
  EXPECT_NE(api->create, nullptr);
  EXPECT_NE(api->destroy, nullptr);
  EXPECT_NE(api->set_stream, nullptr);
  EXPECT_NE(api->gemm_ex, nullptr);
  EXPECT_EQ(LoadCublas(), api) << "loaded once";
  std::printf("cuBLAS entry points from %s\n", api->library.c_str());
}

// cublasGemmEx's column-major definition run on the host with the arguments CublasRowMajorGemm
// gives: C(i, j) = sum_l op(A)(i, l) op(B)(l, j), X(i, j) at X[i + j * ld], op = transpose for T.
// Every access is bounds-checked, so a wrong leading dimension fails rather than reads past.
TEST(Cublas, RowMajorMappingComputesATimesWTransposed) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t n = 72, k = 172;
  for (int64_t m : {1, 37, 130}) {
    std::vector<float> a(m * k), w(n * k);
    for (float& v : a) v = u(rng);
    for (float& v : w) v = u(rng);
    CublasGemmCall c = CublasRowMajorGemm(DType::F32, m, n, k);
    ASSERT_EQ(c.c_type, kCudaR32F);
    ASSERT_EQ(c.compute, kCublasCompute32F);
    const std::vector<float>& A = w;  // the call's A operand is the weight, B the activation
    const std::vector<float>& B = a;
    auto op_a = [&](int i, int l) {
      return c.transa == kCublasOpN ? A.at(i + (size_t)l * c.lda) : A.at(l + (size_t)i * c.lda);
    };
    auto op_b = [&](int l, int j) {
      return c.transb == kCublasOpN ? B.at(l + (size_t)j * c.ldb) : B.at(j + (size_t)l * c.ldb);
    };
    std::vector<float> C((size_t)c.ldc * c.n, NAN);
    for (int j = 0; j < c.n; ++j)
      for (int i = 0; i < c.m; ++i) {
        double sum = 0;
        for (int l = 0; l < c.k; ++l) sum += (double)op_a(i, l) * op_b(l, j);
        C.at(i + (size_t)j * c.ldc) = (float)sum;
      }
    ASSERT_EQ(C.size(), (size_t)(m * n));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t col = 0; col < n; ++col) {
        double want = 0;
        for (int64_t l = 0; l < k; ++l) want += (double)a[r * k + l] * w[col * k + l];
        ASSERT_NEAR(C[r * n + col], want, 1e-4) << "y[" << r << "][" << col << "] for M = " << m;
      }
  }
  EXPECT_EQ(CublasRowMajorGemm(DType::BF16, 3, 5, 7).a_type, kCudaR16BF);
  EXPECT_EQ(CublasRowMajorGemm(DType::F16, 3, 5, 7).b_type, kCudaR16F);
  EXPECT_EQ(CublasRowMajorGemm(DType::F16, 3, 5, 7).c_type, kCudaR32F);
  EXPECT_THROW(CublasRowMajorGemm(DType::F32, 3, 5, (int64_t)INT_MAX + 1), Error);
  EXPECT_FALSE(CublasGemmTakes(DType::Q8_0));
  EXPECT_FALSE(CublasGemmTakes(DType::Q4_0));
  EXPECT_THROW(CublasRowMajorGemm(DType::Q8_0, 3, 5, 32), Error);
}

// The f16 rounding bound covers the real rounding of f16 activations (the bf16 one is the
// tensor-core template's, tested with it).
TEST(Cublas, F16RoundingBoundCoversTheRounding) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3, 3);
  const int64_t k = 172;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> a(k);
    std::vector<uint16_t> w(k);
    for (int64_t i = 0; i < k; ++i) {
      a[i] = u(rng) * (trial % 5 == 0 ? 1e-6f : 1.0f);  // some rows in f16's subnormal range
      w[i] = FloatToHalf(u(rng));
    }
    double exact = 0, rounded = 0;
    for (int64_t i = 0; i < k; ++i) {
      exact += (double)a[i] * HalfToFloat(w[i]);
      rounded += (double)HalfToFloat(FloatToHalf(a[i])) * HalfToFloat(w[i]);
    }
    double bound = CublasGemmErrorBound(DType::F16, a.data(), w.data(), k);
    EXPECT_LE(std::fabs(exact - rounded), bound) << "trial " << trial;
    EXPECT_GT(bound, 0);
  }
  EXPECT_EQ(CublasGemmErrorBound(DType::F32, nullptr, nullptr, 0), 0);
}

TEST(Nvrtc, CublasConversionKernelsCompile) {
  PRISM_REQUIRE_NVRTC();
  for (const char* arch : {"sm_90", "sm_80"}) {
    NvrtcOutput out =
        NvrtcCompiler::Open().Compile(GpuRenderer(GpuDialect::Cuda).Prelude() + CublasConvertSource(), arch);
    EXPECT_EQ(out.log, "") << arch;
    EXPECT_GT(out.image.size(), 0u) << arch;
  }
  EXPECT_EQ(CublasConvertName(DType::BF16), "prism_cublas_f32_to_bf16");
  EXPECT_NE(CublasConvertSource().find(CublasConvertName(DType::F16)), std::string::npos);
}

// No GPU, no driver: no CUDA device opens (so no search offers cuBLAS), a CUDA-dialect device
// without a GEMM library does not offer "cublas" and says why, selecting it anyway is a compile
// error naming the reason, and creating a cuBLAS handle without a driver fails cleanly.
TEST(Cublas, WithoutAGpuTheCandidateIsAbsentWithAReason) {
  std::string why;
  if (CudaDevice::Available(&why)) {
    GTEST_SKIP() << "a CUDA GPU is present";
  }
  EXPECT_NE(why.find("no CUDA driver/GPU found"), std::string::npos) << why;
  auto dev = std::make_shared<NvrtcOnlyDevice>();
  for (DType wt : {DType::F32, DType::BF16, DType::F16}) {
    Graph g = LinearGraph(wt);
    KernelProgram kp = BuildKernelProgram(g);
    int gemms = 0;
    GpuCompileOptions forced;
    for (size_t k = 0; k < kp.kernels.size(); ++k) {
      std::vector<std::string> not_offered;
      for (const GpuCandidate& c : GpuScheduleCandidates(kp, k, *dev, &not_offered))
        EXPECT_NE(c.name, "cublas");
      const bool applies = LibraryGemmApplies(kp, kp.kernels[k]);
      gemms += applies;
      forced.library_gemm.push_back(applies);
      if (applies) {
        ASSERT_EQ(not_offered.size(), 1u);
        EXPECT_EQ(not_offered[0], "cublas: no GEMM library on nvrtc only");
      }
    }
    EXPECT_EQ(gemms, 1) << DTypeName(wt);
    try {
      GpuProgram::Compile(g, dev, forced);
      ADD_FAILURE() << "selecting the library GEMM where there is none must fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot use the library GEMM: no GEMM library"), std::string::npos)
          << e.what();
    }
  }
  if (const CublasApi* api = LoadCublas()) {
    void* handle = nullptr;
    int st = api->create(&handle);
    EXPECT_NE(st, 0) << "cublasCreate_v2 succeeded without a GPU";
    if (st == 0) api->destroy(handle);
    std::printf("cublasCreate_v2 without a GPU: %s\n", CublasStatusName(st).c_str());
  }
}

// Two template GEMMs with an elementwise kernel between them (library calls ordered with
// launches); f32 weights.
Graph TwoLinearsGraph() {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(172)})};
  Tensor w1{&g, g.Weight("w1", DType::F32, {Expr(72), Expr(172)})};
  Tensor w2{&g, g.Weight("w2", DType::F32, {Expr(40), Expr(72)})};
  g.MarkOutput(Linear(Linear(x, w1) + 1.0, w2).id(), "y");
  return g;
}

TEST(CudaDevice, CublasGemmMatchesInterpreter) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  struct Case {
    Graph g;
    DType w;
    double atol, rtol;
    const char* what;
  };
  // bf16/f16 round the activations to the weight's type: CheckRoundedActivationGemm.
  std::vector<Case> cases;
  cases.push_back({LinearGraph(DType::F32), DType::F32, 1e-3, 1e-3, "cuBLAS f32"});
  cases.push_back({LinearGraph(DType::BF16), DType::BF16, 0, 0, "cuBLAS bf16"});
  cases.push_back({LinearGraph(DType::F16), DType::F16, 0, 0, "cuBLAS f16"});
  cases.push_back({TwoLinearsGraph(), DType::F32, 1e-3, 1e-3, "cuBLAS f32, two GEMMs"});
  for (Case& c : cases) {
    if (!dev->LibraryGemmAvailable(c.w, &why)) {
      GTEST_SKIP() << "GPU without cuBLAS: " << why;
    }
    GpuCompileOptions opts;
    KernelProgram kp = BuildKernelProgram(c.g);
    for (const Kernel& k : kp.kernels) opts.library_gemm.push_back(LibraryGemmApplies(kp, k));
    ASSERT_GE(std::count(opts.library_gemm.begin(), opts.library_gemm.end(), true), 1) << c.what;
    auto prog = GpuProgram::Compile(c.g, dev, opts);
    prog->SetGraphReplay(true);  // ignored for programs with library GEMMs
    if (c.w == DType::F32)
      testing::CheckGpuProgram(*prog, {{{"seq", 1}}, {{"seq", 37}}, {{"seq", 130}}, {{"seq", 37}}}, c.atol,
                               c.rtol, 5, false, c.what);
    else
      CheckRoundedActivationGemm(*prog, c.w, {1, 37, 130, 37}, c.what);
    EXPECT_EQ(prog->graph_replays(), 0) << c.what;
  }
}

TEST(CudaDevice, ScheduleSearchOffersAndChecksCublas) {
  std::string why;
  std::shared_ptr<CudaDevice> dev = TestGpu(&why);
  if (!dev) {
    GTEST_SKIP() << "no CUDA GPU: " << why;
  }
  if (!dev->LibraryGemmAvailable(DType::F32, &why)) {
    GTEST_SKIP() << "GPU without cuBLAS: " << why;
  }
  for (DType wt : {DType::F32, DType::BF16}) {
    Graph g = LinearGraph(wt);
    auto prog = GpuProgram::Compile(g, dev);
    const nlohmann::json receipts = SearchSchedules(*prog, testing::OneBucketSearch({{"seq", 130}}));
    int offered = 0;
    for (const nlohmann::json& r : receipts)
      for (const nlohmann::json& t : r.value("candidates", nlohmann::json::array()))
        if (t["candidate"] == "cublas") {
          ++offered;
          EXPECT_TRUE(t["passed"].get<bool>()) << r.dump(1);
          EXPECT_GT(t["median_us"].get<double>(), 0);
          EXPECT_EQ(t.contains("rel_error_bound"), wt != DType::F32);
        }
    EXPECT_EQ(offered, 1) << DTypeName(wt);
    if (wt == DType::F32)
      testing::CheckGpuProgram(*prog, {{{"seq", 1}}, {{"seq", 130}}}, 1e-3, 1e-3, 4, false, "searched");
    else
      CheckRoundedActivationGemm(*prog, wt, {1, 130}, "searched");
    std::printf("%s\n", receipts.dump(1).c_str());
  }
}

}  // namespace
}  // namespace prism
