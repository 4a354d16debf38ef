// Test helper: runs a graph on a GPU-style device (OpenCL, CUDA) and against the interpreter.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/gpu/gpu_program.h"
#include "graph_check.h"
#include "search/schedule_search.h"

namespace prism::testing {

struct GpuCheckStats {
  int kernels = 0;
  int cooperative = 0;
  int runs = 0;
};

// A search of one bucket at these sizes, named as a step at them picks its choices (BucketOf), with no
// tuning database and budget enough for every kernel.
inline SearchOptions OneBucketSearch(const SymbolBindings& sizes) {
  SearchOptions o;
  o.buckets = {{BucketOf(sizes, std::set<std::string>{}), sizes}};
  o.budget_seconds = 600;
  return o;
}

// Compares every binding of a compiled program with the interpreter, using the same random
// data as CheckGraph. stateful: bindings are successive steps of one program (state carries over).
inline GpuCheckStats CheckGpuProgram(GpuProgram& prog, const std::vector<SymbolBindings>& bindings,
                                     double atol, double rtol, uint64_t seed, bool stateful,
                                     const std::string& what) {
  GpuCheckStats st;
  st.kernels = prog.stats().kernels;
  st.cooperative = prog.stats().cooperative;
  st.runs = CheckExecutable(prog, bindings, atol, rtol, seed, stateful, what);
  return st;
}

inline GpuCheckStats CheckGpuGraph(const Graph& g, const std::vector<SymbolBindings>& bindings,
                                   const std::shared_ptr<GpuDevice>& device, const GpuCompileOptions& opts,
                                   double atol, double rtol, uint64_t seed, bool stateful,
                                   const std::string& what) {
  auto prog = GpuProgram::Compile(g, device, opts);
  return CheckGpuProgram(*prog, bindings, atol, rtol, seed, stateful, what);
}

}  // namespace prism::testing
