// Times the paged attention template on a batched decode step: SEQS sequences of one query each, every one
// seeing KEYS keys through its own block table (blocks of 16 rows shuffled over a pool), the 1B shape's heads
// (8 K/V heads, groups of 4, head size 64), as a served step of that many users runs it in each layer.
// Usage: prism_attention_bench [SEQS [KEYS [THREADS [cold|warm [REPEATS [LAYOUT]]]]]]  (default 16 50 2 cold
// 200 paged; best of the repeats; `cold`: K and V evicted from the caches before each repeat). LAYOUT:
// `paged` (the pools [rows, H, D], as the models lay them out) or `paged-heads` (head-major [H, rows, D]);
// `heads` and `rows` time one sequence's cache instead (SEQS queries, the last of KEYS keys, causal),
// head-major [H, KEYS, D] (the models') or [KEYS, H, D]. GB/s counts the keys' and values' bytes each step
// must read.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/machine_probe.h"
#include "backends/cpu/thread_pool.h"

using namespace prism;

int main(int argc, char** argv) {
  const int64_t seqs = argc > 1 ? std::atoll(argv[1]) : 16, keys = argc > 2 ? std::atoll(argv[2]) : 50;
  const int threads = argc > 3 ? std::max(1, std::atoi(argv[3])) : 2;
  const bool cold = argc <= 4 || std::string(argv[4]) == "cold";
  const int reps = argc > 5 ? std::max(1, std::atoi(argv[5])) : 200;
  const std::string layout = argc > 6 ? argv[6] : "paged";
  const bool paged = layout == "paged" || layout == "paged-heads";
  if (!paged && layout != "heads" && layout != "rows") {
    std::fprintf(stderr, "prism_attention_bench: layout '%s' is none of paged, paged-heads, heads, rows\n",
                 layout.c_str());
    return 2;
  }
  const int64_t heads_kv = 8, group = 4, dim = 64, block = 16, blocks = (keys + block - 1) / block;
  const int64_t pool_blocks = seqs * blocks * 2, pool_rows = pool_blocks * block, row = heads_kv * dim;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> k_pool(pool_rows * row), v_pool(pool_rows * row), q(seqs * group * row),
      out(seqs * group * row);
  for (std::vector<float>* v : {&k_pool, &v_pool, &q})
    for (float& x : *v) x = dist(rng);
  std::vector<int32_t> order(pool_blocks), table(seqs * blocks), positions(seqs, (int32_t)keys - 1);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);  // each sequence's blocks anywhere in the pool
  std::copy(order.begin(), order.begin() + (int64_t)table.size(), table.begin());
  AttentionDims dims{heads_kv, group, dim, seqs, blocks * block, 0, 0.125f, 0.125f * 1.44269504f};
  const PagedKv kv{table.data(), positions.data(), blocks, block, pool_rows};
  if (!paged) {  // one sequence: its last SEQS positions query the first KEYS rows of the pool
    dims.total = keys;
    dims.offset = keys - seqs + 1;
  }
  const bool heads = layout == "paged-heads" || layout == "heads";
  dims.k_row = dims.v_row = heads ? dim : row;
  dims.k_head = dims.v_head = heads ? pool_rows * dim : dim;
  ThreadPool pool(threads);
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {  // repeat 0 warms up
    if (cold) {
      EvictFromCache(k_pool.data(), k_pool.size() * sizeof(float));
      EvictFromCache(v_pool.data(), v_pool.size() * sizeof(float));
      pool.ParallelFor(threads, [](int) {});  // the team awake again
    }
    const auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(threads, [&](int t) {
      if (paged)
        PagedAttentionF32(q.data(), k_pool.data(), v_pool.data(), out.data(), dims, kv, t, threads);
      else
        CausalAttentionF32(q.data(), k_pool.data(), v_pool.data(), out.data(), dims, t, threads);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  const double bytes = 2.0 * (paged ? seqs : 1) * keys * row * sizeof(float);
  std::printf("%s: %lld %s x %lld keys, %d thread(s), %s, best of %d: %.1f us, %.1f GB/s of K and V\n",
              layout.c_str(), (long long)seqs, paged ? "sequences" : "queries", (long long)keys, threads,
              cold ? "cold" : "warm", reps, best * 1e6, bytes / best / 1e9);
}
