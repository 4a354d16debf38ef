// The template GEMM tier against the reference interpreter, for every weight dtype and odd sizes.
#include "backends/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "backends/cpu/gemm_amx.h"
#include "backends/cpu/gemm_avx2.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/gemm_blocks.h"
#include "backends/cpu/gemm_experts.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/gemm_int8_avx2.h"
#include "backends/cpu/gemm_int8_panels.h"
#include "backends/cpu/gemm_panels.h"
#include "backends/cpu/gemm_slices_avx2.h"
#include "backends/cpu/k4_scales.h"
#include "ir/quant_formats.h"
#include "frontend/nn.h"
#include "graph_check.h"
#include "ir/error.h"
#include "search/schedule_search.h"
#include "test_util.h"

namespace prism {
namespace {

// Row i of A (k values) · row j of W, summed exactly in double, and sum |a w| (the scale of its rounding).
struct Exact {
  double sum = 0, magnitude = 0;
};
Exact ExactDot(const float* a, int64_t k, const void* w, DType wt, int64_t i, int64_t j) {
  Exact e;
  for (int64_t kk = 0; kk < k; ++kk) {
    const double p = (double)a[i * k + kk] * LoadAsDouble(w, wt, j * k + kk);
    e.sum += p;
    e.magnitude += std::fabs(p);
  }
  return e;
}

// y (m x n) equals A · Wᵀ summed exactly in double, within rel x sum |a w| per output.
void ExpectExactProducts(const float* a, int64_t m, int64_t k, const uint8_t* w, DType wt, int64_t n,
                         const std::vector<float>& y, double rel) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const Exact e = ExactDot(a, k, w, wt, i, j);
      ASSERT_GT(e.magnitude, 0) << DTypeName(wt);
      ASSERT_NEAR(y[i * n + j], e.sum, rel * e.magnitude + 1e-7)
          << DTypeName(wt) << " m=" << m << " n=" << n << " k=" << k << " at " << i << "," << j;
    }
}

// Searches one product (x [seq, k] times w [n, k] of type wt, on two threads) over the buckets; returns per
// bucket the candidates whose names carry `param` (as "template-panels/slice=16"), each expected to pass.
std::map<std::string, std::set<std::string>> SearchedParamCandidates(
    DType wt, int64_t n, int64_t k, const std::vector<std::pair<std::string, SymbolBindings>>& buckets,
    const std::string& param) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(k)})};
  Tensor w{&g, g.Weight("w", wt, {Expr(n), Expr(k)})};
  g.MarkOutput(Linear(x, w).id(), "y");
  CompileOptions copts;
  copts.threads = 2;
  auto prog = Program::Compile(g, copts);
  for (auto& [name, t] : testing::RandomTensors(g, Op::Weight, buckets.front().second, 5))
    prog->BindWeight(name, t);
  SearchOptions opts;
  opts.buckets = buckets;
  opts.budget_seconds = testing::kUnreachedSearchBudget;
  std::map<std::string, std::set<std::string>> offered;
  for (const auto& r : SearchSchedules(*prog, opts))
    for (const auto& c : r.value("candidates", nlohmann::json::array())) {
      const std::string name = c["candidate"];
      if (name.find("/" + param + "=") == std::string::npos) continue;
      offered[r["bucket"]].insert(name.substr(0, name.rfind('/')));
      EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
    }
  return offered;
}

}  // namespace

// Every kernel of p in GEMM form `form` (the template on), run by the team when threads > 1.
void ForceForm(Program* p, int form, int threads) {
  KernelChoices choices;
  choices["all"].assign(p->kernels().kernels.size(),
                        KernelChoice{true, threads > 1 ? Threading::Team : Threading::OneThread, false, form});
  p->SetChoices(choices);
}

TEST(Gemm, LinearWithEveryWeightDtypeMatchesInterpreter) {
  struct Case {
    DType dtype;
    int64_t n, k;
    double tol;
  };
  for (Case c :
       {Case{DType::F32, 33, 17, 1e-4}, Case{DType::F16, 5, 40, 1e-3}, Case{DType::BF16, 7, 200, 1e-3},
        Case{DType::Q8_0, 9, 64, 1e-3}, Case{DType::Q4_0, 33, 96, 1e-3}, Case{DType::F32, 1, 1, 1e-5},
        Case{DType::Q4_K, 9, 512, 1e-3}, Case{DType::Q6_K, 5, 256, 1e-3}, Case{DType::Q2_K, 6, 256, 1e-3},
        Case{DType::Q3_K, 3, 256, 1e-3}, Case{DType::Q5_K, 7, 256, 1e-3}, Case{DType::IQ4_XS, 5, 256, 1e-3},
        Case{DType::Q4_1, 5, 96, 1e-3}, Case{DType::Q5_0, 6, 64, 1e-3}, Case{DType::Q5_1, 3, 32, 1e-3},
        Case{DType::IQ4_NL, 9, 96, 1e-3}}) {
    Graph g;
    Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("m"), Expr(c.k)})};
    Tensor w{&g, g.Weight("w", c.dtype, {Expr(c.n), Expr(c.k)})};
    g.MarkOutput(Linear(x, w).id(), "y");
    KernelProgram kp = BuildKernelProgram(g);
    bool has_template = false;
    for (const Kernel& k : kp.kernels) has_template = has_template || k.gemm.has_value();
    EXPECT_TRUE(has_template) << "x · Wᵀ with a " << DTypeName(c.dtype)
                              << " weight did not match the template";
    auto prog = Program::Compile(g);
    ForceForm(prog.get(), 0, 1);  // the exact rows form (unsearched, quantized weights take int8 forms)
    testing::CheckExecutable(*prog, {{{"m", 1}}, {{"m", 3}}, {{"m", 70}}}, c.tol, c.tol, 7, false,
                             std::string("gemm ") + std::string(DTypeName(c.dtype)));
  }
}

// An activation that only regroups a computed value's axes (im2col's [.., taps, C] read as [.., taps * C])
// is read from that value's buffer: no kernel copies it into the reshaped form first.
TEST(Gemm, ActivationRegroupedByAReshapeIsReadFromItsSourceBuffer) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("m"), Expr(9), Expr(8)})};
  Tensor w{&g, g.Weight("w", DType::F32, {Expr(16), Expr(72)})};
  Tensor taps = (x * x).reshape({Expr::Sym("m"), Expr(72)});
  g.MarkOutput(Linear(taps, w).id(), "y");
  KernelProgram kp = BuildKernelProgram(g);
  int gemms = 0;
  for (const Kernel& k : kp.kernels) {
    const auto& shape = kp.buffers[k.out_buffer].shape;
    EXPECT_FALSE(shape.size() == 2 && shape[1].IsConst(72)) << k.name << " copies the activation";
    if (!k.gemm) continue;
    ++gemms;
    EXPECT_EQ(kp.buffers[k.gemm->a_buffer].shape.size(), 3u) << "the square's own [m, 9, 8] buffer";
  }
  EXPECT_EQ(gemms, 1);
  testing::CheckGraph(g, {{{"m", 1}}, {{"m", 5}}, {{"m", 67}}}, 1e-5, 1e-5, 3, "regrouped activation");
}

// An NCHW image's im2col [n, C, taps, h, w] read as rows of pixels [n, h, w, C * taps]: the template reads
// it K-major where it lies (no kernel transposes it into rows), in every form in the table (panels and
// slices themselves, the others from rows gathered for them), the bias as its epilogue, on one and two threads, over sizes
// whose groups of pixels end inside register tiles: the same results as the plan that transposes (same
// roundings), and the interpreter's where the form is exact.
TEST(Gemm, KMajorActivationIsReadWhereItLiesInEveryForm) {
  for (DType wt : {DType::F32, DType::BF16, DType::Q8_0}) {
    Graph g;
    const Expr n = Expr::Sym("n"), h = Expr::Sym("h"), w = Expr::Sym("w");
    Tensor x{&g, g.Input("x", DType::F32, {n, Expr(4), Expr(8), h, w})};
    Tensor weight{&g, g.Weight("weight", wt, {Expr(37), Expr(32)})};
    Tensor bias{&g, g.Weight("bias", DType::F32, {Expr(37)})};
    Tensor rows = (x * x).permute({0, 3, 4, 1, 2}).reshape({n, h, w, Expr(32)});
    g.MarkOutput(Linear(rows, weight, bias).id(), "y");
    KernelProgram kp = BuildKernelProgram(g, CompileOptions{}.fusion);
    int gemms = 0;
    for (const Kernel& k : kp.kernels) {
      const auto& shape = kp.buffers[k.out_buffer].shape;
      EXPECT_FALSE(shape.back().IsConst(32)) << k.name << " transposes the activation";
      if (!k.gemm) continue;
      ++gemms;
      EXPECT_EQ(k.gemm->a_group, h * w);
      EXPECT_EQ(kp.buffers[k.gemm->a_buffer].shape.size(), 5u) << "the square's own [n, 4, 8, h, w] buffer";
    }
    EXPECT_EQ(gemms, 1);
    for (int threads : {1, 2}) {
      CompileOptions kmajor, transposed;
      kmajor.threads = transposed.threads = threads;
      transposed.fusion.kmajor_activations = false;
      auto prog = Program::Compile(g, kmajor), plain = Program::Compile(g, transposed);
      for (int form = 0; form < (int)GemmForms().size(); ++form) {
        if (!GemmForms()[form].offered(wt, 32)) continue;
        for (Program* p : {prog.get(), plain.get()}) ForceForm(p, form, threads);
        const bool exact = !GemmForms()[form].rounds || !GemmForms()[form].rounds(wt);
        const std::string what = std::string(DTypeName(wt)) + " form " + GemmForms()[form].name +
                                 " threads " + std::to_string(threads);
        for (SymbolBindings b : {SymbolBindings{{"n", 1}, {"h", 3}, {"w", 5}},
                                 SymbolBindings{{"n", 3}, {"h", 7}, {"w", 5}},
                                 SymbolBindings{{"n", 2}, {"h", 16}, {"w", 17}}}) {
          Interpreter interp(g);
          for (auto& [name, t] : testing::RandomTensors(g, Op::Weight, b, 50)) {
            interp.BindWeight(name, t);
            prog->BindWeight(name, t);
            plain->BindWeight(name, t);
          }
          const auto in = testing::RandomTensors(g, Op::Input, b, 51);
          const auto got = prog->Run(in, b);
          const std::string at = what + " n=" + std::to_string(b["n"]) + " h=" + std::to_string(b["h"]);
          testing::ExpectClose(plain->Run(in, b), got, 1e-5, 1e-5, at + " against the transposing plan");
          if (exact) testing::ExpectClose(interp.Run(in, b), got, 1e-4, 1e-4, at + " against the interpreter");
        }
      }
    }
  }
}

// A strided view that is no such layout (rows whose pixels are not contiguous) is transposed as before.
TEST(Gemm, KMajorViewsWithoutThatLayoutAreStillTransposed) {
  Graph g;
  const Expr n = Expr::Sym("n");
  Tensor x{&g, g.Input("x", DType::F32, {n, Expr(6), Expr(5), Expr(3)})};
  Tensor weight{&g, g.Weight("weight", DType::F32, {Expr(9), Expr(6)})};
  // [n, 6, 5, 3] -> [n, 3, 5, 6]: K (6) has stride 15, but the rows' inner axis (5) has stride 3, not 1.
  Tensor rows = (x + x).permute({0, 3, 2, 1}).reshape({n * Expr(15), Expr(6)});
  g.MarkOutput(Linear(rows, weight).id(), "y");
  KernelProgram kp = BuildKernelProgram(g, CompileOptions{}.fusion);
  for (const Kernel& k : kp.kernels) {
    if (k.gemm) {
      EXPECT_TRUE(k.gemm->a_group.IsConst(0)) << k.gemm->a_group.str();
    }
  }
  testing::CheckGraph(g, {{{"n", 1}}, {{"n", 4}}}, 1e-5, 1e-5, 3, "strided view");
}

