// Memory plan: scratch buffers placed in one arena by lifetime, so buffers that are never live at once
// share bytes, and outputs written in place over an input that dies in the same kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/kernel_ir.h"

namespace prism {

// A buffer's size and lifetime: live from `first` to `last` inclusive (in whatever units the caller
// orders its work by). Bytes 0: not needed. `over` >= 0: this buffer is written in place over item
// `over` (whose last use is this one's first), so it takes that item's bytes.
struct ScratchItem {
  int64_t bytes;
  int first, last;
  int over = -1;
};

// Offsets in one arena (64-byte aligned; -1 for items of 0 bytes), largest item first, each at the
// lowest offset free over its whole lifetime. Items whose lifetimes overlap never share a byte, except
// an item and the one it is written in place over (a chain of those is one block, live throughout).
std::vector<int64_t> PlaceInArena(const std::vector<ScratchItem>& items, int64_t* arena_bytes);

// The inputs kernel k may overwrite with its output, element by element: k maps elements (no
// reduction, no template), and its output is an intermediate of the same type and shape as such an
// input, which it reads only at the element being written.
std::vector<int> InPlaceInputs(const KernelProgram& p, const Kernel& k);

}  // namespace prism
