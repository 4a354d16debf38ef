// A kernel's structural identity: a hash of its loops and value tree, buffers known by their order of
// appearance, dtypes and shapes. Equal for every layer's copy of a kernel; no printer involved.
#pragma once

#include <string>

#include "compiler/kernel_ir.h"

namespace prism {

// 32 hex digits (two independent 64-bit hashes). Covers the loop extents and output index, the value
// tree (kinds, ops, dtypes, constants, index expressions, gathers, reductions), every touched buffer's
// kind, dtype and shape, and the template operands (GEMM, fused attention and its parameters).
std::string KernelStructuralHash(const KernelProgram& p, const Kernel& k);

}  // namespace prism
