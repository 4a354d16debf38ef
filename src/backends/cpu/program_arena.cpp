// The CPU executable's scratch memory: a step's intermediates placed in one arena by lifetime, and the
// report and check of that placement.
#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "backends/cpu/program.h"
#include "ir/error.h"

namespace prism {

nlohmann::json Program::MemoryReport(const SymbolBindings& b) {
  PlanLaunches(b, false);
  std::vector<int64_t> needed(kp_.buffers.size(), 0);
  for (size_t i = 0; i < kp_.buffers.size(); ++i)
    if (kp_.buffers[i].kind == BufferKind::Intermediate) {
      int64_t n = 1;
      for (int64_t d : EvalShape(kp_.buffers[i].shape, b)) n *= d;
      needed[i] = StorageBytes(kp_.buffers[i].dtype, n);
    }
  std::vector<ScratchItem> items = ScratchLifetimes(needed);
  int64_t buffers = 0, separate = 0, arena = 0, in_place = 0;
  for (const ScratchItem& it : items)
    if (it.bytes > 0) {
      buffers++;
      separate += (it.bytes + 63) / 64 * 64;
      in_place += it.over >= 0;
    }
  PlaceInArena(items, &arena);
  nlohmann::json sizes = b;
  return {{"sizes", sizes},
          {"scratch_buffers", buffers},
          {"scratch_bytes_separate", separate},
          {"written_in_place", in_place},
          {"arena_bytes", arena}};
}

int Program::ArenaConflicts() const {
  const size_t nk = kp_.kernels.size();
  if (launches_.size() != nk || arena_offset_.size() != kp_.buffers.size())
    throw Error("ArenaConflicts: no step has been planned yet (run one first)");
  auto overlap = [&](int x, int y) {
    if (x == y || arena_offset_[x] < 0 || arena_offset_[y] < 0) return false;
    return arena_offset_[x] < arena_offset_[y] + arena_items_[y].bytes &&
           arena_offset_[y] < arena_offset_[x] + arena_items_[x].bytes;
  };
  // Kernels that may run at the same time: one of them parallel, no barrier between them.
  std::vector<int> interval(nk, 0);
  for (size_t k = 1; k < nk; ++k) interval[k] = interval[k - 1] + (launches_[k].barrier_before ? 1 : 0);
  auto together = [&](size_t a, size_t b) {
    return a == b || (interval[a] == interval[b] && (launches_[a].parallel || launches_[b].parallel));
  };
  std::vector<int> first(kp_.buffers.size(), -1), last(kp_.buffers.size(), -1);
  for (size_t k = 0; k < nk; ++k)
    if (!launches_[k].skip)
      for (int x : Touched(k)) {
        if (first[x] < 0) first[x] = (int)k;
        last[x] = (int)k;
      }
  // The one legal sharing of live bytes: kernel k writes y over x element by element (InPlaceInputs), k
  // is x's last use and y's first, and nothing that may run beside k touches x.
  auto in_place = [&](int x, int y) {
    for (int pass = 0; pass < 2; ++pass, std::swap(x, y)) {
      const int k = last[x];
      if (k < 0 || first[y] != k || kp_.kernels[k].out_buffer != y) continue;
      const std::vector<int>& can = in_place_inputs_[k];
      if (std::find(can.begin(), can.end(), x) == can.end()) continue;
      bool alone = true;
      for (size_t j = 0; j < nk && alone; ++j)
        alone = (int)j == k || launches_[j].skip || !together(j, k) || !Touched(j).count(x);
      if (alone) return true;
    }
    return false;
  };
  int conflicts = 0;
  for (size_t a = 0; a < nk; ++a)
    for (size_t b = a; b < nk; ++b) {
      if (launches_[a].skip || launches_[b].skip || !together(a, b)) continue;
      for (int x : Touched(a))
        for (int y : Touched(b)) conflicts += overlap(x, y) && !(a == b && in_place(x, y));
    }
  // And in order: bytes two buffers share must not be live for both between their uses.
  for (size_t x = 0; x < first.size(); ++x)
    for (size_t y = x + 1; y < first.size(); ++y)
      if (first[x] >= 0 && first[y] >= 0 && overlap((int)x, (int)y) &&
          !(last[x] < first[y] || last[y] < first[x]) && !in_place((int)x, (int)y))
        conflicts++;
  return conflicts;
}

std::vector<ScratchItem> Program::ScratchLifetimes(const std::vector<int64_t>& needed) const {
  const size_t nb = kp_.buffers.size();
  std::vector<ScratchItem> items(nb, ScratchItem{0, 0, 0});
  // Lifetimes in kernel positions. Thread 0 runs the kernels in order, the others only parallel ones, so
  // kernels of a barrier interval holding a parallel kernel may run at once: each of them spans the
  // whole interval. While searching, every intermediate is live throughout.
  const size_t nk = kp_.kernels.size();
  const bool planned = launches_.size() == nk;
  std::vector<int> span_first(nk), span_last(nk);
  for (size_t k = 0; k < nk; ++k) span_first[k] = span_last[k] = share_scratch_ ? (int)k : 0;
  if (share_scratch_ && planned)
    for (size_t k0 = 0; k0 < nk;) {
      size_t k1 = k0 + 1;  // [k0, k1): one barrier interval (skipped kernels join any)
      while (k1 < nk && !launches_[k1].barrier_before) ++k1;
      bool parallel = false;
      for (size_t k = k0; k < k1; ++k) parallel = parallel || (!launches_[k].skip && launches_[k].parallel);
      if (parallel)
        for (size_t k = k0; k < k1; ++k) span_first[k] = (int)k0, span_last[k] = (int)k1 - 1;
      k0 = k1;
    }
  std::vector<bool> live(nb, false);
  std::vector<int> first_use(nb, -1), last_use(nb, -1);  // kernel positions, not spans
  for (size_t k = 0; k < nk; ++k) {
    if (share_scratch_ && planned && launches_[k].skip) continue;
    for (int b : Touched(k)) {
      ScratchItem& it = items[b];
      if (!live[b]) it.first = span_first[k], it.last = span_last[k], first_use[b] = (int)k;
      it.first = std::min(it.first, span_first[k]);
      it.last = std::max(it.last, span_last[k]);
      last_use[b] = (int)k;
      live[b] = true;
    }
  }
  for (size_t b = 0; b < nb; ++b)
    if (kp_.buffers[b].kind == BufferKind::Intermediate && live[b]) items[b].bytes = needed[b];
  if (!share_scratch_ || !planned) return items;
  // In place: a kernel writes its output over an input it reads only element by element (InPlaceInputs)
  // when that is the input's last use and the output's first, and no kernel that may run beside it
  // (its barrier interval, when parallel) touches the input.
  for (size_t k = 0; k < nk; ++k) {
    const int o = kp_.kernels[k].out_buffer;
    if (launches_[k].skip || items[o].bytes == 0 || first_use[o] != (int)k) continue;
    for (int x : in_place_inputs_[k]) {
      if (items[x].bytes == 0 || last_use[x] != (int)k) continue;
      bool alone = true;
      for (int j = span_first[k]; j <= span_last[k] && alone; ++j)
        alone = j == (int)k || launches_[j].skip || !Touched(j).count(x);
      if (alone) {
        items[o].over = x;
        break;
      }
    }
  }
  return items;
}

void Program::PlanArena(const std::vector<int64_t>& needed) {
  const size_t nb = kp_.buffers.size();
  // Lifetimes follow from which kernels run, in parallel or not, and where barriers fall: unchanged
  // from the last step (as in decode), a placement whose buffers are all still big enough holds.
  std::vector<uint8_t> shape(launches_.size());
  for (size_t k = 0; k < launches_.size(); ++k)
    shape[k] = launches_[k].skip | launches_[k].parallel << 1 | launches_[k].barrier_before << 2;
  shape.push_back(share_scratch_);
  if (shape == arena_launches_ && arena_items_.size() == nb) {
    bool fits = true;
    for (size_t b = 0; b < nb && fits; ++b) fits = needed[b] <= arena_items_[b].bytes || arena_offset_[b] < 0;
    if (fits) return;
  }
  arena_launches_ = std::move(shape);
  std::vector<ScratchItem> items = ScratchLifetimes(needed);
  bool fits = arena_items_.size() == nb;
  for (size_t b = 0; b < nb; ++b) {
    if (items[b].bytes == 0) continue;
    const int64_t before = arena_items_.size() == nb ? arena_items_[b].bytes : 0;
    items[b].bytes = needed[b] <= before ? before : std::max(needed[b], before + before / 2);
    fits = fits && needed[b] <= before && arena_offset_[b] >= 0 && items[b].first == arena_items_[b].first &&
           items[b].last == arena_items_[b].last && items[b].over == arena_items_[b].over;
  }
  for (size_t b = 0; b < nb && fits; ++b) fits = (items[b].bytes > 0) == (arena_items_[b].bytes > 0);
  if (fits) return;  // the placement in use still holds every buffer for its lifetime
  arena_items_ = std::move(items);
  int64_t bytes = 0;
  arena_offset_ = PlaceInArena(arena_items_, &bytes);
  arena_bytes_ = bytes;
  if (bytes > (int64_t)arena_.nbytes()) arena_ = HostTensor::Zeros(DType::U8, {bytes + bytes / 4});
}

}  // namespace prism
