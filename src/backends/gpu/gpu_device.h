// What a GPU-style backend provides: memory, a compiler for its dialect, and kernel launches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/gpu_renderer.h"

namespace prism {

// A device allocation as an opaque handle (an OpenCL cl_mem or a CUDA device pointer).
using GpuMem = uint64_t;

// A kernel argument: a buffer or a 64-bit integer (symbol values).
struct GpuArg {
  bool is_buffer = false;
  GpuMem mem = 0;
  int64_t value = 0;
  static GpuArg Buffer(GpuMem m) { return {true, m, 0}; }
  static GpuArg Int(int64_t v) { return {false, 0, v}; }
};

// Compiled functions of one translation unit, addressed by their index in the list given to Compile.
class GpuModule {
 public:
  virtual ~GpuModule() = default;
};

// Every method throws prism::Error with the device's own error text on failure.
class GpuDevice {
 public:
  virtual ~GpuDevice() = default;
  virtual std::string name() const = 0;
  virtual GpuDialect dialect() const = 0;
  virtual int max_threads_per_group() const = 0;

  virtual GpuMem Alloc(size_t bytes) = 0;  // zero-filled; bytes may be 0
  virtual void Free(GpuMem m) = 0;
  virtual void Upload(GpuMem dst, const void* src, size_t bytes) = 0;
  virtual void Download(void* dst, GpuMem src, size_t bytes) = 0;

  // Compiles source in the device's dialect; the error names the build log.
  virtual std::unique_ptr<GpuModule> Compile(const std::string& source,
                                             const std::vector<std::string>& functions) = 0;
  // Enqueues functions[function] on groups x threads work-items; launches run in order.
  virtual void Launch(GpuModule& module, int function, const std::vector<GpuArg>& args, int64_t groups,
                      int threads) = 0;
  virtual void Finish() = 0;  // waits for everything enqueued
};

}  // namespace prism