// A product with few output columns over many rows (a convolution's channels over its pixels) splits its
// rows across the team, in blocks of 48 however many there are; with its bias as the epilogue, on three
// threads, every row matches the interpreter.
TEST(Gemm, FewColumnsOverManyRowsSplitTheRowsAcrossTheTeam) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("m"), Expr(27)})};
  Tensor w{&g, g.Weight("w", DType::F32, {Expr(32), Expr(27)})};
  Tensor b{&g, g.Weight("b", DType::F32, {Expr(32)})};
  g.MarkOutput(Linear(x, w, b).id(), "y");
  auto prog = Program::Compile(g, {.threads = 3});
  testing::CheckExecutable(*prog, {{{"m", 5000}}, {{"m", 4801}}, {{"m", 100}}, {{"m", 7}}}, 1e-5, 1e-5, 4,
                           false, "row split");
}

// A product whose activation outweighs its weight (a convolution's: few output channels over many pixels)
// runs its rows in chunks: it computes the activation itself from the kernel that would have stored it (an
// im2col; here a square, read row-major or K-major) or reads it as given, applies its bias, and runs the
// batch norm and 2 x 2 max-pool that alone read it on each chunk's rows (the norm's scale, a kernel of the
// weights placed after the product, first); pooling windows, groups of pixels, chunks (192 rows) and the
// threads' shares end inside one another. In every form, on one to three threads: the producer, the scale
// and the pool run inside the product, and the results equal the plan that runs each kernel on its own bit
// for bit, and the interpreter's where the form is exact.
TEST(Gemm, ProductOverManyRowsRunsItsProducerAndConsumerInChunks) {
  enum Source { kSquareRows, kSquareKMajor, kInputRows, kInputKMajor };
  for (Source src : {kSquareRows, kSquareKMajor, kInputRows, kInputKMajor})
    for (DType wt : {DType::F32, DType::Q8_0}) {
      Graph g;
      const Expr n = Expr::Sym("n"), h = Expr::Sym("h"), w = Expr::Sym("w");
      // K = 288: chunks of 192 rows; a weight of 9 x 288 is outweighed from 289 rows.
      Tensor weight{&g, g.Weight("weight", wt, {Expr(9), Expr(288)})};
      Tensor bias{&g, g.Weight("bias", DType::F32, {Expr(9)})};
      Tensor rows;
      if (src == kSquareRows || src == kSquareKMajor) {
        Tensor x{&g, g.Input("x", DType::F32, {n, Expr(4), Expr(72), h, w})};
        rows = src == kSquareKMajor ? (x * x).permute({0, 3, 4, 1, 2}).reshape({n, h, w, Expr(288)})
                                    : (x * x).reshape({n, h, w, Expr(288)});
      } else if (src == kInputRows) {
        rows = Tensor{&g, g.Input("x", DType::F32, {n, h, w, Expr(288)})};
      } else {
        Tensor x{&g, g.Input("x", DType::F32, {n, Expr(288), h, w})};
        rows = x.permute({0, 2, 3, 1}).reshape({n, h, w, Expr(288)});
      }
      Tensor mean{&g, g.Weight("mean", DType::F32, {Expr(9)})}, var{&g, g.Weight("var", DType::F32, {Expr(9)})};
      Tensor y = Linear(rows, weight, bias);  // [n, h, w, 9]
      y = (y - mean) * ((var * var + 1.0).rsqrt() * 3.0);
      auto at = [&](int64_t dy, int64_t dx) {
        return y.slice(1, Expr(dy), h / Expr(2), 2).slice(2, Expr(dx), w / Expr(2), 2);
      };
      g.MarkOutput(Maximum(Maximum(at(0, 0), at(0, 1)), Maximum(at(1, 0), at(1, 1))).id(), "pooled");
      for (int threads : {1, 2, 3}) {
        CompileOptions chunked, apart;
        chunked.threads = apart.threads = threads;
        apart.gemm_chunks = false;
        auto prog = Program::Compile(g, chunked), plain = Program::Compile(g, apart);
        const KernelProgram& kp = prog->kernels();
        int gemm = -1, producer = -1;
        for (size_t k = 0; k < kp.kernels.size(); ++k)
          if (kp.kernels[k].gemm) gemm = (int)k;
        ASSERT_GE(gemm, 0);
        for (size_t k = 0; k < kp.kernels.size(); ++k)
          if (kp.kernels[k].out_buffer == kp.kernels[gemm].gemm->a_buffer) producer = (int)k;
        ASSERT_EQ(producer >= 0, src == kSquareRows || src == kSquareKMajor);
        ASSERT_EQ(kp.kernels.size(), (size_t)gemm + 3) << "the scale and the pool after the product";
        EXPECT_EQ(kp.kernels[gemm].gemm->a_group.IsConst(0), src == kSquareRows || src == kInputRows);
        for (int form = 0; form < (int)GemmForms().size(); ++form) {
          if (!GemmForms()[form].offered(wt, 288) || GemmForms()[form].fit_team) continue;
          for (Program* p : {prog.get(), plain.get()}) ForceForm(p, form, threads);
          const bool exact = !GemmForms()[form].rounds || !GemmForms()[form].rounds(wt);
          const std::string what = "source " + std::to_string(src) + " " + std::string(DTypeName(wt)) +
                                   " form " + GemmForms()[form].name + " threads " + std::to_string(threads);
          // 2 x 10 x 30 = 600 rows (groups of 300, windows of 60) and 3 x 8 x 22 = 528 (176, 44).
          for (SymbolBindings b : {SymbolBindings{{"n", 2}, {"h", 10}, {"w", 30}},
                                   SymbolBindings{{"n", 3}, {"h", 8}, {"w", 22}}}) {
            Interpreter interp(g);
            for (auto& [name, t] : testing::RandomTensors(g, Op::Weight, b, 60)) {
              interp.BindWeight(name, t);
              prog->BindWeight(name, t);
              plain->BindWeight(name, t);
            }
            const auto in = testing::RandomTensors(g, Op::Input, b, 61);
            const auto got = prog->Run(in, b);
            const std::string where = what + " n=" + std::to_string(b["n"]);
            if (producer >= 0) {
              EXPECT_EQ(prog->ComputedInside(producer), gemm) << where;
            }
            for (int k : {gemm + 1, gemm + 2}) {
              EXPECT_EQ(prog->ComputedInside(k), gemm) << where << " kernel " << k;
              EXPECT_EQ(plain->ComputedInside(k), -1) << where << " kernel " << k;
            }
            EXPECT_EQ(prog->ArenaConflicts(), 0) << where;
            const int64_t m = b["n"] * b["h"] * b["w"];  // stored: the rows around the threads' boundaries
            EXPECT_LE(prog->StoredRows(gemm), threads == 1 ? 0 : m / 2) << where;
            testing::ExpectClose(plain->Run(in, b), got, 0, 0, where + " against the kernels on their own");
            EXPECT_EQ(plain->StoredRows(gemm), m) << where;
            if (exact) testing::ExpectClose(interp.Run(in, b), got, 1e-4, 1e-4, where + " against the interpreter");
          }
        }
      }
    }
}

// GGUF's K-quant, Q4_1/Q5_x and IQ4 blocks, dequantized in AVX2 registers: the decode tiles (one or
// two activation rows), the prefill panels (more rows), ragged column splits, against exact sums.
TEST(Gemm, BlockFormatsMatchExactProductsOverOddShapesAndSplits) {
  if (!GemmAvx2Supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  for (DType wt : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                   DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL})
    for (int64_t m : {1, 2, 3, 67})
      for (int64_t n : {1, 5, 9})
        for (int64_t blocks : {1, 3}) {
          const int64_t k = blocks * BlockElems(wt);
          auto a = testing::RandomFloats(m * k, 5);
          HostTensor wt_tensor = testing::RandomBlocks(wt, {n, k}, 6 + n);
          const uint8_t* w = static_cast<const uint8_t*>(wt_tensor.data);
          std::vector<float> y(m * n, NAN);
          const int64_t split = n / 2;
          GemmRows(a.data(), m, k, w, wt, y.data(), n, 0, split);
          GemmRows(a.data(), m, k, w, wt, y.data(), n, split, n);
          ExpectExactProducts(a.data(), m, k, w, wt, n, y, 2e-6);
        }
}

// The q8k form (Q4_K/Q6_K weights, activations rounded as llama.cpp's Q8_K, integer dot products):
// within its declared bound of the exact sum, and the bound is not vacuous (a real rounding shows).
TEST(Gemm, Q8KFormStaysWithinItsBound) {
  if (!BlockQ8KSupported(DType::Q4_K, 256)) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  for (DType wt : {DType::Q4_K, DType::Q6_K})
    for (int64_t m : {1, 2, 3, 5})
      for (int64_t n : {1, 6}) {
        const int64_t k = 512;
        auto a = testing::RandomFloats(m * k, 21 + m);
        HostTensor w = testing::RandomBlocks(wt, {n, k}, 22 + n);
        std::vector<float> y(m * n, NAN);
        GemmRowsBlockQ8K(a.data(), m, k, w.data, wt, y.data(), n, 0, n / 2);
        GemmRowsBlockQ8K(a.data(), m, k, w.data, wt, y.data(), n, n / 2, n);
        double worst = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const Exact e = ExactDot(a.data(), k, w.data, wt, i, j);
            const double exact = e.sum, mag = e.magnitude;
            const double bound = BlockQ8KErrorBound(a.data() + i * k, w.data, wt, k, j);
            ASSERT_LE(std::fabs(y[i * n + j] - exact), bound + 1e-6 * mag)
                << DTypeName(wt) << " m=" << m << " n=" << n << " at " << i << "," << j;
            worst = std::max(worst, std::fabs(y[i * n + j] - exact) / (1e-6 * mag));
          }
        EXPECT_GT(worst, 1.0) << DTypeName(wt) << ": no rounding visible; is the activation rounded at all?";
      }
  // A NaN in the activation reaches the output as NaN, never as a finite guess.
  auto a = testing::RandomFloats(512, 3);
  a[300] = NAN;
  HostTensor w = testing::RandomBlocks(DType::Q4_K, {2, 512}, 4);
  std::vector<float> y(2, 0.0f);
  GemmRowsBlockQ8K(a.data(), 1, 512, w.data, DType::Q4_K, y.data(), 2, 0, 2);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

// The AVX2 block dequantizer against the reference (io_test holds that one to gguf.quants bit for
// bit): equal up to the rounding of the fused multiply-add that applies scale and min.
TEST(Gemm, Avx2BlockDequantizationMatchesReference) {
  if (!GemmAvx2Supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  for (DType wt : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                   DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL}) {
    const int64_t n = 7 * BlockElems(wt);
    HostTensor t = testing::RandomBlocks(wt, {n}, 11);
    std::vector<float> fast(n, NAN);
    DequantizeBlocksAvx2(t.data, wt, 7, fast.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ref = LoadAsDouble(t.data, wt, i);
      ASSERT_NEAR(fast[i], ref, 1e-6 * (1e-3 + std::fabs(ref))) << DTypeName(wt) << " element " << i;
    }
  }
}

