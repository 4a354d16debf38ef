// FNV-1a (64-bit): the one string hash behind the tree's cache and database keys.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace prism {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;

// h continues a hash over more text (start from kFnvOffset).
inline uint64_t Fnv1a(std::string_view text, uint64_t h = kFnvOffset) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The hash as 16 hex digits.
inline std::string FnvHex(uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

}  // namespace prism
