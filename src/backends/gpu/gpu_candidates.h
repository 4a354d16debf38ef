// The schedules a GPU-style device can run a kernel with: the renderer's, and hand-written or library ones.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backends/gpu/gpu_device.h"
#include "codegen/gpu_renderer.h"
#include "compiler/kernel_ir.h"

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
  // Extra error allowed at an output element beyond the exact tolerance (e.g. from rounding
  // activations to bf16), given the host copies of every buffer; null: none.
  std::function<double(const std::vector<void*>& host, int64_t out_index)> error_bound;
};

// The renderer's schedules worth trying for kernel k on dev: threads per group x cooperative
// reduction or not (for kernels with a reduction), named "coop/128", "thread/64", ...; on CUDA,
// for f32 x bf16 template GEMMs, also the tensor-core template ("mma-bf16"). Hand-written
// candidates with the same function name share one copy of it in the search's build. For template
// GEMMs with f32 activations, also the device's GEMM library ("cublas" on CUDA) when it takes the
// weight's dtype; where it does not, *not_offered (when given) gets "cublas: <reason>".
std::vector<GpuCandidate> GpuScheduleCandidates(const KernelProgram& p, size_t k, const GpuDevice& dev,
                                                std::vector<std::string>* not_offered = nullptr);

}  // namespace prism
