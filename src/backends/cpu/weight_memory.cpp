// Repacked weights on transparent huge pages: a decode step streams every weight once, and with 4 KiB
// pages each page start costs a TLB miss and a restart of the hardware prefetcher (a 17.9 MB Q8_0
// GEMV on 2 threads read 20 GB/s on 4 KiB pages and 23-24 GB/s on 2 MiB ones).
#include "backends/cpu/weight_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "ir/error.h"

namespace prism {

WeightMemory AllocateWeightMemory(size_t bytes, const char* what) {
  constexpr size_t kHuge = size_t{2} << 20;
  // Below a huge page, rounding up would waste more than it saves.
  const size_t align = bytes >= kHuge ? kHuge : 64;
  const size_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size == 0 ? align : size);
  if (!p) throw Error(std::string(what) + ": cannot allocate " + std::to_string(bytes) + " bytes");
  // Advice only: where the kernel has no huge pages (or they are off) this is ordinary memory.
  if (align == kHuge) madvise(p, size, MADV_HUGEPAGE);
  std::memset(p, 0, size);
  return {static_cast<uint8_t*>(p), std::free};
}

}  // namespace prism
