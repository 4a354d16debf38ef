// Test helper: one OpenCL device per test binary, or the reason there is none (the test then skips).
#pragma once

#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>

#include "backends/opencl/opencl_device.h"
#include "ir/error.h"

namespace prism::testing {

// Null with the reason when there is no OpenCL platform; the device's name is printed once.
inline std::shared_ptr<GpuDevice> OpenClTestDevice(std::string* why) {
  static std::shared_ptr<GpuDevice> dev;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      dev = OpenClDevice::Open();
      std::cout << "OpenCL device: " << dev->name() << "\n";
    } catch (const Error& e) {
      reason = e.what();
    }
  }
  *why = reason;
  return dev;
}

}  // namespace prism::testing

#define PRISM_REQUIRE_OPENCL(dev)                                             \
  std::string why_;                                                           \
  std::shared_ptr<GpuDevice> dev = ::prism::testing::OpenClTestDevice(&why_); \
  if (!dev) {                                                                 \
    GTEST_SKIP() << why_;                                                     \
  }
