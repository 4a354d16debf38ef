// A language model's step graph on a GPU-style device: the device opened by name, weights uploaded.
#pragma once

#include <memory>
#include <string>

#include "backends/gpu/gpu_program.h"
#include "io/weights.h"

namespace prism {

// The devices a model can run on: "cpu" (runtime/Program), "opencl" and "cuda" (GpuProgram).
bool IsKnownDevice(const std::string& name);
// Opens "opencl" or "cuda"; throws prism::Error with one line saying why when it is absent
// (no driver, no platform, no GPU) or the name is unknown.
std::shared_ptr<GpuDevice> OpenGpuDevice(const std::string& name);
// GEMMs with at least this many rows run on the tensor cores in a CUDA step (bf16 weights). On an
// H100 (1B shape) the tensor-core template lost at 16 and 32 rows and won from 64.
inline constexpr int64_t kStepMmaMinRows = 64;
// Compiles g for the device and uploads every weight it uses from store.
std::unique_ptr<GpuProgram> CompileGpuStep(const Graph& g, const WeightStore& store,
                                           std::shared_ptr<GpuDevice> device);

}  // namespace prism
