// Memory plan: greedy first-fit placement of scratch buffers by size, over their lifetimes.
#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace prism {

std::vector<int64_t> PlaceInArena(const std::vector<ScratchItem>& items, int64_t* arena_bytes) {
  std::vector<int64_t> offset(items.size(), -1);
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;
  *arena_bytes = 0;
  for (size_t i : order) {
    const ScratchItem& it = items[i];
    if (it.bytes <= 0) continue;
    const int64_t size = (it.bytes + 63) / 64 * 64;
    busy.clear();
    for (size_t j : placed)
      if (!(items[j].last < it.first || it.last < items[j].first))
        busy.push_back({offset[j], offset[j] + (items[j].bytes + 63) / 64 * 64});
    std::sort(busy.begin(), busy.end());
    int64_t off = 0;
    for (const auto& [lo, hi] : busy) {
      if (off + size <= lo) break;
      off = std::max(off, hi);
    }
    offset[i] = off;
    placed.push_back(i);
    *arena_bytes = std::max(*arena_bytes, off + size);
  }
  return offset;
}

}  // namespace prism
