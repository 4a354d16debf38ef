// The CPU as a device of the registry: graphs compiled into Programs, or loaded from an artifact.
#pragma once

#include "backends/device.h"

namespace prism {

class CpuDevice : public Device {
 public:
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Executable> Compile(const Graph& g, const CompileRequest& req = {}) override;
};

}  // namespace prism
