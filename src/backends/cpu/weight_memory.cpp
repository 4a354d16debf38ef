// Repacked weights on transparent huge pages: a decode step streams every weight once, and with 4 KiB
// pages each page start costs a TLB miss and a restart of the hardware prefetcher (a 17.9 MB Q8_0
// GEMV on 2 threads read 20 GB/s on 4 KiB pages and 23-24 GB/s on 2 MiB ones).
#include "backends/cpu/weight_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "ir/error.h"

namespace prism {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

// Mappings by the aligned address handed out: where they start and how long they are.
std::mutex mappings_mu;
std::map<void*, std::pair<void*, size_t>>& Mappings() {
  static std::map<void*, std::pair<void*, size_t>> m;
  return m;
}

void Unmap(void* p) {
  if (!p) return;
  std::pair<void*, size_t> m;
  {
    std::lock_guard<std::mutex> lock(mappings_mu);
    auto it = Mappings().find(p);
    if (it == Mappings().end()) return;
    m = it->second;
    Mappings().erase(it);
  }
  munmap(m.first, m.second);
}

}  // namespace

WeightMemory AllocateWeightMemory(size_t bytes, const char* what) {
  // A fresh anonymous mapping is already zero (no pass over it before the caller's own writes). From a
  // huge page up, one huge page longer than asked, so that the data can start on a huge-page boundary;
  // below, plain pages (a huge page would make a small weight 2 MiB resident).
  const size_t align = bytes >= kHuge ? kHuge : 4096;
  const size_t size = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  const size_t length = align == kHuge ? size + kHuge : size;
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw Error(std::string(what) + ": cannot allocate " + std::to_string(bytes) + " bytes (" +
                std::strerror(errno) + ")");
  auto* data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + align - 1) / align * align);
  // Advice only: where the kernel has no huge pages (or they are off) this is ordinary memory.
  if (align == kHuge) madvise(data, size, MADV_HUGEPAGE);
  {
    std::lock_guard<std::mutex> lock(mappings_mu);
    Mappings()[data] = {base, length};
  }
  return {data, Unmap};
}

std::shared_ptr<const void> SharedDerived(const void* src, const std::shared_ptr<void>& src_owner,
                                          const std::string& what,
                                          const std::function<std::shared_ptr<const void>()>& make) {
  if (!src_owner) return make();
  struct Entry {
    std::weak_ptr<void> owner;
    std::weak_ptr<const void> made;
  };
  static std::mutex mu;
  static std::map<std::pair<const void*, std::string>, Entry> entries;
  const auto key = std::make_pair(src, what);
  auto same_owner = [&](const Entry& e) {
    return !e.owner.expired() && !e.owner.owner_before(src_owner) && !src_owner.owner_before(e.owner);
  };
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = entries.find(key);
    if (it != entries.end() && same_owner(it->second))
      if (auto made = it->second.made.lock()) return made;
  }
  std::shared_ptr<const void> made = make();  // outside the lock: packing a large weight takes a while
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(entries, [](const auto& e) { return e.second.owner.expired() || e.second.made.expired(); });
  entries[key] = {src_owner, made};
  return made;
}

}  // namespace prism