// Expert GEMMs in every form that runs on slabs (packed one slab at a time where the form packs): rows
// grouped by the slab they chose (ids past the experts clamp), the work split among teams of 1 to 5 as a team
// splits it, over odd sizes: every output is written by one member and equals its own slab's exact product
// within the form's bound.
TEST(Gemm, ExpertGroupsMatchEachRowsOwnSlabInEveryForm) {
  int checked = 0;
  for (const GemmForm& form : GemmForms())
    for (DType wt : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K})
      for (int64_t m : {1, 2, 5, 17}) {
        const int64_t experts = 5, n = 37, k = BlockElems(wt) == 256 ? 256 : 64;
        if (!form.on_slabs || !form.offered(wt, k) || m < MinRows(form, wt)) continue;
        auto a = testing::RandomFloats(m * k, 7 + m);
        HostTensor w = BlockElems(wt) == 256 ? testing::RandomBlocks(wt, {experts * n, k}, 8)
                                             : HostTensor::FromFloats({experts * n, k},
                                                                      testing::RandomFloats(experts * n * k, 9), wt);
        PackedGemmWeight packed = form.pack ? PackExperts(form, w.data, wt, experts, n, k) : PackedGemmWeight{};
        std::vector<int32_t> id(m);
        for (int64_t i = 0; i < m; ++i) id[i] = (int32_t)((i * 3 + m) % 7);  // 5 and 6 clamp to expert 4
        GemmCall call;
        call.a = a.data();
        call.m = m;
        call.n = n;
        call.k = k;
        call.w = w.data;
        call.wt = wt;
        call.packed = packed.form_data.get();
        call.nb = 0;
        call.ne = n;
        const bool rounds = form.rounds && form.rounds(wt);
        for (int threads : {1, 2, 3, 5}) {
          // Each member writes into its own copy: every output must come from exactly one of them.
          std::vector<std::vector<float>> y(threads, std::vector<float>(m * n, NAN));
          for (int t = 0; t < threads; ++t) {
            call.y = y[t].data();
            RunExpertGemm(form, call, id.data(), experts, t, threads);
          }
          for (int64_t i = 0; i < m; ++i) {
            const void* slab = ExpertSlab(w.data, wt, n, k, id.data(), experts, i);
            const int64_t e = std::min<int64_t>(id[i], experts - 1);
            for (int64_t j = 0; j < n; ++j) {
              const Exact x = ExactDot(a.data(), k, w.data, wt, i, e * n + j);
              const double bound = (rounds ? form.error_bound(a.data() + i * k, slab, wt, k, j) : 0) +
                                   2e-6 * x.magnitude + 1e-7;
              int writers = 0;
              for (int t = 0; t < threads; ++t)
                if (!std::isnan(y[t][i * n + j])) {
                  ++writers;
                  ASSERT_NEAR(y[t][i * n + j], x.sum, bound) << form.name << " " << DTypeName(wt) << " m=" << m
                                                             << " row " << i << " col " << j << " thread " << t;
                }
              ASSERT_EQ(writers, 1) << form.name << " " << DTypeName(wt) << " m=" << m << " row " << i << " col "
                                    << j << ", a team of " << threads;
            }
          }
        }
        ++checked;
      }
  EXPECT_GT(checked, 20);
}

static __attribute__((target("avx2"))) void UnpackScalesK4InRegisters(const uint8_t* packed, uint8_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), UnpackScalesK4Vector(packed));
}

// The q8k kernels' in-register unpacking of Q4_K scales and mins equals the scalar reference's bytes.
TEST(Gemm, K4ScalesUnpackInRegistersAsTheReferenceDoes) {
  if (!GemmAvx2Supported()) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937 rng(5);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t packed[16];  // 12 scale bytes, then 4 the vector form reads and ignores
    for (uint8_t& b : packed) b = (uint8_t)rng();
    uint8_t want[16], got[16];
    UnpackScalesK4(packed, want);
    UnpackScalesK4InRegisters(packed, got);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(got[j], want[j]) << "trial " << trial << " byte " << j;
  }
}

TEST(Gemm, ThreadedSplitsCoverEveryColumn) {
  // Column ranges that are not multiples of the 4-row tile still compute every output.
  const int64_t m = 5, k = 48, n = 23;
  auto a = testing::RandomFloats(m * k, 1), w = testing::RandomFloats(n * k, 2);
  std::vector<float> y(m * n, -1.0f);
  GemmRows(a.data(), m, k, w.data(), DType::F32, y.data(), n, 0, 7);
  GemmRows(a.data(), m, k, w.data(), DType::F32, y.data(), n, 7, 13);
  GemmRows(a.data(), m, k, w.data(), DType::F32, y.data(), n, 13, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += (double)a[i * k + kk] * w[j * k + kk];
      EXPECT_NEAR(y[i * n + j], s, 1e-4) << i << "," << j;
    }
  std::printf("gemm micro-kernels: %s\n", GemmIsa());
}

TEST(Gemm, Avx2RowsMatchExactProductsOverOddShapesAndSplits) {
  if (!GemmAvx2Supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  for (DType wt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0})
    for (int64_t m : {1, 2, 3, 67})  // 67: two row blocks, the last tile one row
      for (int64_t n : {1, 5, 9})
        for (int64_t k : {32, 96, 7, 41}) {
          if (IsQuantized(wt) && k % 32) continue;
          auto a = testing::RandomFloats(m * k, 3), wf = testing::RandomFloats(n * k, 4);
          HostTensor wt_tensor = HostTensor::FromFloats({n, k}, wf, wt);
          const uint8_t* w = static_cast<const uint8_t*>(wt_tensor.data);
          std::vector<float> y(m * n, NAN);
          const int64_t split = n / 2;  // two ranges, as two threads would take them
          GemmRowsAvx2(a.data(), m, k, w, wt, y.data(), n, 0, split);
          GemmRowsAvx2(a.data(), m, k, w, wt, y.data(), n, split, n);
          ExpectExactProducts(a.data(), m, k, w, wt, n, y, 1e-6);
        }
}

TEST(Gemm, Avx2SlicesMatchExactProductsOverOddShapesAndSplits) {
  if (!GemmAvx2Supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  for (DType wt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K,
                   DType::Q5_1, DType::IQ4_XS})
    for (int64_t m : {1, 5, 13, 200})  // 200: row blocks of 96 and of the default, the last tile partial
      for (int64_t n : {1, 17, 40, 70})  // 70: a range past two slices packs the activation
        for (int64_t k : {1, 17, 96, 512}) {  // 512: two slices of K
          if (k % BlockElems(wt)) continue;
          auto a = testing::RandomFloats(m * k, 9);
          const bool made_here = !IsQuantized(wt) || wt == DType::Q8_0 || wt == DType::Q4_0;
          HostTensor wt_tensor = made_here ? HostTensor::FromFloats({n, k}, testing::RandomFloats(n * k, 10), wt)
                                           : testing::RandomBlocks(wt, {n, k}, 10 + n);
          const uint8_t* w = static_cast<const uint8_t*>(wt_tensor.data);
          for (int64_t m_block : {int64_t{0}, int64_t{96}}) {
            std::vector<float> y(m * n, NAN);
            const int64_t split = n / 3;  // two ranges, the second starting inside a slice of 16 columns
            GemmSlicesAvx2(a.data(), m, k, w, wt, y.data(), n, 0, split, m_block);
            GemmSlicesAvx2(a.data(), m, k, w, wt, y.data(), n, split, n, m_block);
            SCOPED_TRACE("m_block " + std::to_string(m_block));
            ExpectExactProducts(a.data(), m, k, w, wt, n, y, made_here ? 1e-6 : 2e-6);
          }
        }
}

// The AVX2 byte dot products (Q8_0, Q4_0, Q4_K, Q6_K packed in tiles of 8 rows, the activation rounded per
// 32 values): within the int8 forms' bound of the exact sum over odd shapes (tiles of fewer rows) and splits
// inside a tile, the bound not vacuous (the rounding shows), and a NaN in an activation block reaches every
// output of its row. The K-quants over one, three (an odd count) and eight 256-value super-blocks. Each row
// of a many-row call is bitwise the row computed alone (Q6_K's tiles expanded once from 5 rows on, as 4, 2
// and 1 rows at a time, against its one-row kernel).
TEST(Gemm, Avx2Int8StaysWithinItsActivationRoundingBound) {
  if (!GemmAvx2Supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  for (DType wt : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    double worst = 0;
    const bool k_quant = BlockElems(wt) == 256;
    const std::vector<int64_t> ks =
        k_quant ? std::vector<int64_t>{256, 768, 2048} : std::vector<int64_t>{32, 96, 2048};
    for (int64_t m : {1, 2, 3, 5, 6, 11})
      for (int64_t n : {1, 6, 9, 21})
        for (int64_t k : ks) {
          auto a = testing::RandomFloats(m * k, 12 + m);
          HostTensor wt_tensor = k_quant
                                     ? testing::RandomBlocks(wt, {n, k}, 13 + n)
                                     : HostTensor::FromFloats({n, k}, testing::RandomFloats(n * k, 13), wt);
          const uint8_t* w = static_cast<const uint8_t*>(wt_tensor.data);
          const Int8Avx2PackedWeight packed = PackForInt8Avx2(w, wt, n, k);
          std::vector<float> y(m * n, NAN);
          const int64_t split = n / 2;
          GemmRowsInt8Avx2(a.data(), m, packed, y.data(), n, 0, split);
          GemmRowsInt8Avx2(a.data(), m, packed, y.data(), n, split, n);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const Exact e = ExactDot(a.data(), k, w, wt, i, j);
              const double bound = Int8DotErrorBound(a.data() + i * k, w, wt, k, j);
              ASSERT_LE(std::fabs(y[i * n + j] - e.sum), bound * 1.01 + 1e-6 * e.magnitude)
                  << DTypeName(wt) << " m=" << m << " n=" << n << " k=" << k << " at " << i << "," << j;
              worst = std::max(worst, std::fabs(y[i * n + j] - e.sum) / e.magnitude);
            }
          std::vector<float> alone(n, NAN);
          for (int64_t i = 0; i < m; ++i) {
            GemmRowsInt8Avx2(a.data() + i * k, 1, packed, alone.data(), n, 0, n);
            for (int64_t j = 0; j < n; ++j)
              ASSERT_EQ(std::memcmp(&alone[j], &y[i * n + j], sizeof(float)), 0)
                  << DTypeName(wt) << " m=" << m << " n=" << n << " k=" << k << " row " << i << " alone, at "
                  << j << ": " << alone[j] << " vs " << y[i * n + j];
          }
          a[(m - 1) * k + k / 2] = NAN;  // the last row's middle block
          GemmRowsInt8Avx2(a.data(), m, packed, y.data(), n, 0, n);
          for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[(m - 1) * n + j])) << DTypeName(wt);
        }
    EXPECT_GT(worst, 1e-5) << DTypeName(wt) << ": the activation was not rounded";
  }
}

TEST(Gemm, Int8DotStaysWithinItsActivationRoundingBound) {
  if (!Int8DotSupported(DType::Q8_0, 32)) GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  // K below, at and above one 512-value group, and not a multiple of it (a last group of 1, 3 or 5 blocks,
  // shared by pairs of rows, or of 12, padded); M and N with tails.
  for (DType wt : {DType::Q8_0, DType::Q4_0})
    for (int64_t k : {32, 96, 160, 384, 512, 1056})
      for (int64_t m : {1, 2, 5}) {
        const int64_t n = 11;
        auto a = testing::RandomFloats(m * k, 3), wf = testing::RandomFloats(n * k, 4);
        a[0] = 7.5f;  // one outlier: its block's scale is coarse, and the bound must say so
        std::vector<uint8_t> wq(StorageBytes(wt, n * k));
        if (wt == DType::Q8_0)
          QuantizeQ8_0(wf.data(), reinterpret_cast<BlockQ8_0*>(wq.data()), n * k);
        else
          QuantizeQ4_0(wf.data(), reinterpret_cast<BlockQ4_0*>(wq.data()), n * k);
        Int8PackedWeight packed = PackForInt8Dot(wq.data(), wt, n, k);
        std::vector<float> y(m * n, NAN);
        double total_error = 0;
        GemmRowsInt8(a.data(), m, packed, y.data(), n, 0, 6);  // two ranges, as two threads split them
        GemmRowsInt8(a.data(), m, packed, y.data(), n, 6, n);
        std::vector<float> y5(m * n, NAN);  // split inside a pair of rows: the same sums
        GemmRowsInt8(a.data(), m, packed, y5.data(), n, 0, 5);
        GemmRowsInt8(a.data(), m, packed, y5.data(), n, 5, n);
        for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(y5[i], y[i]) << DTypeName(wt) << " k=" << k << " at " << i;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double exact = 0;
            for (int64_t kk = 0; kk < k; ++kk)
              exact += (double)a[i * k + kk] * LoadAsDouble(wq.data(), wt, j * k + kk);
            double bound = Int8DotErrorBound(a.data() + i * k, wq.data(), wt, k, j);
            ASSERT_FALSE(std::isnan(y[i * n + j]));
            EXPECT_NEAR(y[i * n + j], exact, bound * 1.01 + 1e-4)
                << DTypeName(wt) << " k=" << k << " m=" << m << " at " << i << "," << j;
            total_error += std::fabs(y[i * n + j] - exact);
          }
        EXPECT_GT(total_error, 0.0)
            << "the int8 path rounds its activations: an exact result means it did not run";
      }
}

// Q2_K to Q6_K, IQ4_NL and IQ4_XS in the one-row int8 form (32 values per lane; Q4_K's and Q5_K's 6-bit scale
// and min, Q3_K's and Q6_K's two signed scales and offset, Q2_K's two scales and mins, IQ4_XS's signed scale
// applied per group in f32; the IQ4 tables looked up per vector): within the int8 forms' rounding bound of the exact
// sum, equal to the panels (which round the activation the same way) to f32 rounding, over row tails, a
// column split inside a 4-row tile and an odd count of 256-value blocks (half a group: shared by pairs of rows). A NaN in the
// activation reaches its row's outputs as NaN.
TEST(Gemm, Int8DotOverKQuantsStaysWithinTheRoundingBound) {
  if (!Int8DotSupported(DType::Q4_K, 256) || !PanelGemmSupported(DType::Q4_K))
    GTEST_SKIP() << "this CPU has no AVX512-VNNI (or AVX-512 templates are off)";
  for (DType wt : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS})
    for (int64_t k : {256, 768, 1024})
      for (int64_t m : {1, 2, 4, 5}) {
        const int64_t n = 11, split = 6;
        auto a = testing::RandomFloats(m * k, 41 + m);
        a[k / 2 + 3] = -9.0f;  // an outlier
        HostTensor w = testing::RandomBlocks(wt, {n, k}, 42 + k);
        Int8PackedWeight packed = PackForInt8Dot(w.data, wt, n, k);
        PanelPackedWeight panels = PackPanels(w.data, wt, n, k);
        std::vector<float> y(m * n, NAN), other(m * n, NAN);
        GemmRowsInt8(a.data(), m, packed, y.data(), n, 0, split);
        GemmRowsInt8(a.data(), m, packed, y.data(), n, split, n);
        GemmPanels(a.data(), m, panels, other.data(), n, 0, n);
        std::vector<float> y5(m * n, NAN);  // split inside a pair of rows (k = 256, 768: they share a group)
        GemmRowsInt8(a.data(), m, packed, y5.data(), n, 0, 5);
        GemmRowsInt8(a.data(), m, packed, y5.data(), n, 5, n);
        for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(y5[i], y[i]) << DTypeName(wt) << " k=" << k << " at " << i;
        double worst = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const std::string at = std::string(DTypeName(wt)) + " k=" + std::to_string(k) +
                                   " m=" + std::to_string(m) + " at " + std::to_string(i) + "," +
                                   std::to_string(j);
            const Exact e = ExactDot(a.data(), k, w.data, wt, i, j);
            const double got = y[i * n + j], bound = Int8DotErrorBound(a.data() + i * k, w.data, wt, k, j);
            ASSERT_FALSE(std::isnan(got)) << at;
            ASSERT_LE(std::fabs(got - e.sum), bound * 1.01 + 1e-6 * e.magnitude) << at;
            EXPECT_NEAR(got, other[i * n + j], 1e-5 * e.magnitude + 1e-6) << at;
            worst = std::max(worst, std::fabs(got - e.sum) / (1e-6 * e.magnitude));
          }
        EXPECT_GT(worst, 1.0) << DTypeName(wt) << " k=" << k
                              << ": no rounding visible; did the int8 form run?";
      }
  const DType wt = DType::Q6_K;
  const int64_t k = 512, n = 4;
  auto a = testing::RandomFloats(2 * k, 5);
  a[k + 300] = NAN;  // row 1
  HostTensor w = testing::RandomBlocks(wt, {n, k}, 6);
  Int8PackedWeight packed = PackForInt8Dot(w.data, wt, n, k);
  std::vector<float> y(2 * n, 0.0f);
  GemmRowsInt8(a.data(), 2, packed, y.data(), n, 0, n);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_FALSE(std::isnan(y[j])) << "row 0 column " << j;
    EXPECT_TRUE(std::isnan(y[n + j])) << "row 1 column " << j;
  }
}

// Row-major activation a (m x k) K-major in groups of `group` rows, [m / group, k, group] with the last group
// partial (zero-padded), as the float panels read a K-major activation; a itself where group is 0.
static std::vector<float> KMajorGroups(const std::vector<float>& a, int64_t m, int64_t k, int64_t group) {
  if (group == 0) return a;
  std::vector<float> src((m + group - 1) / group * group * k, 0.0f);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t kk = 0; kk < k; ++kk) src[(r / group * k + kk) * group + r % group] = a[r * k + kk];
  return src;
}

// The float panels add a bias as they store, after the last block of K: bit for bit the product stored and
// then the bias added (as the epilogue does), over partial tiles and panels, K past a block, row-major and
// K-major activations and column ranges split inside a panel.
TEST(Gemm, FloatPanelsAddTheBiasAsTheEpilogueWould) {
  if (!PanelGemmSupported(DType::F32)) GTEST_SKIP() << "this CPU has no AVX-512";
  for (DType wt : {DType::F32, DType::BF16})
    for (int64_t k : {27, 300})
      for (int64_t m : {5, 12, 29})
        for (int64_t n : {32, 45})
          for (int64_t group : {0, 7}) {
            auto a = testing::RandomFloats(m * k, 21), w = testing::RandomFloats(n * k, 22),
                 bias = testing::RandomFloats(n, 23);
            std::vector<uint16_t> w16(n * k);
            for (int64_t i = 0; i < n * k; ++i) w16[i] = FloatToBF16(w[i]);
            PanelPackedWeight panels = PackPanels(wt == DType::F32 ? (const void*)w.data() : w16.data(), wt, n, k);
            const std::vector<float> src = KMajorGroups(a, m, k, group);
            const PanelActivation layout{group, 0};
            std::vector<float> want(m * n, NAN), got(m * n, NAN);
            GemmPanels(src.data(), m, panels, want.data(), n, 0, n, layout);
            for (int64_t i = 0; i < m * n; ++i) want[i] += bias[i % n];
            for (int64_t split : {16, 32}) {
              GemmPanels(src.data(), m, panels, got.data(), n, 0, split, layout, 0, bias.data());
              GemmPanels(src.data(), m, panels, got.data(), n, split, n, layout, 0, bias.data());
              for (int64_t i = 0; i < m * n; ++i)
                ASSERT_EQ(got[i], want[i]) << DTypeName(wt) << " k=" << k << " m=" << m << " n=" << n
                                           << " group=" << group << " split=" << split << " at " << i;
            }
          }
}

// The float panels' register tile rows (8, 12, 14) are a template parameter the search times: each output's
// sum runs over K in the same order whatever rows share its tile, so every tile gives the default's outputs
// bit for bit, over partial tiles and row blocks, row-major and K-major activations, a bias and a split
// inside a panel; a tile not built is an error. The search offers the others for float weights only.
TEST(Gemm, FloatPanelTileRowsChangeOnlyTheSpeedAndAreSearched) {
  if (!PanelGemmSupported(DType::F32)) GTEST_SKIP() << "this CPU has no AVX-512";
  for (DType wt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t m : {1, 13, 29, 530})
      for (int64_t group : {0, 7}) {
        const int64_t n = 45, k = 300;
        auto a = testing::RandomFloats(m * k, 31), bias = testing::RandomFloats(n, 33);
        const HostTensor w = HostTensor::FromFloats({n, k}, testing::RandomFloats(n * k, 32), wt);
        PanelPackedWeight panels = PackPanels(w.data, wt, n, k);
        const std::vector<float> src = KMajorGroups(a, m, k, group);
        std::vector<float> want(m * n, NAN);
        GemmPanels(src.data(), m, panels, want.data(), n, 0, n, {group, 0}, 0, bias.data());
        for (int64_t rows : {8, 12, 14}) {
          std::vector<float> y(m * n, NAN);
          GemmPanels(src.data(), m, panels, y.data(), n, 0, 16, {group, 0}, rows, bias.data());
          GemmPanels(src.data(), m, panels, y.data(), n, 16, n, {group, 0}, rows, bias.data());
          for (int64_t i = 0; i < m * n; ++i)
            ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
                << DTypeName(wt) << " m=" << m << " group=" << group << " tile rows " << rows << " at " << i
                << ": " << y[i] << " vs " << want[i];
        }
      }
  std::vector<float> a(64, 1.0f), w(64 * 32, 1.0f), y(32);
  PanelPackedWeight p = PackPanels(w.data(), DType::F32, 32, 64);
  EXPECT_THROW(GemmPanels(a.data(), 1, p, y.data(), 32, 0, 32, {}, 10), Error);
  EXPECT_EQ(PanelTileRowsChoices(DType::F16), (std::vector<int64_t>{8, 14}));
  EXPECT_TRUE(PanelTileRowsChoices(DType::Q4_0).empty());

  const std::set<std::string> tiles =
      SearchedParamCandidates(DType::F16, 96, 512, {{"batch", {{"seq", 16}}}}, "tile_rows")["batch"];
  EXPECT_EQ(tiles, (std::set<std::string>{"template-panels/tile_rows=8", "template-panels/tile_rows=14"}));
}

