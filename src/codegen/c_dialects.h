// The dialects of the C-style renderer: C++ for the CPU.
#pragma once

#include "codegen/c_renderer.h"

namespace prism {

extern const CDialect kCppDialect;  // the system compiler; kept free of standard headers

}  // namespace prism
