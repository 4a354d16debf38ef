// Test helper: runs a graph through the reference interpreter and a compiled executable and compares.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "backends/cpu/program.h"
#include "ir/error.h"
#include "ir/interpreter.h"
#include "test_util.h"

namespace prism::testing {

// Random values for every Input and Weight of g (never all zeros): floats in [-2, 2), integer
// inputs in [0, int_limit). Symbols bind from `syms`.
inline std::map<std::string, HostTensor> RandomTensors(const Graph& g, Op kind, const SymbolBindings& syms,
                                                       uint64_t seed, int64_t int_limit = 8) {
  std::map<std::string, HostTensor> out;
  std::mt19937_64 rng(seed);
  for (const Node& n : g.nodes()) {
    if (n.op != kind || out.count(n.name)) continue;
    std::vector<int64_t> shape = EvalShape(n.shape, syms);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (IsQuantized(n.dtype) && n.dtype != DType::Q8_0 && n.dtype != DType::Q4_0) {
      out[n.name] = RandomBlocks(n.dtype, shape, rng());
    } else if (IsFloat(n.dtype)) {
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      std::vector<float> v(numel);
      for (auto& x : v) x = dist(rng);
      out[n.name] = HostTensor::FromFloats(shape, v, n.dtype);
    } else {
      std::uniform_int_distribution<int64_t> dist(0, std::max<int64_t>(int_limit - 1, 0));
      HostTensor t = HostTensor::Zeros(n.dtype, shape);
      for (int64_t i = 0; i < numel; ++i) StoreFromDouble(t.data, n.dtype, i, (double)dist(rng));
      out[n.name] = t;
    }
  }
  return out;
}

struct CheckResult {
  double max_abs_err = 0;
  double max_ref = 0;
};

// Compares program outputs with the interpreter's: |got - want| <= atol + rtol * |want|.
// NaN or infinity in one but not the other always fails.
inline CheckResult ExpectClose(const std::vector<HostTensor>& want, const std::vector<HostTensor>& got,
                               double atol, double rtol, const std::string& what) {
  CheckResult r;
  EXPECT_EQ(want.size(), got.size()) << what;
  for (size_t o = 0; o < want.size() && o < got.size(); ++o) {
    EXPECT_EQ(want[o].shape, got[o].shape) << what << " output " << o;
    if (want[o].shape != got[o].shape) continue;
    int reported = 0;
    for (int64_t i = 0; i < want[o].numel(); ++i) {
      double w = want[o].At(i), gv = got[o].At(i);
      bool bad;
      if (std::isnan(w) || std::isnan(gv))
        bad = true;  // NaN never passes
      else if (std::isinf(w) || std::isinf(gv))
        bad = w != gv;
      else {
        r.max_abs_err = std::max(r.max_abs_err, std::fabs(w - gv));
        r.max_ref = std::max(r.max_ref, std::fabs(w));
        bad = std::fabs(w - gv) > atol + rtol * std::fabs(w);
      }
      if (bad && reported++ < 3)
        ADD_FAILURE() << what << ": output " << o << " element " << i << " expected " << w << " got " << gv;
    }
  }
  return r;
}

// Compares every binding of a compiled executable (any device) with the interpreter on random data (weights
// from seed + 1000, inputs from seed). stateful: bindings are successive steps of one program (state carries
// over); otherwise state is reset before each. Returns the runs compared.
inline int CheckExecutable(Executable& exe, const std::vector<SymbolBindings>& bindings, double atol,
                           double rtol, uint64_t seed, bool stateful, const std::string& what) {
  const Graph& g = exe.graph();
  Interpreter interp(g);
  int runs = 0;
  for (size_t i = 0; i < bindings.size(); ++i) {
    const SymbolBindings& b = bindings[i];
    if (!stateful) {
      interp.ResetState();
      exe.ResetState();
    }
    auto weights = RandomTensors(g, Op::Weight, b, seed + 1000);
    for (auto& [name, t] : weights) {
      interp.BindWeight(name, t);
      exe.BindWeight(name, t);
    }
    auto inputs = RandomTensors(g, Op::Input, b, stateful ? seed + 7 * i : seed);
    auto want = interp.Run(inputs, b);
    auto got = exe.Run(inputs, b);
    std::string desc = what + " on " + exe.device();
    for (auto& [k, v] : b) desc += " " + k + "=" + std::to_string(v);
    ExpectClose(want, got, atol, rtol, desc);
    ++runs;
  }
  return runs;
}

// Compiles g once for the CPU and checks it against the interpreter for every binding in `bindings`.
inline void CheckGraph(const Graph& g, const std::vector<SymbolBindings>& bindings, double atol = 1e-4,
                       double rtol = 1e-4, uint64_t seed = 1, const std::string& what = "graph") {
  auto prog = Program::Compile(g);
  CheckExecutable(*prog, bindings, atol, rtol, seed, false, what);
}

}  // namespace prism::testing
