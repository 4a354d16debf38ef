// GPU schedule search: per kernel, candidate schedules checked against the reference and timed on the device.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/gpu/gpu_device.h"
#include "backends/gpu/gpu_program.h"
#include "compiler/kernel_ir.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace prism {

// One way to run a kernel: a schedule of the renderer, or a hand-written function (`source`,
// entry points `functions`) launched by `launch`. Launch arguments follow the renderer's
// convention: mems holds a device buffer per KernelProgram buffer, syms every symbol's value.
struct GpuCandidate {
  std::string name;
  bool rendered = true;  // true: `schedule` through GpuRenderer; false: source + launch
  GpuSchedule schedule;
  std::string source;
  std::vector<std::string> functions;
  std::function<void(GpuDevice& dev, GpuModule& module, int first_function, const std::vector<GpuMem>& mems,
                     const SymbolBindings& syms)>
      launch;
  // Extra error allowed at an output element beyond the exact tiers' tolerance (e.g. from rounding
  // activations to bf16), given the host copies of every buffer; null: none.
  std::function<double(const std::vector<void*>& host, int64_t out_index)> error_bound;
};

// The renderer's schedules worth trying for kernel k on dev: threads per group x cooperative
// reduction or not (for kernels with a reduction), named "coop/128", "thread/64", ...; on CUDA,
// for f32 x bf16 template GEMMs, also the tensor-core template ("mma-bf16"). Hand-written
// candidates with the same function name share one copy of it in the search's build. On CUDA, for
// template GEMMs with f32 activations, also the device's GEMM library ("cublas", through
// GpuDevice::LibraryGemm) when it takes the weight's dtype; where it does not, *not_offered (when
// given) gets "cublas: <reason>".
std::vector<GpuCandidate> GpuScheduleCandidates(const KernelProgram& p, size_t k, const GpuDevice& dev,
                                                std::vector<std::string>* not_offered = nullptr);

struct GpuTuneOptions {
  SymbolBindings sizes;        // a value for every size symbol of the graph (the bucket searched)
  FusionOptions fusion;        // as the program will be compiled
  double budget_seconds = 60;  // kernels reached after it keep the default schedule
  int repeats = 7;             // timed runs per candidate, after one warm-up, in interleaved rounds
  int samples = 24;            // outputs checked per candidate
  uint64_t seed = 20261122;
  // Weights to search with (others, and every other buffer, get random non-zero values).
  std::map<std::string, HostTensor> weights;
  // More candidates for kernel k (hand-written kernels; tests add deliberately wrong ones).
  std::function<std::vector<GpuCandidate>(const KernelProgram&, size_t k)> extra;
};

struct GpuTuneResult {
  KernelProgram kernels;                // what was searched (BuildKernelProgram with opts.fusion)
  std::vector<GpuSchedule> per_kernel;  // fastest passing rendered schedule (default where none):
                                        // for GpuCompileOptions::per_kernel
  std::vector<std::string> chosen;      // per kernel, the fastest passing candidate of any kind ("" none)
  std::vector<bool> mma_gemm;           // per kernel: "mma-bf16" was chosen (GpuCompileOptions::mma_gemm)
  std::vector<bool> library_gemm;       // per kernel: "cublas" was chosen (GpuCompileOptions::library_gemm)
  nlohmann::json receipts = nlohmann::json::array();  // one per kernel
};

// Checks every candidate's sampled outputs against EvalKernelElement (tolerance 2e-3 of the
// samples' largest magnitude, plus one unit of rounding of the output's dtype), then times the
// passing ones with dev.TimeMs (median of opts.repeats) and picks the fastest. Throws prism::Error
// when a size symbol has no value.
GpuTuneResult SearchGpuSchedules(const Graph& g, GpuDevice& dev, const GpuTuneOptions& opts);

}  // namespace prism
