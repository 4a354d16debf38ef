// An OpenCL device (the first device of the first platform; PoCL runs it on any CPU).
#pragma once

#include <memory>
#include <string>

#include "backends/gpu/gpu_device.h"

namespace prism {

// libOpenCL is loaded at run time (dlopen of libOpenCL.so.1), so binaries run without it; when
// it or a platform is missing, Open throws prism::Error starting "no OpenCL platform found".
// Programs build with -cl-std=CL1.2 plus PRISM_OPENCL_OPTIONS (e.g. "-cl-opt-disable").
class OpenClDevice : public GpuDevice {
 public:
  static std::shared_ptr<OpenClDevice> Open();
  // True when Open would succeed; otherwise false with the reason in *why.
  static bool Available(std::string* why = nullptr);
  ~OpenClDevice() override;

  std::string name() const override;
  GpuDialect dialect() const override { return GpuDialect::OpenCL; }
  int max_threads_per_group() const override;
  GpuMem Alloc(size_t bytes) override;
  void Free(GpuMem m) override;
  void UploadAt(GpuMem dst, size_t offset, const void* src, size_t bytes) override;
  void DownloadAt(void* dst, GpuMem src, size_t offset, size_t bytes) override;
  std::unique_ptr<GpuModule> Compile(const std::string& source,
                                     const std::vector<std::string>& functions) override;
  void Launch(GpuModule& module, int function, const std::vector<GpuArg>& args, int64_t groups,
              int threads) override;
  void Finish() override;
  // From the profiling timestamps of the kernels `work` launches: first start to last end.
  double TimeMs(const std::function<void()>& work) override;
  bool device_timer() const override { return true; }

  struct Impl;

 private:
  explicit OpenClDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism
