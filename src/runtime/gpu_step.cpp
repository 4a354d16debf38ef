// A language model's step graph on a GPU-style device: the device opened by name, weights uploaded.
#include "runtime/gpu_step.h"

#include <cstdlib>

#include "backends/cuda/cuda_device.h"
#include "backends/opencl/opencl_device.h"
#include "codegen/cuda_mma_gemm.h"
#include "ir/error.h"

namespace prism {

bool IsKnownDevice(const std::string& name) { return name == "cpu" || name == "opencl" || name == "cuda"; }

// Driver messages (dlerror text) can span lines; the command line prints errors as one.
static std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::shared_ptr<GpuDevice> OpenGpuDevice(const std::string& name) {
  try {
    if (name == "opencl") return OpenClDevice::Open();
    if (name == "cuda") return CudaDevice::Open();
  } catch (const Error& e) {
    throw Error("device " + name + ": " + OneLine(e.what()));
  }
  throw Error("unknown device '" + name + "' (expected cpu, opencl or cuda)");
}

std::unique_ptr<GpuProgram> CompileGpuStep(const Graph& g, const WeightStore& store,
                                           std::shared_ptr<GpuDevice> device) {
  GpuCompileOptions opts;
  if (device->dialect() == GpuDialect::Cuda) {
    // bf16 GEMMs of a prompt on the tensor cores; decode's single row keeps the rendered GEMV.
    // PRISM_MMA_MIN_ROWS moves the threshold (for measuring it; 0 turns the tensor cores off).
    KernelProgram kp = BuildKernelProgram(g, opts.fusion);
    opts.mma_min_rows = kStepMmaMinRows;
    if (const char* v = std::getenv("PRISM_MMA_MIN_ROWS"); v && *v) opts.mma_min_rows = std::atoll(v);
    for (const Kernel& k : kp.kernels)
      opts.mma_gemm.push_back(opts.mma_min_rows > 0 && CudaMmaGemmApplies(kp, k));
  }
  auto prog = GpuProgram::Compile(g, std::move(device), opts);
  for (const Node& n : g.nodes()) {
    if (n.op != Op::Weight) continue;
    const TensorData& t = store.Get(n.name);
    prog->BindWeight(n.name, HostTensor::Borrow(t.dtype, t.shape, t.data));
  }
  return prog;
}

}  // namespace prism