// Quantized weights as panels (a column per lane) quantize the activations as the one-row int8
// path does and sum the same integers per block, so the two agree to f32 rounding; both stay within
// the rounding bound of the exact product. Tails in every dimension: rows past a 6-row tile, columns
// past a 32-column panel, K past a 32-block slice and not a multiple of a 512-value group.
TEST(Gemm, Int8PanelsAgreeWithTheOneRowPathOverOddShapes) {
  if (!PanelGemmSupported(DType::Q8_0)) GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  for (DType wt : {DType::Q8_0, DType::Q4_0})
    for (int64_t k : {32, 1056, 1600})
      for (int64_t m : {1, 6, 16, 37}) {
        const int64_t n = 75, split = 32;
        auto a = testing::RandomFloats(m * k, 13), wf = testing::RandomFloats(n * k, 14);
        a[k / 2 + 3] = -9.0f;  // an outlier
        std::vector<uint8_t> wq(StorageBytes(wt, n * k));
        if (wt == DType::Q8_0)
          QuantizeQ8_0(wf.data(), reinterpret_cast<BlockQ8_0*>(wq.data()), n * k);
        else
          QuantizeQ4_0(wf.data(), reinterpret_cast<BlockQ4_0*>(wq.data()), n * k);
        PanelPackedWeight panels = PackPanels(wq.data(), wt, n, k);
        Int8PackedWeight rows_form = PackForInt8Dot(wq.data(), wt, n, k);
        std::vector<float> y(m * n, NAN), rows(m * n, NAN);
        GemmPanels(a.data(), m, panels, y.data(), n, 0, split);  // two ranges, as two threads split them
        GemmPanels(a.data(), m, panels, y.data(), n, split, n);
        GemmRowsInt8(a.data(), m, rows_form, rows.data(), n, 0, n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const Exact e = ExactDot(a.data(), k, wq.data(), wt, i, j);
            const double exact = e.sum, magnitude = e.magnitude;
            const double got = y[i * n + j];
            ASSERT_FALSE(std::isnan(got))
                << DTypeName(wt) << " k=" << k << " m=" << m << " at " << i << "," << j;
            EXPECT_NEAR(got, rows[i * n + j], 1e-5 * magnitude + 1e-6)
                << DTypeName(wt) << " k=" << k << " m=" << m << " at " << i << "," << j;
            EXPECT_NEAR(got, exact, Int8DotErrorBound(a.data() + i * k, wq.data(), wt, k, j) * 1.01 + 1e-4)
                << DTypeName(wt) << " k=" << k << " m=" << m << " at " << i << "," << j;
          }
      }
  std::vector<uint8_t> wq(StorageBytes(DType::Q8_0, 64 * 32));
  PanelPackedWeight p = PackPanels(wq.data(), DType::Q8_0, 64, 32);
  std::vector<float> a(32, 1.0f), y(64);
  EXPECT_THROW(GemmPanels(a.data(), 1, p, y.data(), 64, 16, 64), Error) << "a split inside a panel";
}

// A one-row product's gemv_rows (one weight row at a time, two from the range's halves, or four): exact
// products every way over odd shapes and a split of the columns; any other value is an error. The search
// offers it for one activation row of float weights only, and checks it there as every candidate.
TEST(Gemm, GemvRowsChangeOnlyTheSpeedAndAreSearched) {
  if (std::string_view(GemmIsa()) == "scalar") GTEST_SKIP() << "no vector kernels on this tier";
  for (DType wt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t n : {1, 6, 13, 30})
      for (int64_t k : {7, 16, 100, 1000})
        for (int64_t rows : {0, 1, 2, 4}) {
          auto a = testing::RandomFloats(k, 3), wf = testing::RandomFloats(n * k, 4);
          HostTensor wt_tensor = HostTensor::FromFloats({n, k}, wf, wt);
          const uint8_t* w = static_cast<const uint8_t*>(wt_tensor.data);
          std::vector<float> y(n, NAN);
          const int64_t split = n / 2;  // two ranges, as two threads would take them
          GemmRows(a.data(), 1, k, w, wt, y.data(), n, 0, split, rows);
          GemmRows(a.data(), 1, k, w, wt, y.data(), n, split, n, rows);
          ExpectExactProducts(a.data(), 1, k, w, wt, n, y, 1e-6);
        }
  std::vector<float> a(64, 1.0f), w(64, 1.0f), y(1);
  EXPECT_THROW(GemmRows(a.data(), 1, 64, w.data(), DType::F32, y.data(), 1, 0, 1, 3), Error);
  // The counts the default (0) does not mean: with AVX-512 two on Intel, one on AMD; with AVX2 two, four for f32.
  const bool avx2 = std::string_view(GemmIsa()) == "avx2";
  EXPECT_EQ(DefaultGemvRows(DType::F16), avx2 ? 2 : IntelPrefetchers() ? 2 : 1);
  EXPECT_EQ(DefaultGemvRows(DType::F32), avx2 ? 4 : IntelPrefetchers() ? 2 : 1);
  const std::vector<int64_t> others =
      DefaultGemvRows(DType::F16) == 2 ? std::vector<int64_t>{4, 1} : std::vector<int64_t>{4, 2};
  EXPECT_EQ(GemvRowsChoices(DType::F16, 1), others);
  EXPECT_TRUE(GemvRowsChoices(DType::F16, 2).empty());
  EXPECT_TRUE(GemvRowsChoices(DType::Q4_0, 1).empty());

  const auto offered = SearchedParamCandidates(DType::F16, 96, 512,
                                               {{"decode", {{"seq", 1}}}, {"batch", {{"seq", 16}}}}, "gemv_rows");
  std::set<std::string> want;
  for (int64_t rows : others) want.insert("template/gemv_rows=" + std::to_string(rows));
  EXPECT_EQ(offered, (std::map<std::string, std::set<std::string>>{{"decode", want}}));
}

// The int8 panels' K-slice is a template parameter the search times: every slice gives the same sums in
// the same order (bitwise equal outputs, a slice past K and one that does not divide it included); the
// search offers each as a candidate of its own, checks it, and the choice keeps its slice through the
// tuning database's JSON.
TEST(Gemm, Int8PanelSlicesChangeOnlyTheSpeedAndAreSearched) {
  if (!PanelGemmSupported(DType::Q4_K)) GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  for (DType wt : {DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t n = 70, k = 4096, m = 13;
    auto a = testing::RandomFloats(m * k, 41);
    std::vector<uint8_t> q4(StorageBytes(DType::Q4_0, n * k));
    QuantizeQ4_0(testing::RandomFloats(n * k, 42).data(), reinterpret_cast<BlockQ4_0*>(q4.data()), n * k);
    const HostTensor w = wt == DType::Q4_0 ? HostTensor::Borrow(wt, {n, k}, q4.data())
                                           : testing::RandomBlocks(wt, {n, k}, 42);
    PanelPackedWeight panels = PackPanels(w.data, wt, n, k);
    std::vector<float> want(m * n, NAN);
    GemmPanels(a.data(), m, panels, want.data(), n, 0, n);
    for (int64_t slice : {1, 7, 16, 32, 128, 1000}) {
      std::vector<float> y(m * n, NAN);
      GemmPanels(a.data(), m, panels, y.data(), n, 0, 64, {}, slice);
      GemmPanels(a.data(), m, panels, y.data(), n, 64, n, {}, slice);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
            << DTypeName(wt) << " slice " << slice << " at " << i << ": " << y[i] << " vs " << want[i];
    }
  }
  EXPECT_EQ(Int8PanelSliceChoices(2048), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(Int8PanelSliceChoices(8192), (std::vector<int64_t>{16, 32, 256}));

  const std::set<std::string> slices =
      SearchedParamCandidates(DType::Q4_0, 96, 4096, {{"batch", {{"seq", 16}}}}, "slice")["batch"];
  EXPECT_EQ(slices, (std::set<std::string>{"template-panels/slice=16", "template-panels/slice=32",
                                           "template-panels/slice=128"}));
  KernelChoice c;
  c.form = GemmFormIndex("panels");
  c.param = 16;
  EXPECT_EQ(ChoiceFromJson(ChoiceToJson(c)), c);
  nlohmann::json older = ChoiceToJson(c);
  older.erase("param");  // a tuning database written before the parameter: the form's default
  EXPECT_EQ(ChoiceFromJson(older).param, 0);
}

// The int8 GEMMs' prefetch distance (the int8 rows' with VNNI, int8-avx2's on the AVX2 tier) is a template
// parameter the search times over the whole step: every distance (none, short, past the end of the weights)
// gives bitwise the same sums; a negative one is an error; a decode step's search times the step at each
// distance, and a distance chosen (here written into the tuning database) reaches the step's int8 GEMMs and
// no other kernel.
TEST(Gemm, Int8PrefetchDistancesChangeOnlyTheSpeedAndAreSearchedPerStep) {
  for (DType wt : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t n = 29, k = 1536;
    if (!Int8Avx2Supported(wt, k)) continue;
    const HostTensor w = wt == DType::Q8_0 || wt == DType::Q4_0
                             ? HostTensor::FromFloats({n, k}, testing::RandomFloats(n * k, 44), wt)
                             : testing::RandomBlocks(wt, {n, k}, 44);
    const Int8Avx2PackedWeight packed = PackForInt8Avx2(w.data, wt, n, k);
    for (int64_t m : {1, 3, 6}) {  // the first pass over a tile prefetches; later ones find it in cache
      auto a = testing::RandomFloats(m * k, 43);
      std::vector<float> want(m * n, NAN);
      GemmRowsInt8Avx2(a.data(), m, packed, want.data(), n, 0, n);
      for (int64_t ahead : {kInt8NoPrefetch, (int64_t)64, (int64_t)1024, (int64_t)4096, (int64_t)1 << 24}) {
        std::vector<float> y(m * n, NAN);
        GemmRowsInt8Avx2(a.data(), m, packed, y.data(), n, 0, 8, ahead);
        GemmRowsInt8Avx2(a.data(), m, packed, y.data(), n, 8, n, ahead);
        for (int64_t i = 0; i < m * n; ++i)
          ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0) << DTypeName(wt) << " int8-avx2 prefetch "
                                                                    << ahead << " at " << i << ": " << y[i]
                                                                    << " vs " << want[i];
      }
      EXPECT_THROW(GemmRowsInt8Avx2(a.data(), m, packed, want.data(), n, 0, n, -64), Error);
    }
  }
  for (DType wt : {DType::Q8_0, DType::Q4_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                  DType::IQ4_NL, DType::IQ4_XS}) {
    if (!HasAvx512Vnni()) break;
    // One row reads two streams where asked: the whole tiles in two halves, the partial ones and an odd
    // count's middle tile alone (rows 6-7, 28-31 and 52 of the second range), with and without a paired
    // tail (k of 1280 ends in half a group; Q8_0's 1312 in a partial group of its own blocks).
    for (const int64_t k : {(int64_t)1536, wt == DType::Q8_0 ? (int64_t)1312 : (int64_t)1280})
      for (const int64_t m : {1, 3}) {
        const int64_t n = m == 1 ? 53 : 23;
        if (!Int8DotSupported(wt, k)) continue;
        auto a = testing::RandomFloats(m * k, 43);
        const HostTensor w = wt == DType::Q8_0 || wt == DType::Q4_0
                                 ? HostTensor::FromFloats({n, k}, testing::RandomFloats(n * k, 44), wt)
                                 : testing::RandomBlocks(wt, {n, k}, 44);
        const Int8PackedWeight packed = PackForInt8Dot(w.data, wt, n, k);
        std::vector<float> want(m * n, NAN);
        GemmRowsInt8(a.data(), m, packed, want.data(), n, 0, n, 4096);
        for (int64_t ahead : {(int64_t)0, kInt8NoPrefetch, (int64_t)64, (int64_t)1024, (int64_t)16384,
                              (int64_t)1 << 24, 4096 + kInt8PrefetchToL2, 512 + kInt8TwoStreams,
                              512 + kInt8PrefetchToL2 + kInt8TwoStreams}) {
          std::vector<float> y(m * n, NAN);
          GemmRowsInt8(a.data(), m, packed, y.data(), n, 0, 6, ahead);
          GemmRowsInt8(a.data(), m, packed, y.data(), n, 6, n, ahead);
          for (int64_t i = 0; i < m * n; ++i)
            ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
                << DTypeName(wt) << " k " << k << " prefetch " << Int8PrefetchName(ahead) << " at " << i
                << ": " << y[i] << " vs " << want[i];
        }
        EXPECT_THROW(GemmRowsInt8(a.data(), m, packed, want.data(), n, 0, n, -64), Error);
        EXPECT_THROW(GemmRowsInt8(a.data(), m, packed, want.data(), n, 0, n, 2 * kInt8TwoStreams), Error);
      }
  }
  EXPECT_EQ(Int8PrefetchName(4096 + kInt8PrefetchToL2), "4096+l2");
  EXPECT_EQ(Int8PrefetchName(6144), "6144");
  EXPECT_EQ(Int8PrefetchName(512 + kInt8PrefetchToL2 + kInt8TwoStreams), "512+l2+2streams");
  for (int64_t ahead : {kInt8NoPrefetch, (int64_t)6144, 4096 + kInt8PrefetchToL2, 512 + kInt8TwoStreams,
                        512 + kInt8PrefetchToL2 + kInt8TwoStreams})
    EXPECT_EQ(Int8PrefetchFromName(Int8PrefetchName(ahead)), ahead);
  for (const char* bad : {"", "-64", "64+l3", "64+2streams+l2", "l2"})
    EXPECT_EQ(Int8PrefetchFromName(bad), std::nullopt) << bad;
  if (HasAvx512Vnni()) {  // the other maker's default is searched, this maker's is the default itself
    EXPECT_EQ(Int8PrefetchChoices(DType::Q4_K, 2048),
              IntelPrefetchers()
                  ? (std::vector<int64_t>{kInt8NoPrefetch, 3072, 12288, 6144, 4096 + kInt8PrefetchToL2})
                  : (std::vector<int64_t>{kInt8NoPrefetch, 3072, 12288, 4096 + kInt8PrefetchToL2,
                                          512 + kInt8PrefetchToL2 + kInt8TwoStreams}));
  }
  EXPECT_TRUE(Int8PrefetchChoices(DType::BF16, 4096).empty()) << "bf16's rounded rows take no prefetch";
  EXPECT_TRUE(Int8Avx2PrefetchChoices(DType::BF16, 4096).empty()) << "int8-avx2 takes no bf16";
  // The int8 form a Q4_K product takes in decode on this tier, and the distances it offers.
  const bool vnni = RoundedActivationSupported(DType::Q4_K, 2048) && HasAvx512Vnni();
  const int int8_form = GemmFormIndex(vnni ? "rounded" : "int8-avx2");
  const std::vector<int64_t> choices =
      vnni ? Int8PrefetchChoices(DType::Q4_K, 2048) : Int8Avx2PrefetchChoices(DType::Q4_K, 2048);
  if (choices.empty()) GTEST_SKIP() << "no int8 forms on this tier: " << GemmIsa();

  // Two products: one over Q4_K weights (an int8 form in decode), one over f32 weights.
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(2048)})};
  Tensor wq{&g, g.Weight("wq", DType::Q4_K, {Expr(96), Expr(2048)})};
  Tensor wf{&g, g.Weight("wf", DType::F32, {Expr(40), Expr(96)})};
  g.MarkOutput(Linear(Linear(x, wq), wf).id(), "y");
  CompileOptions copts;
  copts.threads = 2;
  const SymbolBindings b{{"seq", 1}};
  const auto weights = testing::RandomTensors(g, Op::Weight, b, 5);
  const std::filesystem::path db = testing::MakeTempDir("prefetch") / "tuning.json";
  SearchOptions opts;
  opts.buckets = {{"decode", b}};
  opts.db_path = db.string();
  opts.busy_limit = 1;
  auto search = [&](double budget) {
    auto prog = Program::Compile(g, copts);
    for (auto& [name, t] : weights) prog->BindWeight(name, t);
    opts.budget_seconds = budget;
    return std::make_pair(SearchSchedules(*prog, opts), std::move(prog));
  };
  auto [receipts, prog] = search(testing::kUnreachedSearchBudget);
  std::set<std::string> variants;
  std::string step_key;
  for (const auto& r : receipts)
    if (r.value("scope", "") == "step")
      for (const auto& c : r["candidates"]) variants.insert(c["candidate"]), step_key = r["key"];
  const std::string variant = "team, int8 rows prefetch=";
  for (int64_t ahead : choices) EXPECT_TRUE(variants.count(variant + Int8PrefetchName(ahead))) << ahead;
  ASSERT_FALSE(step_key.empty());

  nlohmann::json entries = nlohmann::json::parse(std::ifstream(db));
  ASSERT_TRUE(entries.contains(step_key)) << entries.dump();
  const int64_t far = choices.back();
  entries[step_key]["candidate"] = variant + Int8PrefetchName(far);
  std::ofstream(db) << entries.dump();
  auto [again, applied] = search(0);
  const std::vector<KernelChoice>& chosen = applied->choices().at("decode");
  int int8_gemms = 0;
  for (size_t k = 0; k < chosen.size(); ++k) {
    const auto& gm = applied->kernels().kernels[k].gemm;
    const bool q4k = gm && applied->kernels().buffers[gm->w_buffer].dtype == DType::Q4_K;
    if (q4k && chosen[k].use_template && chosen[k].form == int8_form) {
      EXPECT_EQ(chosen[k].param, far) << applied->kernels().kernels[k].name;
      ++int8_gemms;
    } else {
      // The step's distance is the int8 GEMMs' alone; another form's own parameter (gemv_rows for the f32
      // product) is that kernel's searched decision.
      EXPECT_NE(chosen[k].param, far) << applied->kernels().kernels[k].name;
    }
  }
  EXPECT_EQ(int8_gemms, 1) << "the Q4_K product in decode runs an int8 form";
}

