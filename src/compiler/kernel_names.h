// What a kernel is, in a reader's words: the model op it comes from ("layer 3 q_proj") and its kind of
// work ("gemm", "attention", "reduction", "elementwise"), for receipts and reports.
#pragma once

#include <string>

#include "compiler/kernel_ir.h"

namespace prism {

// From the weight a GEMM multiplies by, else the first weight or KV cache the kernel reads (Hugging Face
// names shortened: "model.layers.3.self_attn.q_proj.weight" -> "layer 3 q_proj", "k_cache.3" -> "layer 3
// attention"); a kernel that reads neither is named by its root op ("Add").
std::string ModelOpName(const KernelProgram& p, const Kernel& k);
std::string KernelKind(const Kernel& k);

}  // namespace prism
