// A language model's step graph on a GPU-style device: the device opened by name, weights uploaded.
#include "runtime/gpu_step.h"

#include "backends/cuda/cuda_device.h"
#include "backends/opencl/opencl_device.h"
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
  auto prog = GpuProgram::Compile(g, std::move(device));
  for (const Node& n : g.nodes()) {
    if (n.op != Op::Weight) continue;
    const TensorData& t = store.Get(n.name);
    prog->BindWeight(n.name, HostTensor::Borrow(t.dtype, t.shape, t.data));
  }
  return prog;
}

}  // namespace prism
