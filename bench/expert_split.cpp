// How a team splits a decode step's routed expert slabs: the moe1b shape's Q4_K expert products alone, back
// to back on the team with the step's spin barrier between products, each slab split in halves by columns
// (every thread streams part of every slab) against RunExpertGemm's split (one whole slab per thread).
// Usage: prism_expert_split [tokens [rounds]]  (default 300 tokens a round, 4 rounds, alternated)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/gemm_experts.h"
#include "backends/cpu/gemm_forms.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/thread_pool.h"
#include "ir/dtype.h"

using namespace prism;

int main(int argc, char** argv) {
  const int tokens = argc > 1 ? std::max(1, std::atoi(argv[1])) : 300;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 4;
  constexpr int kLayers = 16, kExperts = 8, kHidden = 1024, kFfn = 2816, kThreads = 2;
  const DType wt = DType::Q4_K;
  if (!Int8DotSupported(wt, kHidden)) {
    std::printf("this CPU has no AVX512-VNNI: the int8 rows form does not run here\n");
    return 0;
  }
  int form_index = -1;
  for (size_t f = 0; f < GemmForms().size(); ++f)
    if (GemmForms()[f].name == std::string("rounded")) form_index = (int)f;
  if (form_index < 0) return 1;
  const GemmForm& form = GemmForms()[form_index];
  std::mt19937 rng(1);
  // Per layer: gate, up ([experts, ffn, hidden]) and down ([experts, hidden, ffn]), random Q4_K blocks
  // (finite d).
  struct Product {
    int64_t n, k;
    std::vector<uint8_t> w;
    PackedGemmWeight packed;
  };
  std::vector<Product> products;
  for (int l = 0; l < kLayers; ++l)
    for (int p = 0; p < 3; ++p) {
      Product pr{p < 2 ? kFfn : kHidden, p < 2 ? kHidden : kFfn, {}, {}};
      pr.w.resize((size_t)StorageBytes(wt, kExperts * pr.n * pr.k));
      for (auto& b : pr.w) b = (uint8_t)rng();
      for (size_t i = 0; i < pr.w.size(); i += 144) pr.w[i + 1] = pr.w[i + 3] = 0x20;  // d, dmin: small
      pr.packed = PackExperts(form, pr.w.data(), wt, kExperts, pr.n, pr.k);
      products.push_back(std::move(pr));
    }
  // The activation (one row, K = hidden or ffn), and the same row twice for RunExpertGemm's two routed rows.
  std::vector<float> a(kFfn), y(2 * kFfn), twice_hidden(2 * kHidden), twice_ffn(2 * kFfn);
  for (float& v : a) v = (float)(rng() % 1000) / 1000.0f - 0.5f;
  for (int r = 0; r < 2; ++r) {
    std::copy(a.begin(), a.begin() + kHidden, twice_hidden.begin() + r * kHidden);
    std::copy(a.begin(), a.end(), twice_ffn.begin() + r * kFfn);
  }
  std::vector<int32_t> picks((size_t)tokens * kLayers * 2);  // two distinct experts a token and layer
  for (size_t i = 0; i < picks.size(); i += 2) {
    picks[i] = (int32_t)(rng() % kExperts);
    picks[i + 1] = (int32_t)((picks[i] + 1 + rng() % (kExperts - 1)) % kExperts);
  }
  ThreadPool pool(kThreads);
  SpinBarrier barrier(kThreads);
  const double bytes =
      2.0 * kLayers * (2 * StorageBytes(wt, kFfn * kHidden) + StorageBytes(wt, kHidden * kFfn));
  auto run = [&](bool whole) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(kThreads, [&](int t) {
      for (int tok = 0; tok < tokens; ++tok)
        for (int l = 0; l < kLayers; ++l)
          for (int p = 0; p < 3; ++p) {
            const Product& pr = products[l * 3 + p];
            GemmCall call;
            call.a = a.data();
            call.m = 2;  // the token's two routed rows (one activation row, read twice)
            call.n = pr.n;
            call.k = pr.k;
            call.w = pr.w.data();
            call.wt = wt;
            call.packed = pr.packed.form_data.get();
            call.y = y.data();
            call.nb = 0;
            call.ne = pr.n;
            const int32_t* expert = picks.data() + ((size_t)tok * kLayers + l) * 2;
            if (whole) {
              call.a = pr.k == kHidden ? twice_hidden.data() : twice_ffn.data();
              RunExpertGemm(form, call, expert, kExperts, t, kThreads);
            } else {  // the split before: every slab's columns in halves, in whole tiles
              const int64_t tiles = (pr.n + form.split_tile - 1) / form.split_tile;
              for (int s = 0; s < 2; ++s) {
                GemmCall one = call;
                one.m = 1;
                one.w = pr.w.data() + expert[s] * StorageBytes(wt, pr.n * pr.k);
                one.packed = static_cast<const ExpertPacks*>(call.packed)->slabs[expert[s]].form_data.get();
                one.y = y.data() + s * pr.n;
                one.nb = std::min(pr.n, tiles * t / kThreads * form.split_tile);
                one.ne = std::min(pr.n, tiles * (t + 1) / kThreads * form.split_tile);
                form.run(one);
              }
            }
            barrier.Wait();
          }
    });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / tokens;
  };
  std::printf("moe1b shape, Q4_K experts, %d threads, %d tokens a round (%.1f MB of routed slabs a token)\n",
              kThreads, tokens, bytes / 1e6);
  std::printf(
      "| round | halves of every slab, us/token | one slab a thread, us/token |\n| ---: | ---: | ---: |\n");
  for (int r = 0; r < rounds; ++r) {
    const double halves = run(false), whole = run(true);
    std::printf("| %d | %.0f (%.1f GB/s) | %.0f (%.1f GB/s) |\n", r + 1, halves * 1e6, bytes / halves / 1e9,
                whole * 1e6, bytes / whole / 1e9);
  }
  return 0;
}
