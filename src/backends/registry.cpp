// The registry of devices: every device Prism can compile for, by name, one line each.
#include <functional>

#include "backends/cpu/cpu_device.h"
#include "backends/cuda/cuda_device.h"
#include "backends/device.h"
#include "backends/gpu/gpu_target.h"
#include "backends/interp/interp_device.h"
#include "backends/opencl/opencl_device.h"

namespace prism {
namespace {

using Opener = std::function<std::shared_ptr<Device>()>;

const std::vector<std::pair<std::string, Opener>>& Registry() {
  static const std::vector<std::pair<std::string, Opener>> devices = {
      {"cpu", [] { return std::make_shared<CpuDevice>(); }},
      {"opencl", [] { return std::make_shared<GpuTarget>(OpenClDevice::Open()); }},
      {"cuda", [] { return std::make_shared<GpuTarget>(CudaDevice::Open()); }},
      {"interp", [] { return std::make_shared<InterpDevice>(); }},
  };
  return devices;
}

// Driver messages (dlerror text) can span lines; the command line prints errors as one.
std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

std::vector<std::string> DeviceNames() {
  std::vector<std::string> names;
  for (const auto& [name, open] : Registry()) names.push_back(name);
  return names;
}

std::shared_ptr<Device> OpenDevice(const std::string& name) {
  std::string known;
  for (const auto& [n, open] : Registry()) {
    if (n == name) {
      try {
        return open();
      } catch (const Error& e) {
        throw Error("device " + name + ": " + OneLine(e.what()));
      }
    }
    known += (known.empty() ? "" : ", ") + n;
  }
  throw Error("unknown device '" + name + "' (expected " + known + ")");
}

}  // namespace prism
