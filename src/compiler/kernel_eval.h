// Reference evaluation of single kernel outputs from the kernel IR, in double: checks search candidates
// (and the search's random inputs made as a step's are where random values would race).
#pragma once

#include <functional>
#include <random>

#include "compiler/kernel_ir.h"
#include "ir/host_tensor.h"

namespace prism {

struct KernelElement {
  int64_t out_index;  // element of the output buffer
  double value;       // what the kernel must store there (before rounding to the buffer's dtype)
  // For a GEMM template with an epilogue: how much an error in the product moves the value
  // (1 through an Add, the other factor's magnitude through a Mul); 1 otherwise.
  double product_factor = 1;
};

// Output element `flat` (row-major over the kernel's loop nest) computed from the value tree
// by direct evaluation; bufs follows p.buffers, sizes are bound by syms.
KernelElement EvalKernelElement(const KernelProgram& p, const Kernel& k, int64_t flat, void* const* bufs,
                                const SymbolBindings& syms);

// A scatter's rows (kernel k's out_gathers reading i32 indices) as a step's slots are: distinct rows below
// each store's limit, a shuffled permutation. Random indices could send two rows to one row, and which
// write lands is a race no reference can model: every candidate would fail its check and nothing be
// saved. `buffer(i)` gives buffer i's host values and element count.
void DistinctScatterRows(const KernelProgram& p, const Kernel& k, const SymbolBindings& syms,
                         const std::function<std::pair<void*, int64_t>(int)>& buffer, std::mt19937& rng);

}  // namespace prism
