// A kernel's work at one bucket's sizes, for its roofline floor: the flops of its products and the bytes
// of every buffer it touches.
#pragma once

#include "compiler/kernel_ir.h"
#include "ir/host_tensor.h"

namespace prism {

struct KernelWork {
  double flops = 0;
  double bytes = 0;
};

// For a kernel with a fused attention form, the fused form's work (Q·Kᵀ and P·V over the visible
// (query, key) pairs only). `sizes` binds every symbol of kp.
KernelWork WorkOf(const KernelProgram& kp, const Kernel& kn, const SymbolBindings& sizes);

}  // namespace prism