// GGUF's block formats as int8 panels (bytes 0..255 with per-16 or per-32 scales and offsets, the
// activation rounded per 32 values, or per 256 for the formats of 256-value super-blocks): within the int8
// forms' rounding bound of the exact sum for that rounding, with the rounding visible (the form ran), over
// odd row counts, a column split inside the second panel's range, K past a 32-block slice and past one
// group of 8 blocks in slices of 8, 16 and 40. A NaN in the activation reaches its outputs as NaN.
TEST(Gemm, Int8PanelsOverBlockFormatsStayWithinTheRoundingBound) {
  if (!PanelGemmSupported(DType::Q4_K)) GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  int grouped = 0;
  for (DType wt : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                   DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL})
    for (int64_t act_block : {(int64_t)kQuantBlock, (int64_t)kSuperBlock})
      for (int64_t m : {1, 5, 10, 13})
        for (int64_t blocks : {1, 5}) {
          const int64_t n = 37, split = 32, k = blocks * BlockElems(wt);
          const bool group = act_block == kSuperBlock;
          EXPECT_EQ(Int8PanelsGroupSupported(wt, k), BlockElems(wt) == kSuperBlock) << DTypeName(wt);
          if (group && !Int8PanelsGroupSupported(wt, k)) continue;
          auto a = testing::RandomFloats(m * k, 31 + m);
          a[k / 2 + 3] = -9.0f;  // an outlier
          HostTensor w = testing::RandomBlocks(wt, {n, k}, 32);
          PanelPackedWeight panels = PackPanels(w.data, wt, n, k);
          for (int64_t slice : group ? std::vector<int64_t>{8, 16, 40} : std::vector<int64_t>{0}) {
            std::vector<float> y(m * n, NAN);
            GemmPanelsInt8(a.data(), m, panels.data.get(), wt, k, y.data(), n, 0, split, slice, act_block);
            GemmPanelsInt8(a.data(), m, panels.data.get(), wt, k, y.data(), n, split, n, slice, act_block);
            const std::string what = std::string(DTypeName(wt)) + " per " + std::to_string(act_block) +
                                     " slice " + std::to_string(slice) + " k=" + std::to_string(k) +
                                     " m=" + std::to_string(m);
            double worst = 0;
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                const Exact e = ExactDot(a.data(), k, w.data, wt, i, j);
                const double exact = e.sum, magnitude = e.magnitude, got = y[i * n + j];
                const double bound = Int8DotErrorBound(a.data() + i * k, w.data, wt, k, j, act_block);
                ASSERT_FALSE(std::isnan(got)) << what << " at " << i << "," << j;
                ASSERT_LE(std::fabs(got - exact), bound * 1.01 + 1e-6 * magnitude)
                    << what << " at " << i << "," << j;
                worst = std::max(worst, std::fabs(got - exact) / (1e-6 * magnitude));
              }
            EXPECT_GT(worst, 1.0) << what << ": no rounding visible; did the int8 form run?";
            grouped += group;
          }
        }
  EXPECT_EQ(grouped, 6 * 8 * 3) << "every format of 256-value super-blocks, rounded per 256";
  const int64_t k = 512, n = 32;
  auto a = testing::RandomFloats(3 * k, 5);
  a[k + 40] = NAN;  // row 1
  HostTensor w = testing::RandomBlocks(DType::Q6_K, {n, k}, 6);
  PanelPackedWeight panels = PackPanels(w.data, DType::Q6_K, n, k);
  for (int64_t act_block : {(int64_t)kQuantBlock, (int64_t)kSuperBlock}) {
    std::vector<float> y(3 * n, 0.0f);
    GemmPanelsInt8(a.data(), 3, panels.data.get(), DType::Q6_K, k, y.data(), n, 0, n, 8, act_block);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_FALSE(std::isnan(y[j])) << "row 0 column " << j << " per " << act_block;
      EXPECT_TRUE(std::isnan(y[n + j])) << "row 1 column " << j << " per " << act_block;
    }
  }
  // Rounded per 256 values, slices must hold whole groups of 8 blocks, and the format 256-value blocks.
  std::vector<float> y(3 * n);
  EXPECT_THROW(
      GemmPanelsInt8(a.data(), 3, panels.data.get(), DType::Q6_K, k, y.data(), n, 0, n, 12, kSuperBlock),
      Error);
  HostTensor q5 = testing::RandomBlocks(DType::Q5_0, {n, k}, 6);
  PanelPackedWeight q5_panels = PackPanels(q5.data, DType::Q5_0, n, k);
  EXPECT_THROW(
      GemmPanelsInt8(a.data(), 3, q5_panels.data.get(), DType::Q5_0, k, y.data(), n, 0, n, 8, kSuperBlock),
      Error);
}

// Both bf16 dot-product forms (weight rows as stored; packed panels of pairs) over odd K, M and N, with
// column splits inside and across panels, against exact sums within the activation-rounding bound.
TEST(Gemm, Bf16DotStaysWithinItsActivationRoundingBound) {
  if (!Bf16DotSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  for (bool panels : {false, true})
    for (int64_t k : {1, 31, 32, 33, 200, 2048})
      for (int64_t m : {1, 3, 6, 9, 17}) {
        const int64_t n = panels ? 70 : 9;
        auto a = testing::RandomFloats(m * k, 5), wf = testing::RandomFloats(n * k, 6);
        std::vector<uint16_t> w(n * k);
        for (int64_t i = 0; i < n * k; ++i) w[i] = FloatToBF16(wf[i]);
        std::vector<float> y(m * n, NAN);
        if (panels) {
          const Bf16PanelWeight p = PackBf16Panels(w.data(), n, k);
          for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 5}, {5, 32}, {32, 64}, {64, n}})
            GemmBf16Panels(a.data(), m, p, y.data(), n, b, e);
        } else {
          GemmRowsBf16Dot(a.data(), m, k, w.data(), y.data(), n, 0, 5);
          GemmRowsBf16Dot(a.data(), m, k, w.data(), y.data(), n, 5, n);
        }
        double total_error = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double exact = 0;
            for (int64_t kk = 0; kk < k; ++kk) exact += (double)a[i * k + kk] * BF16ToFloat(w[j * k + kk]);
            double bound = Bf16DotErrorBound(a.data() + i * k, w.data(), k, j);
            ASSERT_FALSE(std::isnan(y[i * n + j])) << (panels ? "panels" : "rows") << " at " << i << "," << j;
            EXPECT_NEAR(y[i * n + j], exact, bound)
                << (panels ? "panels" : "rows") << " k=" << k << " m=" << m << " at " << i << "," << j;
            total_error += std::fabs(y[i * n + j] - exact);
          }
        if (k >= 32) {
          EXPECT_GT(total_error, 0.0) << "bf16 rounding of the activation should show";
        }
      }
}

