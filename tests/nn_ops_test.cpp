// High-level ops (compositions of primitives) in the reference interpreter against closed forms. Every
// op graph against the interpreter on every device is device_ops_test.cpp over op_graphs.h.
#include <gtest/gtest.h>

#include <cmath>

#include "frontend/nn.h"
#include "graph_check.h"
#include "test_util.h"

namespace prism {
namespace {
Expr S() { return Expr::Sym("seq"); }
Tensor In(Graph& g, const std::string& name, std::vector<Expr> shape, DType t = DType::F32) {
  return {&g, g.Input(name, t, std::move(shape))};
}
void Out(const Tensor& t, const std::string& name) { t.graph()->MarkOutput(t.id(), name); }

// Runs g in the interpreter with the given inputs and returns output k as floats.
std::vector<float> Interpret(const Graph& g, const std::map<std::string, HostTensor>& in, size_t k = 0) {
  Interpreter it(g);
  return it.Run(in)[k].ToFloats();
}
}  // namespace

TEST(NnOps, MatmulMatchesNaiveLoop) {
  Graph g;
  Tensor a = In(g, "a", {Expr(3), Expr(4)}), b = In(g, "b", {Expr(4), Expr(2)});
  Out(Matmul(a, b), "mm");
  auto av = testing::RandomFloats(12, 1), bv = testing::RandomFloats(8, 2);
  auto got =
      Interpret(g, {{"a", HostTensor::FromFloats({3, 4}, av)}, {"b", HostTensor::FromFloats({4, 2}, bv)}});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += (double)av[i * 4 + k] * bv[k * 2 + j];
      EXPECT_NEAR(got[i * 2 + j], s, 1e-6);
    }
}

TEST(NnOps, ActivationsMatchClosedForms) {
  Graph g;
  Tensor x = In(g, "x", {S()});
  Out(Silu(x), "silu");
  Out(GeluTanh(x), "gelu_tanh");
  Out(GeluErf(x), "gelu_erf");
  Out(x.tanh(), "tanh");
  Out(x.cos(), "cos");
  std::vector<float> xs = testing::RandomFloats(257, 3, -6, 6);
  Interpreter it(g);
  auto outs = it.Run({{"x", HostTensor::FromFloats({257}, xs)}});
  for (size_t i = 0; i < xs.size(); ++i) {
    double v = xs[i];
    EXPECT_NEAR(outs[0].At(i), v / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(outs[1].At(i), 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))),
                1e-5);
    EXPECT_NEAR(outs[2].At(i), 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
    EXPECT_NEAR(outs[3].At(i), std::tanh(v), 1e-6);
    EXPECT_NEAR(outs[4].At(i), std::cos(v), 1e-6);
  }
}

TEST(NnOps, RopeMatchesTheRotationClosedForm) {
  // Closed form for the half-split style at position p: pairs (j, j + 8) rotate by p * theta^(-2j/16).
  Graph h;
  Tensor hx = In(h, "x", {Expr(1), Expr(1), Expr(16)});
  Tensor hp = In(h, "pos", {Expr(1)}, DType::I32);
  Out(Rope(hx, hp, RopeInvFreq(&h, 16, 10000.0), RopeStyle::HalfSplit), "r");
  auto xv = testing::RandomFloats(16, 9);
  auto got =
      Interpret(h, {{"x", HostTensor::FromFloats({1, 1, 16}, xv)}, {"pos", HostTensor::FromInts({1}, {5})}});
  for (int j = 0; j < 8; ++j) {
    double ang = 5 * std::pow(10000.0, -2.0 * j / 16);
    EXPECT_NEAR(got[j], xv[j] * std::cos(ang) - xv[j + 8] * std::sin(ang), 1e-5);
    EXPECT_NEAR(got[j + 8], xv[j + 8] * std::cos(ang) + xv[j] * std::sin(ang), 1e-5);
  }
}

TEST(NnOps, AttentionMatchesNaiveSoftmaxForOneHead) {
  Graph g;
  Tensor q = In(g, "q", {Expr(3), Expr(1), Expr(2)}), k = In(g, "k", {Expr(3), Expr(1), Expr(2)});
  Tensor v = In(g, "v", {Expr(3), Expr(1), Expr(2)});
  Tensor kc{&g, g.State("kc", DType::F32, {Expr(1), Expr(4), Expr(2)})};
  Tensor vc{&g, g.State("vc", DType::F32, {Expr(1), Expr(4), Expr(2)})};
  Out(CausalAttention(q, k, v, kc, vc, Expr(0), 1.0), "o");
  auto qv = testing::RandomFloats(6, 1), kv = testing::RandomFloats(6, 2), vv = testing::RandomFloats(6, 3);
  auto got = Interpret(g, {{"q", HostTensor::FromFloats({3, 1, 2}, qv)},
                           {"k", HostTensor::FromFloats({3, 1, 2}, kv)},
                           {"v", HostTensor::FromFloats({3, 1, 2}, vv)}});
  for (int s = 0; s < 3; ++s) {
    std::vector<double> w(s + 1);
    double z = 0;
    for (int t = 0; t <= s; ++t)
      z += (w[t] = std::exp(qv[2 * s] * kv[2 * t] + qv[2 * s + 1] * kv[2 * t + 1]));
    for (int d = 0; d < 2; ++d) {
      double o = 0;
      for (int t = 0; t <= s; ++t) o += w[t] / z * vv[2 * t + d];
      EXPECT_NEAR(got[2 * s + d], o, 1e-6);
    }
  }
}

}  // namespace prism
