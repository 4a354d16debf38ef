// The template GEMM tier against the reference interpreter, for every weight dtype and odd sizes.
#include <gtest/gtest.h>

#include "backends/cpu/gemm.h"
#include "frontend/nn.h"
#include "graph_check.h"
#include "test_util.h"

namespace prism {

TEST(Gemm, LinearWithEveryWeightDtypeMatchesInterpreter) {
  struct Case {
    DType dtype;
    int64_t n, k;
    double tol;
  };
  for (Case c : {Case{DType::F32, 33, 17, 1e-4}, Case{DType::F16, 5, 40, 1e-3}, Case{DType::BF16, 7, 200, 1e-3},
                 Case{DType::Q8_0, 9, 64, 1e-3}, Case{DType::Q4_0, 33, 96, 1e-3}, Case{DType::F32, 1, 1, 1e-5}}) {
    Graph g;
    Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("m"), Expr(c.k)})};
    Tensor w{&g, g.Weight("w", c.dtype, {Expr(c.n), Expr(c.k)})};
    g.MarkOutput(Linear(x, w).id(), "y");
    KernelProgram kp = BuildKernelProgram(g);
    bool has_template = false;
    for (const Kernel& k : kp.kernels) has_template = has_template || k.gemm.has_value();
    EXPECT_TRUE(has_template) << "x · Wᵀ with a " << DTypeName(c.dtype) << " weight did not match the template";
    testing::CheckGraph(g, {{{"m", 1}}, {{"m", 3}}, {{"m", 70}}}, c.tol, c.tol, 7,
                        std::string("gemm ") + std::string(DTypeName(c.dtype)));
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

}  // namespace prism
