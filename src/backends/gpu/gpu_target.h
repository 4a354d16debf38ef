// A GPU-style device of the registry (OpenCL, CUDA): graphs compiled into GpuPrograms on it.
#pragma once

#include <memory>

#include "backends/device.h"
#include "backends/gpu/gpu_device.h"

namespace prism {

class GpuTarget : public Device {
 public:
  explicit GpuTarget(std::shared_ptr<GpuDevice> gpu) : gpu_(std::move(gpu)) {}
  std::string name() const override;  // "cuda" or "opencl", by dialect
  // On CUDA, GEMMs with bf16 weights and at least kStepMmaMinRows rows run on the tensor cores
  // ($PRISM_MMA_MIN_ROWS moves the threshold, for measuring it; 0 turns the tensor cores off).
  std::unique_ptr<Executable> Compile(const Graph& g, const CompileRequest& req = {}) override;
  const std::shared_ptr<GpuDevice>& gpu() const { return gpu_; }

 private:
  std::shared_ptr<GpuDevice> gpu_;
};

}  // namespace prism
