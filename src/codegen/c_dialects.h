// The three dialects of the C-style renderer: C++ for the CPU, CUDA C and OpenCL C.
#pragma once

#include "codegen/c_renderer.h"

namespace prism {

extern const CDialect kCppDialect;     // the system compiler; kept free of standard headers
extern const CDialect kCudaDialect;    // NVRTC; no standard headers
extern const CDialect kOpenClDialect;  // OpenCL C 1.2 without cl_khr_fp16

}  // namespace prism
