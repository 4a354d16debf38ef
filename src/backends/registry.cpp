// The registry of devices: every device Prism can compile for, by name, one line each.
#include <functional>

#include "backends/cpu/cpu_device.h"
#include "backends/cuda/cuda_device.h"
#include "backends/device.h"
#include "backends/gpu/gpu_target.h"
#include "backends/interp/interp_device.h"
#include "backends/opencl/opencl_device.h"
#include "backends/systolic/systolic_device.h"

namespace prism {
namespace {

// Opens a device from what follows its name after a colon ("" when nothing does).
using Opener = std::function<std::shared_ptr<Device>(const std::string& arg)>;

// A device that takes no argument.
template <class F>
Opener Plain(F open) {
  return [open](const std::string& arg) -> std::shared_ptr<Device> {
    if (!arg.empty()) throw Error("takes no ':" + arg + "' (only systolic takes a description)");
    return open();
  };
}

const std::vector<std::pair<std::string, Opener>>& Registry() {
  static const std::vector<std::pair<std::string, Opener>> devices = {
      {"cpu", Plain([] { return std::make_shared<CpuDevice>(); })},
      {"opencl", Plain([] { return std::make_shared<GpuTarget>(OpenClDevice::Open()); })},
      {"cuda", Plain([] { return std::make_shared<GpuTarget>(CudaDevice::Open()); })},
      {"interp", Plain([] { return std::make_shared<InterpDevice>(); })},
      // "systolic" is the built-in "quad" description; "systolic:NAME" another built-in one or a file.
      {"systolic",
       [](const std::string& arg) {
         return std::make_shared<SystolicDevice>(arg.empty() ? "systolic" : "systolic:" + arg,
                                                 LoadSystolicDescription(arg));
       }},
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

std::shared_ptr<Device> OpenDevice(const std::string& name_and_arg) {
  const size_t colon = name_and_arg.find(':');
  const std::string name = name_and_arg.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : name_and_arg.substr(colon + 1);
  std::string known;
  for (const auto& [n, open] : Registry()) {
    if (n == name) {
      try {
        return open(arg);
      } catch (const Error& e) {
        throw Error("device " + name + ": " + OneLine(e.what()));
      }
    }
    known += (known.empty() ? "" : ", ") + n;
  }
  throw Error("unknown device '" + name + "' (expected " + known + ")");
}

}  // namespace prism
