// Memory plan: greedy first-fit placement of scratch buffers by size, over their lifetimes; which
// kernels may write their output over an input.
#include "backends/cpu/memory_plan.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace prism {

std::vector<int64_t> PlaceInArena(const std::vector<ScratchItem>& given, int64_t* arena_bytes) {
  // An item written in place joins the item it overwrites (and that one's, down the chain): one block,
  // live over all their lifetimes, as large as the largest.
  std::vector<ScratchItem> items = given;
  std::vector<size_t> root(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    root[i] = i;
    while (items[root[i]].over >= 0 && items[items[root[i]].over].bytes > 0) root[i] = items[root[i]].over;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (root[i] == i || items[i].bytes <= 0) continue;
    ScratchItem& r = items[root[i]];
    r.first = std::min(r.first, given[i].first);
    r.last = std::max(r.last, given[i].last);
    r.bytes = std::max(r.bytes, given[i].bytes);
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (root[i] != i) items[i].bytes = 0;
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
  for (size_t i = 0; i < items.size(); ++i)
    if (root[i] != i && given[i].bytes > 0) offset[i] = offset[root[i]];
  return offset;
}

std::vector<int> InPlaceInputs(const KernelProgram& p, const Kernel& k) {
  std::vector<int> inputs;
  if (k.gemm || k.attention || HasReduce(k.value) || k.out_buffer < 0) return inputs;
  const KBuffer& out = p.buffers[k.out_buffer];
  if (out.kind != BufferKind::Intermediate) return inputs;
  // Same type and element count (a product's output keeps its reduced axis as 1: [seq, 96, 1]).
  const Expr numel = Product(out.shape);
  auto same_size = [&](const KBuffer& b) { return b.dtype == out.dtype && Product(b.shape) == numel; };
  // Buffers read anywhere but at the output's own element (through another index, or a gather) are out.
  const std::string at = k.out_index.str();
  std::set<int> elsewhere;
  std::function<void(const KValuePtr&)> visit = [&](const KValuePtr& v) {
    if (v->kind == KValue::Kind::Load && (v->index.str() != at || !v->gathers.empty()))
      elsewhere.insert(v->buffer);
    for (const GatherBinding& gb : v->gathers) {
      std::set<int> inner;
      CollectLoads(gb.value, &inner);
      elsewhere.insert(inner.begin(), inner.end());
    }
    for (const KValuePtr& a : v->args) visit(a);
  };
  visit(k.value);
  for (int b : KernelReads(k))
    if (b != k.out_buffer && !elsewhere.count(b) && p.buffers[b].kind == BufferKind::Intermediate &&
        same_size(p.buffers[b]))
      inputs.push_back(b);
  return inputs;
}

}  // namespace prism
