// The reference interpreter as a device: every graph node run in double, one schedule per node.
#pragma once

#include "backends/device.h"

namespace prism {

class InterpDevice : public Device {
 public:
  std::string name() const override { return "interp"; }
  std::unique_ptr<Executable> Compile(const Graph& g, const CompileRequest& req = {}) override;
};

}  // namespace prism
