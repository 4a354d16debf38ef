// Memory plan: scratch buffers placed in one arena by lifetime, so buffers that are never live at once
// share bytes.
#pragma once

#include <cstdint>
#include <vector>

namespace prism {

// A buffer's size and lifetime: live from `first` to `last` inclusive (in whatever units the caller
// orders its work by). Bytes 0: not needed.
struct ScratchItem {
  int64_t bytes;
  int first, last;
};

// Offsets in one arena (64-byte aligned; -1 for items of 0 bytes), largest item first, each at the
// lowest offset free over its whole lifetime. Items whose lifetimes overlap never share a byte.
std::vector<int64_t> PlaceInArena(const std::vector<ScratchItem>& items, int64_t* arena_bytes);

}  // namespace prism