// Few columns a thread (under 8 panels) read the activation's rows where they lie; many pack them into
// tiles (n = 600 split at 200 and 300: 7 panels and 13, or 10 and 10), over two row blocks (m = 300) and
// three blocks of K (k = 700), while the tiles prefetch the next slice of weights.
TEST(Gemm, PanelsMatchExactProductsOverOddShapesAndSplits) {
  if (!PanelGemmSupported(DType::F32)) GTEST_SKIP() << "this CPU has no AVX-512";
  auto check = [](DType wt, int64_t m, int64_t n, int64_t k, int64_t split) {
    auto a = testing::RandomFloats(m * k, 7), wf = testing::RandomFloats(n * k, 8);
    std::vector<uint8_t> w(StorageBytes(wt, n * k));
    for (int64_t i = 0; i < n * k; ++i) StoreFromDouble(w.data(), wt, i, wf[i]);
    PanelPackedWeight packed = PackPanels(w.data(), wt, n, k);
    std::vector<float> y(m * n, NAN);
    GemmPanels(a.data(), m, packed, y.data(), n, 0, split);
    GemmPanels(a.data(), m, packed, y.data(), n, split, n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const Exact e = ExactDot(a.data(), k, w.data(), wt, i, j);
        ASSERT_NEAR(y[i * n + j], e.sum, 1e-6 * e.magnitude + 1e-7)
            << DTypeName(wt) << " m=" << m << " n=" << n << " k=" << k << " split=" << split << " at " << i
            << "," << j;
      }
  };
  for (DType wt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t m : {1, 5, 13, 100})  // 100: the last tile partial
      for (int64_t n : {1, 31, 33, 70})
        for (int64_t k : {1, 17, 300})  // 300: two blocks of K
          check(wt, m, n, k, n / 3);    // two ranges, the second starting inside a panel
    for (int64_t m : {13, 300})
      for (int64_t split : {200, 300}) check(wt, m, 600, 700, split);
  }
}

TEST(Gemm, AmxAgreesWithTheRoundedFormsOverOddShapes) {
  if (!AmxGemmSupported(DType::BF16, 32)) GTEST_SKIP() << "this CPU (or kernel) gives no AMX";
  for (DType wt : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::F32, DType::F16})
    for (int64_t k : {32, 33, 600, 1056})  // 600, 1056: several cache blocks of K, the last partial
      for (int64_t m : {1, 17, 75}) {
        if (IsQuantized(wt) && k % 32 != 0) continue;
        const int64_t n = 300, split = 64;  // two ranges, as two threads split them; 300 crosses a 256 block
        auto a = testing::RandomFloats(m * k, 21), wf = testing::RandomFloats(n * k, 22);
        a[k / 2] = -7.0f;  // an outlier
        const HostTensor w = HostTensor::FromFloats({n, k}, wf, wt);
        AmxPackedWeight packed = PackForAmx(w.data, wt, n, k);
        std::vector<float> y(m * n, NAN), other(m * n, NAN);
        GemmAmx(a.data(), m, packed, y.data(), n, 0, split);
        GemmAmx(a.data(), m, packed, y.data(), n, split, n);
        // The form that rounds the activation the same way, one row of products at a time (f32/f16:
        // the exact rows form).
        if (wt == DType::BF16) {
          GemmRowsBf16Dot(a.data(), m, k, static_cast<const uint16_t*>(w.data), other.data(), n, 0, n);
        } else if (IsQuantized(wt)) {
          Int8PackedWeight rows_form = PackForInt8Dot(w.data, wt, n, k);
          GemmRowsInt8(a.data(), m, rows_form, other.data(), n, 0, n);
        } else {
          GemmRows(a.data(), m, k, w.data, wt, other.data(), n, 0, n);
        }
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const Exact e = ExactDot(a.data(), k, w.data, wt, i, j);
            const double exact = e.sum, magnitude = e.magnitude;
            const double got = y[i * n + j], bound = AmxErrorBound(a.data() + i * k, w.data, wt, k, j);
            const std::string at = std::string(DTypeName(wt)) + " k=" + std::to_string(k) +
                                   " m=" + std::to_string(m) + " at " + std::to_string(i) + "," +
                                   std::to_string(j);
            ASSERT_FALSE(std::isnan(got)) << at;
            ASSERT_NEAR(got, exact, bound * 1.01 + 1e-6) << at;
            ASSERT_NEAR(got, other[i * n + j],
                        IsFloat(wt) && wt != DType::BF16 ? bound * 1.01 + 1e-6 : 1e-5 * magnitude + 1e-6)
                << at;
          }
      }
  // The split form keeps infinities and NaN where exact products would have them.
  for (DType wt : {DType::F32, DType::F16}) {
    const int64_t n = 32, k = 64;
    auto a = testing::RandomFloats(2 * k, 31), wf = testing::RandomFloats(n * k, 32);
    a[5] = INFINITY;
    a[k + 9] = NAN;
    wf[3 * k + 5] = 0.0f;  // inf x 0: NaN, as the reference has it
    const HostTensor w = HostTensor::FromFloats({n, k}, wf, wt);
    AmxPackedWeight packed = PackForAmx(w.data, wt, n, k);
    std::vector<float> y(2 * n, 0.0f);
    GemmAmx(a.data(), 2, packed, y.data(), n, 0, n);
    for (int64_t j = 0; j < n; ++j) {
      const double wj = LoadAsDouble(w.data, wt, j * k + 5);
      if (wj == 0)
        EXPECT_TRUE(std::isnan(y[j])) << DTypeName(wt) << " column " << j;
      else
        EXPECT_EQ(y[j], wj > 0 ? INFINITY : -INFINITY) << DTypeName(wt) << " column " << j;
      EXPECT_TRUE(std::isnan(y[n + j])) << DTypeName(wt) << " column " << j;
    }
  }
  const HostTensor w = HostTensor::FromFloats({64, 32}, testing::RandomFloats(64 * 32, 3), DType::BF16);
  AmxPackedWeight p = PackForAmx(w.data, DType::BF16, 64, 32);
  std::vector<float> a(32, 1.0f), y(64);
  EXPECT_THROW(GemmAmx(a.data(), 1, p, y.data(), 64, 16, 64), Error)
      << "a split inside a block of 32 columns";
  EXPECT_THROW(PackForAmx(w.data, DType::I32, 64, 32), Error) << "integer weights have no AMX form";
}

// The search offers the AMX form for prompts, checks it against the reference within its rounding
// bound, and the program runs it once chosen.
TEST(Gemm, SearchOffersAmxForPromptsAndTheChoiceRuns) {
  if (!AmxGemmSupported(DType::BF16, 32)) GTEST_SKIP() << "this CPU (or kernel) gives no AMX";
  for (DType wt : {DType::BF16, DType::Q4_0, DType::F32}) {
    Graph g;
    Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(256)})};
    Tensor w{&g, g.Weight("w", wt, {Expr(96), Expr(256)})};
    g.MarkOutput(Linear(x, w).id(), "y");
    CompileOptions copts;
    copts.threads = 2;
    auto prog = Program::Compile(g, copts);
    Interpreter interp(g);
    const SymbolBindings b{{"seq", 70}};
    const auto weights = testing::RandomTensors(g, Op::Weight, b, 5);
    for (auto& [name, t] : weights) {
      interp.BindWeight(name, t);
      prog->BindWeight(name, t);
    }
    SearchOptions opts;
    opts.buckets = {{"prefill", b}};
    opts.budget_seconds = testing::kUnreachedSearchBudget;
    nlohmann::json receipts = SearchSchedules(*prog, opts);
    int amx = 0;
    for (const auto& r : receipts)
      for (const auto& c : r.value("candidates", nlohmann::json::array()))
        if (c["candidate"].get<std::string>().rfind("template-amx", 0) == 0) {
          amx++;
          EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
          EXPECT_GT(c["rel_error_bound"].get<double>(), 0) << c.dump();
        }
    EXPECT_EQ(amx, 2) << DTypeName(wt) << ": serial and parallel";
    // Whatever was fastest, the AMX form in the program: the activation's rounding shows, within the bound.
    KernelChoices choices = prog->choices();
    for (KernelChoice& c : choices["prefill"]) c.form = GemmFormIndex("amx");
    prog->SetChoices(choices);
    auto in = testing::RandomTensors(g, Op::Input, b, 6);
    const HostTensor want = interp.Run(in, b)[0], got = prog->Run(in, b)[0];
    const float* a = static_cast<const float*>(in.at("x").data);
    double max_err = 0;
    for (int64_t i = 0; i < 70; ++i)
      for (int64_t j = 0; j < 96; ++j) {
        const double err = std::fabs(got.At(i * 96 + j) - want.At(i * 96 + j));
        max_err = std::max(max_err, err);
        ASSERT_LE(err, AmxErrorBound(a + i * 256, weights.at("w").data, wt, 256, j) * 1.01 + 1e-4)
            << DTypeName(wt) << " at " << i << "," << j;
      }
    if (wt != DType::F32) {
      EXPECT_GT(max_err, 1e-5) << DTypeName(wt) << ": exact results, so the AMX form did not run";
    }
  }
}

// A bf16 activation (a cast from bf16) meets bf16 weights on bf16 dot products before any search: its
// rounding to bf16 loses nothing, so only the order of the sums differs from the interpreter's. An f32
// activation keeps exact f32 products until a search has checked the rounding: the rows form, or over
// many rows the panels (the slices without AVX-512).
TEST(Gemm, Bf16ActivationsRunOnBf16DotProductsUnsearched) {
  for (DType xt : {DType::BF16, DType::F32}) {
    Graph g;
    Tensor x{&g, g.Input("x", xt, {Expr::Sym("m"), Expr(200)})};
    Tensor w{&g, g.Weight("w", DType::BF16, {Expr(37), Expr(200)})};
    g.MarkOutput(Linear(xt == DType::F32 ? x : x.cast(DType::F32), w).id(), "y");
    auto prog = Program::Compile(g);
    int gemms = 0;
    for (size_t k = 0; k < prog->kernels().kernels.size(); ++k)
      if (const auto& gm = prog->kernels().kernels[k].gemm) {
        ++gemms;
        EXPECT_EQ(gm->a_bf16, xt == DType::BF16);
        const bool dots = xt == DType::BF16 && GemmForms()[GemmFormIndex("dot-panels")].offered(DType::BF16, 200);
        const bool panels = GemmForms()[GemmFormIndex("panels")].offered(DType::BF16, 200);
        const bool slices = GemmForms()[GemmFormIndex("slices")].offered(DType::BF16, 200);
        EXPECT_EQ(prog->DefaultChoice(k, {{"m", 1}}).form, dots ? GemmFormIndex("dot-panels") : 0);
        EXPECT_EQ(prog->DefaultChoice(k, {{"m", 70}}).form, dots     ? GemmFormIndex("dot-panels")
                                                             : panels ? GemmFormIndex("panels")
                                                             : slices ? GemmFormIndex("slices")
                                                                      : 0);
      }
    EXPECT_EQ(gemms, 1);
    testing::CheckGraph(g, {{{"m", 1}}, {{"m", 5}}, {{"m", 70}}}, 1e-5, 1e-5, 7,
                        "bf16 weights, " + std::string(DTypeName(xt)) + " activation");
  }
}

