// An NVIDIA GPU through the CUDA driver API, loaded at run time (libcuda.so.1 via dlopen).
//
// UNEXERCISED: no GPU exists where this was written or in CI. Everything here compiles and the
// "no driver / no GPU" paths run in every test; the launch path below runs only where
// tests/cuda_test.cpp finds a GPU (it skips otherwise). Kernels themselves are checked in CI by
// compiling every one through NVRTC.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backends/cuda/cublas_loader.h"
#include "backends/gpu/gpu_device.h"

namespace prism {

class CudaDevice : public GpuDevice {
 public:
  // Opens GPU `ordinal`; throws prism::Error starting "no CUDA driver/GPU found" when libcuda
  // is missing, cuInit fails or there is no device. Never crashes on a machine without CUDA.
  static std::shared_ptr<CudaDevice> Open(int ordinal = 0);
  static bool Available(std::string* why = nullptr);
  ~CudaDevice() override;

  std::string name() const override;
  GpuDialect dialect() const override { return GpuDialect::Cuda; }
  int max_threads_per_group() const override;
  std::string arch() const;  // "sm_90": what kernels are compiled for

  GpuMem Alloc(size_t bytes) override;
  void Free(GpuMem m) override;
  void UploadAt(GpuMem dst, size_t offset, const void* src, size_t bytes) override;
  void DownloadAt(void* dst, GpuMem src, size_t offset, size_t bytes) override;
  std::unique_ptr<GpuModule> Compile(const std::string& source,
                                     const std::vector<std::string>& functions) override;
  void Launch(GpuModule& module, int function, const std::vector<GpuArg>& args, int64_t groups,
              int threads) override;
  void Finish() override;
  // A CUDA graph built node by node (see cuda_device.cpp for why not by stream capture).
  std::unique_ptr<GpuLaunchGraph> RecordGraph(GpuModule& module,
                                              const std::vector<GpuLaunchParams>& launches) override;

  // cuBLAS (backends/cuda/cublas_loader.h, loaded on first use; its handle works on this device's
  // stream): f32 weights as an f32 GEMM, bf16/f16 weights after converting the activations to the
  // weight's dtype (a kernel of this device into a scratch buffer it keeps), f32 accumulation and
  // output. Unavailable, with the reason, where libcublas is missing or its handle cannot be made.
  bool LibraryGemmAvailable(DType w_dtype, std::string* why) const override;
  void LibraryGemm(const GpuLibraryGemm& g) override;
  double LibraryGemmErrorBound(DType w_dtype, const float* a_row, const void* w_row,
                               int64_t k) const override {
    return CublasGemmErrorBound(w_dtype, a_row, w_row, k);
  }

  // Milliseconds the launches enqueued by `work` take on the GPU (CUDA events around them).
  double TimeMs(const std::function<void()>& work) override;
  bool device_timer() const override { return true; }

  // A CUDA graph: the launches `work` enqueues, captured once from the stream and replayed with
  // one call. Arguments are frozen at capture time (same buffers, same symbol values).
  class CapturedGraph {
   public:
    ~CapturedGraph();
    void Replay();  // enqueues the whole graph; Finish() waits for it
   private:
    friend class CudaDevice;
    CudaDevice* dev_ = nullptr;
    void* graph_ = nullptr;
    void* exec_ = nullptr;
  };
  std::unique_ptr<CapturedGraph> Capture(const std::function<void()>& work);

  struct Impl;

 private:
  explicit CudaDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism
