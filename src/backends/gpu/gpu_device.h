// What a GPU-style backend provides: memory, a compiler for its dialect, and kernel launches.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/gpu_renderer.h"
#include "ir/error.h"

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

// One kernel launch: functions[function] of a module on groups x threads work-items.
struct GpuLaunchParams {
  int function = 0;
  std::vector<GpuArg> args;
  int64_t groups = 0;
  int threads = 0;
  bool operator==(const GpuLaunchParams& o) const {
    if (function != o.function || groups != o.groups || threads != o.threads || args.size() != o.args.size())
      return false;
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].is_buffer != o.args[i].is_buffer || args[i].mem != o.args[i].mem ||
          args[i].value != o.args[i].value)
        return false;
    return true;
  }
};

// A GEMM by the device's vendor library (cuBLAS on CUDA): out[m, n] = sum_k a[m, k] * w[n, k] for
// a f32 [M, K], w [N, K] of w_dtype, out f32 [M, N], all row-major and contiguous.
struct GpuLibraryGemm {
  GpuMem out = 0, a = 0, w = 0;
  DType w_dtype = DType::F32;
  int64_t m = 0, n = 0, k = 0;
};

// A fixed sequence of launches recorded once and replayed with one call (a CUDA graph). Each
// launch keeps its function; its arguments and grid may change between replays through Set.
class GpuLaunchGraph {
 public:
  virtual ~GpuLaunchGraph() = default;
  virtual size_t size() const = 0;
  // Launch i of the next replays runs with p (same function as recorded); a no-op when unchanged.
  virtual void Set(size_t i, const GpuLaunchParams& p) = 0;
  virtual void Replay() = 0;  // enqueues every launch in order; Finish() waits for them
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
  // Copies to and from device memory, from its start or `offset` bytes into it.
  virtual void UploadAt(GpuMem dst, size_t offset, const void* src, size_t bytes) = 0;
  virtual void DownloadAt(void* dst, GpuMem src, size_t offset, size_t bytes) = 0;
  void Upload(GpuMem dst, const void* src, size_t bytes) { UploadAt(dst, 0, src, bytes); }
  void Download(void* dst, GpuMem src, size_t bytes) { DownloadAt(dst, src, 0, bytes); }

  // Compiles source in the device's dialect; the error names the build log.
  virtual std::unique_ptr<GpuModule> Compile(const std::string& source,
                                             const std::vector<std::string>& functions) = 0;
  // Enqueues functions[function] on groups x threads work-items; launches run in order.
  virtual void Launch(GpuModule& module, int function, const std::vector<GpuArg>& args, int64_t groups,
                      int threads) = 0;
  virtual void Finish() = 0;  // waits for everything enqueued
  // Milliseconds the launches enqueued by `work` take on the device, from the device's own timer
  // (CUDA events, OpenCL event profiling). This fallback, for devices without one, times work()
  // plus Finish() on the host clock.
  virtual double TimeMs(const std::function<void()>& work) {
    Finish();
    auto t0 = std::chrono::steady_clock::now();
    work();
    Finish();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  virtual bool device_timer() const { return false; }  // TimeMs reads a device-side clock
  // Whether LibraryGemm takes weights of this dtype here; false with a one-line reason otherwise.
  virtual bool LibraryGemmAvailable(DType /*w_dtype*/, std::string* why) const {
    if (why) *why = "no GEMM library on " + name();
    return false;
  }
  // Enqueues g after the launches before it (and before those after it).
  virtual void LibraryGemm(const GpuLibraryGemm& /*g*/) { throw Error("no GEMM library on " + name()); }
  // The most the library's rounding of a row of activations (w_row: the weight's row of one output) can
  // move that output, for the search's check (0: it rounds nothing).
  virtual double LibraryGemmErrorBound(DType /*w_dtype*/, const float* /*a_row*/, const void* /*w_row*/,
                                       int64_t /*k*/) const {
    return 0;
  }
  // Records launches (in order, each after the previous) for replay, or returns null where the
  // device has no such facility (OpenCL): callers then launch one by one.
  virtual std::unique_ptr<GpuLaunchGraph> RecordGraph(GpuModule& /*module*/,
                                                      const std::vector<GpuLaunchParams>& /*launches*/) {
    return nullptr;
  }
};

}  // namespace prism
