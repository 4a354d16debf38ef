// Every op graph of the catalog (op_graphs.h) on every registered device, against the reference
// interpreter: a new op case or a new device is covered by adding it in one place.
#include <gtest/gtest.h>

#include <locale>
#include <tuple>

#include "backends/device.h"
#include "graph_check.h"
#include "op_graphs.h"

namespace prism {
namespace {

using Param = std::tuple<std::string, std::string>;  // device, op case

class DeviceOps : public ::testing::TestWithParam<Param> {};

TEST_P(DeviceOps, MatchInterpreter) {
  const auto& [device_name, case_name] = GetParam();
  std::shared_ptr<Device> device;
  try {
    device = OpenDevice(device_name);
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();  // absent here (no CUDA driver or GPU): a one-line reason
  }
  for (const testing::OpGraphCase& c : testing::OpGraphCases()) {
    if (c.name != case_name) continue;
    Graph g;
    c.build(g);
    // Quantized products in f32 (a fixed tolerance cannot bound the int8 forms' rounding where sums
    // cancel: gemm_test holds those to their per-output bounds).
    CompileRequest req;
    req.exact = true;
    std::unique_ptr<Executable> exe = device->Compile(g, req);
    EXPECT_EQ(exe->device(), device_name);
    EXPECT_GT(exe->kernel_count(), 0u);
    EXPECT_EQ(testing::CheckExecutable(*exe, c.bindings, c.atol, c.rtol, 1, c.stateful, c.name),
              (int)c.bindings.size());
    return;
  }
  FAIL() << "no op case " << case_name;
}

std::vector<Param> AllPairs() {
  std::vector<Param> pairs;
  // The simulated systolic system ("systolic") rounds its products' operands to bf16, which no fixed
  // tolerance bounds where sums cancel: here it runs as systolic:quad-f32 (the same system with f32
  // products), and systolic_test checks its bf16 kernels against the reference within rigorous bounds.
  for (const std::string& d : DeviceNames())
    for (const testing::OpGraphCase& c : testing::OpGraphCases())
      pairs.emplace_back(d == "systolic" ? "systolic:quad-f32" : d, c.name);
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(All, DeviceOps, ::testing::ValuesIn(AllPairs()), [](const auto& info) {
  std::string device = std::get<0>(info.param);
  for (char& ch : device)
    if (!std::isalnum((unsigned char)ch)) ch = '_';
  return device + "_" + std::get<1>(info.param);
});

// A program that embeds Prism may set the global C++ locale. Kernels generated under one with a decimal
// comma and digit grouping (1,5 for 1.5; 1.200 for 1200) compute what they compute under "C": the source
// spells its numbers the same either way.
TEST(DeviceRegistry, KernelsIgnoreTheHostProgramsLocale) {
  struct CommaDecimals : std::numpunct<char> {
    char do_decimal_point() const override { return ','; }
    char do_thousands_sep() const override { return '.'; }
    std::string do_grouping() const override { return "\3"; }
  };
  struct Restore {
    std::locale before;
    ~Restore() { std::locale::global(before); }
  } restore{std::locale::global(std::locale(std::locale::classic(), new CommaDecimals))};
  Graph g;
  const std::vector<Expr> shape = {Expr(1200), Expr::Sym("n")};
  NodeId x = g.Input("x", DType::F32, shape);
  NodeId y = g.Binary(Op::Add, g.Binary(Op::Mul, x, g.Constant(1.5, DType::F32, shape)),
                      g.Constant(-2.25, DType::F32, shape));
  g.MarkOutput(y, "y");
  g.MarkOutput(g.Reduce(Op::SumReduce, y, {0}), "sum");
  for (const std::string& d : DeviceNames()) {
    std::shared_ptr<Device> device;
    try {
      device = OpenDevice(d == "systolic" ? "systolic:quad-f32" : d);
    } catch (const Error&) {
      continue;  // absent here
    }
    std::unique_ptr<Executable> exe = device->Compile(g);
    testing::CheckExecutable(*exe, {{{"n", 3}}, {{"n", 1001}}}, 1e-3, 1e-5, 5, false, "locale");
  }
}

TEST(DeviceRegistry, NamesEveryDeviceAndRejectsUnknownOnesInOneLine) {
  const std::vector<std::string> names = DeviceNames();
  for (const char* want : {"cpu", "opencl", "cuda", "interp", "systolic"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  try {
    OpenDevice("tpu");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown device 'tpu'"), std::string::npos) << m;
    for (const std::string& n : names) EXPECT_NE(m.find(n), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(OpenDevice("cpu")->name(), "cpu");
  EXPECT_EQ(OpenDevice("interp")->name(), "interp");
}

}  // namespace
}  // namespace prism
