// Renders a kernel program as C++ source for the CPU backend.
#pragma once

#include <string>

#include "compiler/kernel_ir.h"

namespace prism {

// One translation unit; each kernel is `extern "C" void <kernel.name>(void* const* bufs,
// const int64_t* syms, int64_t begin, int64_t end)` computing output elements [begin, end) of
// its flattened loop nest. Reductions that qualify also get `<kernel.name>_ro`, the same
// kernel with the reduce-outer loop order (a schedule the search can pick); GEMM templates with an
// epilogue get `<kernel.name>_epi`, the epilogue alone over elements whose product is stored (see
// GemmTemplate). bufs follows KernelProgram::buffers, syms KernelProgram::symbols.
std::string RenderCpp(const KernelProgram& p);

// Whether a kernel with the reduce-outer order runs it unsearched: more of its loads are strided along
// the innermost reduction variable than along the innermost output axis (attention's P·V reads V
// across keys), so the usual order would gather where the other reads contiguous rows.
bool PrefersReduceOuter(const Kernel& k);

}  // namespace prism
