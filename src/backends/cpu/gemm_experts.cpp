// Grouped expert GEMMs: rows sorted by expert (a counting sort), each expert's rows gathered into one
// activation block so that its slab is read once per step, whatever the number of rows routed to it.
#include "backends/cpu/gemm_experts.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace prism {
namespace {

int64_t ExpertOf(const int32_t* expert, int64_t experts, int64_t row) {
  return std::clamp<int64_t>(expert[row], 0, experts - 1);  // as the value tree's Gather clamps
}

}  // namespace

PackedGemmWeight PackExperts(const GemmForm& form, const void* w, DType wt, int64_t experts, int64_t n,
                             int64_t k) {
  auto packs = std::make_shared<ExpertPacks>();
  PackedGemmWeight out;
  for (int64_t e = 0; e < experts; ++e) {
    packs->slabs.push_back(form.pack(static_cast<const uint8_t*>(w) + e * StorageBytes(wt, n * k), wt, n, k));
    if (!packs->slabs.back().form_data) return {};  // this dtype is read as stored
    out.more.emplace_back(packs->slabs.back().bytes, packs->slabs.back().size);
  }
  out.form_data = packs;
  return out;
}

const void* ExpertSlab(const void* w, DType wt, int64_t n, int64_t k, const int32_t* expert, int64_t experts,
                       int64_t row) {
  return static_cast<const uint8_t*>(w) + ExpertOf(expert, experts, row) * StorageBytes(wt, n * k);
}

void RunExpertGemm(const GemmForm& form, const GemmCall& all, const int32_t* expert, int64_t experts,
                   int thread, int threads) {
  thread_local std::vector<int64_t> start, order;
  thread_local std::vector<float> a_rows, y_rows;
  start.assign((size_t)experts + 1, 0);
  for (int64_t i = 0; i < all.m; ++i) start[ExpertOf(expert, experts, i) + 1]++;
  for (int64_t e = 0; e < experts; ++e) start[e + 1] += start[e];
  order.resize((size_t)all.m);
  thread_local std::vector<int64_t> cursor;
  cursor.assign(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < all.m; ++i) order[cursor[ExpertOf(expert, experts, i)]++] = i;
  const int64_t n = all.n, k = all.k, tile = form.split_tile, tiles = (all.ne - all.nb + tile - 1) / tile;
  if (tiles <= 0) return;
  // The team's work laid end to end: each routed slab's column tiles, a tile weighing its slab's rows; this
  // thread takes its share of the whole. A decode step's two slabs on two threads are then one slab each, one
  // stream from memory per thread where halves of both were two (Zen 5, `prism_expert_split`: 0-3% faster in
  // most rounds at the host's low bandwidth level; the decode step within the host's noise).
  int64_t total = 0;
  for (int64_t e = 0; e < experts; ++e) total += (start[e + 1] - start[e]) * tiles;
  const int64_t begin = total * thread / threads, end = total * (thread + 1) / threads;
  for (int64_t e = 0, pos = 0; e < experts && pos < end; ++e) {
    const int64_t first = start[e], count = start[e + 1] - first, weight = count * tiles;
    const int64_t lo = std::max(begin, pos) - pos, hi = std::min(end, pos + weight) - pos;
    pos += weight;
    if (lo >= hi) continue;
    // Tiles [ceil(lo / count), ceil(hi / count)): the neighbouring thread's bounds round alike.
    GemmCall call = all;
    call.nb = std::min(all.ne, all.nb + (lo + count - 1) / count * tile);
    call.ne = std::min(all.ne, all.nb + (hi + count - 1) / count * tile);
    if (call.nb >= call.ne) continue;
    call.w = static_cast<const uint8_t*>(all.w) + e * StorageBytes(all.wt, n * k);
    call.packed =
        all.packed ? static_cast<const ExpertPacks*>(all.packed)->slabs[e].form_data.get() : nullptr;
    call.m = count;
    if (count == 1) {  // one row (decode): straight from the activation into the output
      call.a = all.a + order[first] * k;
      call.y = all.y + order[first] * n;
      form.run(call);
      continue;
    }
    a_rows.resize((size_t)(count * k));
    y_rows.resize((size_t)(count * n));
    for (int64_t j = 0; j < count; ++j)
      std::memcpy(a_rows.data() + j * k, all.a + order[first + j] * k, sizeof(float) * (size_t)k);
    call.a = a_rows.data();
    call.y = y_rows.data();
    form.run(call);
    for (int64_t j = 0; j < count; ++j)
      std::memcpy(all.y + order[first + j] * n + call.nb, y_rows.data() + j * n + call.nb,
                  sizeof(float) * (size_t)(call.ne - call.nb));
  }
}

}  // namespace prism