// Quantized weights meet int8 dot products before any search, as llama.cpp's do: one row at a time for a
// few rows, in panels over more (AMX's int8 tiles from 32 rows of Q8_0 and Q4_0 where the CPU has them;
// Q4_K and Q6_K against the activation rounded per 256 values; the rows form's f32 products ran decode at
// half the bandwidth and 16 rows 3-4x slower). Every output stays within
// the chosen form's rounding bound of the exact sum, as the search would check; float weights keep exact f32
// products (the panels from 6 rows where N fills a panel, as here; the rows form below that).
TEST(Gemm, QuantizedWeightsRunOnInt8DotProductsUnsearched) {
  const int rounded = GemmFormIndex("rounded"), panels = GemmFormIndex("panels"), q8k = GemmFormIndex("q8k"),
            slices = GemmFormIndex("slices"), int8_avx2 = GemmFormIndex("int8-avx2"),
            q8k_panels = GemmFormIndex("q8k-panels"), amx = GemmFormIndex("amx");
  // Panels from 2 rows where they hold the weights as nibbles, from 6 where as bytes or floats.
  EXPECT_EQ(MinRows(GemmForms()[panels], DType::Q4_K), 2);
  EXPECT_EQ(MinRows(GemmForms()[panels], DType::Q4_0), 2);
  EXPECT_EQ(MinRows(GemmForms()[panels], DType::Q6_K), 6);
  EXPECT_EQ(MinRows(GemmForms()[panels], DType::F16), 6);
  const int64_t n = 37, k = 512;
  for (DType wt : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    Graph g;
    Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("m"), Expr(k)})};
    Tensor w{&g, g.Weight("w", wt, {Expr(n), Expr(k)})};
    g.MarkOutput(Linear(x, w).id(), "y");
    auto prog = Program::Compile(g);
    const HostTensor weights = testing::RandomTensors(g, Op::Weight, {}, 3).at("w");
    prog->BindWeight("w", weights);
    for (int64_t m : {1, 2, 5, 6, 70, 130}) {
      int want = 0;
      if (IsQuantized(wt))
        for (int f : {rounded, q8k, int8_avx2})
          if (want == 0 && GemmForms()[f].offered(wt, k)) want = f;
      if (m >= MinRows(GemmForms()[panels], wt) && GemmForms()[panels].offered(wt, k))
        want = GemmForms()[q8k_panels].offered(wt, k) ? q8k_panels : panels;  // Q4_K, Q6_K: rounded per 256
      // Without AVX-512: the slices from 16 rows of quantized weights (f16's rows form stays ahead), but for
      // Q8_0, Q4_0, Q4_K and Q6_K at every row count: their int8 tiles.
      if (m >= 16 && wt != DType::F16 && GemmForms()[slices].offered(wt, k)) want = slices;
      // With AMX: its int8 tiles for Q8_0 and Q4_0 from 32 rows.
      if (m >= 32 && (wt == DType::Q8_0 || wt == DType::Q4_0) && GemmForms()[amx].offered(wt, k)) want = amx;
      if (GemmForms()[int8_avx2].offered(wt, k)) want = int8_avx2;
      const std::string what = std::string(DTypeName(wt)) + " m=" + std::to_string(m);
      for (size_t kk = 0; kk < prog->kernels().kernels.size(); ++kk) {
        if (prog->kernels().kernels[kk].gemm) {
          EXPECT_EQ(prog->DefaultChoice(kk, {{"m", m}}).form, want) << what;
        }
      }
      auto a = testing::RandomFloats(m * k, 7 + m);
      HostTensor in = HostTensor::FromFloats({m, k}, a, DType::F32);
      const HostTensor y = prog->Run({{"x", in}}, {}).at(0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const Exact e = ExactDot(a.data(), k, weights.data, wt, i, j);
          const double bound = GemmForms()[want].error_bound
                                   ? GemmForms()[want].error_bound(a.data() + i * k, weights.data, wt, k, j)
                                   : 0;
          ASSERT_LE(std::fabs(y.At(i * n + j) - e.sum), bound * 1.01 + 1e-5 * e.magnitude)
              << what << " at " << i << "," << j;
        }
    }
    // CompileOptions::exact: the rows form, even where a decision loaded for the kernel rounds.
    CompileOptions exact;
    exact.exact = true;
    auto precise = Program::Compile(g, exact);
    for (size_t kk = 0; kk < precise->kernels().kernels.size(); ++kk) {
      if (precise->kernels().kernels[kk].gemm) {
        EXPECT_EQ(precise->DefaultChoice(kk, {{"m", 70}}).form, 0) << DTypeName(wt);
      }
    }
    ForceForm(precise.get(), IsQuantized(wt) ? panels : 0, 2);
    testing::CheckExecutable(*precise, {{{"m", 1}}, {{"m", 70}}}, 1e-4, 1e-4, 5, false,
                             "exact " + std::string(DTypeName(wt)));
  }
}

// A decision naming a form this CPU does not offer for the weights (a tuning database or artifact written
// where the table offered it) runs the form the product takes unsearched, not the exact rows form: a Q4_K
// product decided as q8k, once the q8k form left AVX512-VNNI's table, had run at a sixth of its speed.
TEST(Gemm, ADecidedFormThisCpuDoesNotOfferGivesWayToTheUnsearchedOne) {
  const int dot_panels = GemmFormIndex("dot-panels");  // bf16 weights only
  for (DType wt : {DType::Q4_K, DType::Q8_0, DType::F32}) {
    Graph g;
    Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("m"), Expr(256)})};
    Tensor w{&g, g.Weight("w", wt, {Expr(40), Expr(256)})};
    g.MarkOutput(Linear(x, w).id(), "y");
    auto prog = Program::Compile(g);
    ASSERT_FALSE(GemmForms()[dot_panels].offered(wt, 256));
    for (auto& [name, t] : testing::RandomTensors(g, Op::Weight, {}, 3)) prog->BindWeight(name, t);
    ForceForm(prog.get(), dot_panels, 1);
    for (int64_t m : {1, 16}) {
      HostTensor in = HostTensor::FromFloats({m, 256}, testing::RandomFloats(m * 256, 4), DType::F32);
      prog->Run({{"x", in}}, {});
      int gemms = 0;
      for (size_t k = 0; k < prog->kernels().kernels.size(); ++k) {
        if (!prog->kernels().kernels[k].gemm) continue;
        ++gemms;
        EXPECT_EQ(prog->RanForm(k), prog->DefaultChoice(k, {{"m", m}}).form) << DTypeName(wt) << " m=" << m;
      }
      EXPECT_EQ(gemms, 1);
    }
  }
}

// An expert GEMM takes its unsearched form by the rows each slab meets (about m / experts), not by m: in
// decode a token's two rows go to two slabs, one row each, where the panels would read a third more bytes
// than the rows they compute need.
TEST(Gemm, ExpertGemmsTakeTheirFormByTheRowsEachSlabMeets) {
  const int rounded = GemmFormIndex("rounded"), panels = GemmFormIndex("panels");
  if (!GemmForms()[rounded].offered(DType::Q4_K, 256) || !GemmForms()[panels].offered(DType::Q4_K, 256))
    GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  Graph g;
  const Expr m = Expr::Sym("m");
  Tensor x{&g, g.Input("x", DType::F32, {m, Expr(256)})}, e{&g, g.Input("e", DType::I32, {m})};
  Tensor w{&g, g.Weight("w", DType::Q4_K, {Expr(8), Expr(40), Expr(256)})};
  g.MarkOutput(ExpertLinear(x, w, e).id(), "y");
  auto prog = Program::Compile(g);
  int gemms = 0;
  for (size_t kk = 0; kk < prog->kernels().kernels.size(); ++kk) {
    if (!prog->kernels().kernels[kk].gemm) continue;
    ++gemms;
    EXPECT_EQ(prog->DefaultChoice(kk, {{"m", 2}}).form, rounded) << "decode: one row per slab";
    EXPECT_EQ(prog->DefaultChoice(kk, {{"m", 32}}).form, GemmFormIndex("q8k-panels")) << "4 rows per slab";
  }
  EXPECT_EQ(gemms, 1);
}

// A residual add and a SiLU-gated product run as the epilogues of the GEMMs that feed them, in every
// template form and split, and give the interpreter's results; a product read twice keeps its buffer.
TEST(Gemm, ResidualAndGatedProductRunAsTheTemplatesEpilogue) {
  for (DType wt : {DType::F32, DType::BF16, DType::Q8_0}) {
    Graph g;
    const Expr m = Expr::Sym("m");
    Tensor x{&g, g.Input("x", DType::F32, {m, Expr(64)})}, r{&g, g.Input("r", DType::F32, {m, Expr(96)})};
    Tensor wo{&g, g.Weight("wo", wt, {Expr(96), Expr(64)})}, wg{&g, g.Weight("wg", wt, {Expr(96), Expr(64)})};
    Tensor wu{&g, g.Weight("wu", wt, {Expr(96), Expr(64)})}, wv{&g, g.Weight("wv", wt, {Expr(96), Expr(64)})};
    g.MarkOutput((r + Linear(x, wo)).id(), "residual");
    g.MarkOutput((Silu(Linear(x, wg)) * Linear(x, wu)).id(), "gated");
    Tensor v = Linear(x, wv);  // read twice: no epilogue
    g.MarkOutput((v + v * v).id(), "twice");
    KernelProgram kp = BuildKernelProgram(g, CompileOptions{}.fusion);
    int epilogues = 0, gemms = 0;
    for (const Kernel& k : kp.kernels) {
      gemms += k.gemm.has_value();
      epilogues += k.gemm && k.gemm->epilogue;
    }
    EXPECT_EQ(gemms, 4) << DTypeName(wt);
    EXPECT_EQ(epilogues, 2) << DTypeName(wt) << ": the residual add and the gated product";
    for (int threads : {1, 2}) {
      // The same plan without epilogues: its GEMMs round exactly as the fused ones, so every form must
      // give the same results through either plan; exact forms must also give the interpreter's.
      CompileOptions fused, unfused;
      fused.threads = unfused.threads = threads;
      unfused.fusion.gemm_epilogues = false;
      auto prog = Program::Compile(g, fused), plain = Program::Compile(g, unfused);
      for (int form = 0; form < (int)GemmForms().size(); ++form) {  // every form in the table
        if (!GemmForms()[form].offered(wt, 64)) continue;  // (one not offered runs the unsearched form)
        for (Program* p : {prog.get(), plain.get()}) ForceForm(p, form, threads);
        const bool exact = !GemmForms()[form].rounds || !GemmForms()[form].rounds(wt);
        const std::string what = std::string(DTypeName(wt)) + " form " + GemmForms()[form].name +
                                 " threads " + std::to_string(threads);
        for (int64_t rows : {1, 37}) {
          const SymbolBindings b{{"m", rows}};
          Interpreter interp(g);
          for (auto& [name, t] : testing::RandomTensors(g, Op::Weight, b, 40)) {
            interp.BindWeight(name, t);
            prog->BindWeight(name, t);
            plain->BindWeight(name, t);
          }
          const auto in = testing::RandomTensors(g, Op::Input, b, 41);
          const auto got = prog->Run(in, b);
          testing::ExpectClose(plain->Run(in, b), got, 1e-5, 1e-5, what + " against the unfused plan");
          if (exact)
            testing::ExpectClose(interp.Run(in, b), got, 1e-4, 1e-4, what + " against the interpreter");
        }
      }
    }
  }
}

}  // namespace prism
