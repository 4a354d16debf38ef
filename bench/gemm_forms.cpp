// Times every template GEMM form on one shape: Y = A · Wᵀ, A M x K f32, W N x K in each weight dtype.
// Usage: prism_gemm_bench [M N K [repeats [threads [cold|warm [DTYPES]]]]]  (default 1 8192 2048 10 1; best
// of the repeats; threads split the weight rows in blocks of 64, as a decode step's team does; `cold`: the
// weights of every form are evicted from the caches before each repeat, as the schedule search times a GEMM;
// DTYPES: a comma-separated list of weight dtypes to time, e.g. q6_k,q4_k; default all). Cold, each repeat
// also times a plain read of the same memory just after (the probe's read: 2 streams a thread, the faster of
// prefetching 1 KiB and 4 KiB ahead, the same bytes a thread), and "of read" is the median over repeats of
// the kernel's rate over that read's: a fraction of the memory's speed that a change of the host's bandwidth
// between repeats or runs does not move.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_amx.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/gemm_blocks.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/gemm_int8_avx2.h"
#include "backends/cpu/gemm_int8_panels.h"
#include "backends/cpu/gemm_panels.h"
#include "backends/cpu/gemm_slices_avx2.h"
#include "backends/cpu/machine_probe.h"
#include "backends/cpu/thread_pool.h"
#include "ir/host_tensor.h"
#include "ir/quant_formats.h"

using namespace prism;

int main(int argc, char** argv) {
  const int64_t m = argc > 1 ? std::atoll(argv[1]) : 1, n = argc > 2 ? std::atoll(argv[2]) : 8192,
                k = argc > 3 ? std::atoll(argv[3]) : 2048;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 10;
  const int threads = argc > 5 ? std::max(1, std::atoi(argv[5])) : 1;
  const bool cold = argc > 6 && std::string(argv[6]) == "cold";
  const std::string only = argc > 7 ? "," + std::string(argv[7]) + "," : "";
  auto wanted = [&](DType wt) {
    return only.empty() || only.find("," + std::string(DTypeName(wt)) + ",") != std::string::npos;
  };
  ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  const std::vector<DType> from_floats = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};
  std::vector<float> a(m * k), wf, y(m * n);
  for (float& v : a) v = dist(rng);
  if (std::any_of(from_floats.begin(), from_floats.end(), wanted)) {
    wf.resize(n * k);
    for (float& v : wf) v = dist(rng);
  }
  std::printf("M=%lld N=%lld K=%lld, %d thread(s), best of %d (micro-kernels: %s)\n", (long long)m,
              (long long)n, (long long)k, threads, reps, GemmIsa());
  std::printf(
      "| weights | form | ms | weight GB/s | GFLOP/s | read GB/s | of read |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
  // run(nb, ne) computes output columns [nb, ne); each thread takes its share of 64-column blocks.
  auto time = [&](DType wt, const char* form, size_t weight_bytes,
                  const std::function<void(int64_t, int64_t)>& run, const void* weights) {
    const int64_t blocks = (n + 63) / 64;
    double best = 1e30;
    std::vector<double> reads, ratios;  // cold: the plain read's seconds, and the kernel's rate over its
    std::vector<float> sink(threads);
    auto timed = [&](const std::function<void(int)>& f) {
      if (cold) {
        EvictFromCache(weights, weight_bytes);
        pool.ParallelFor(threads,
                         [](int) {});  // the team, asleep by now, awake again (else one thread ran it)
      }
      auto t0 = std::chrono::steady_clock::now();
      pool.ParallelFor(threads, f);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (int r = 0; r <= reps; ++r) {  // repeat 0 warms up
      const double s = timed([&](int t) {
        run(std::min(n, blocks * t / threads * 64), std::min(n, blocks * (t + 1) / threads * 64));
      });
      if (r > 0) best = std::min(best, s);
      if (!cold) continue;
      const size_t share = weight_bytes / threads / 256 * 256;
      double read = 1e30;
      for (int64_t ahead : {1024, 4096})  // an Intel Xeon's read 1 KiB ahead: 34.5 GB/s, 4 KiB ahead: 30
        read = std::min(read, timed([&](int t) {
                          sink[t] +=
                              ReadMemory(static_cast<const uint8_t*>(weights) + share * t, share, 2, ahead);
                        }));
      if (r > 0) reads.push_back(read * weight_bytes / (share * threads)), ratios.push_back(reads.back() / s);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("| %s | %s | %.3f | %.1f | %.1f |", std::string(DTypeName(wt)).c_str(), form, best * 1e3,
                weight_bytes / best / 1e9, 2.0 * m * n * k / best / 1e9);
    if (reads.empty())
      std::printf(" - | - |\n");
    else
      std::printf(" %.1f | %.0f%% |\n", weight_bytes / median(reads) / 1e9, 100 * median(ratios));
    volatile float keep = sink[0];
    (void)keep;
  };
  // The int8 rows at the default prefetch distance, then at each the search times (int8-avx2 likewise).
  auto int8_rows = [&](DType wt, const void* w) {
    Int8PackedWeight p = PackForInt8Dot(w, wt, n, k);
    time(
        wt, "rounded (int8 VNNI)", p.bytes,
        [&](int64_t nb, int64_t ne) { GemmRowsInt8(a.data(), m, p, y.data(), n, nb, ne); }, p.data.get());
    for (int64_t ahead : Int8PrefetchChoices(wt, k))
      time(
          wt, ("rounded, prefetch=" + Int8PrefetchName(ahead)).c_str(), p.bytes,
          [&](int64_t nb, int64_t ne) { GemmRowsInt8(a.data(), m, p, y.data(), n, nb, ne, ahead); },
          p.data.get());
  };
  auto int8_avx2 = [&](DType wt, const void* w) {
    if (!Int8Avx2Supported(wt, k)) return;
    const Int8Avx2PackedWeight p = PackForInt8Avx2(w, wt, n, k);
    time(
        wt, "int8-avx2", p.bytes,
        [&](int64_t nb, int64_t ne) { GemmRowsInt8Avx2(a.data(), m, p, y.data(), n, nb, ne); }, p.data.get());
    for (int64_t ahead : Int8Avx2PrefetchChoices(wt, k))
      time(
          wt, ("int8-avx2, prefetch=" + std::to_string(ahead)).c_str(), p.bytes,
          [&](int64_t nb, int64_t ne) { GemmRowsInt8Avx2(a.data(), m, p, y.data(), n, nb, ne, ahead); },
          p.data.get());
  };
  auto slices = [&](DType wt, const void* w, size_t bytes) {
    if (!SliceGemmSupported(wt, k)) return;
    for (int64_t m_block : std::vector<int64_t>{0, 96, 384})
      time(
          wt, ("slices, m_block=" + std::to_string(m_block)).c_str(), bytes,
          [&](int64_t nb, int64_t ne) {
            GemmSlicesAvx2(a.data(), m, k, w, wt, y.data(), n, nb, ne, m_block);
          },
          w);
  };
  for (DType wt : from_floats) {
    if (!GemmSupports(wt, k) || !wanted(wt)) continue;
    const HostTensor w = HostTensor::FromFloats({n, k}, wf, wt);
    time(
        wt, "rows", (size_t)w.nbytes(),
        [&](int64_t nb, int64_t ne) { GemmRows(a.data(), m, k, w.data, wt, y.data(), n, nb, ne); }, w.data);
    for (int64_t rows : GemvRowsChoices(wt, m))  // the values the search times besides the default
      time(
          wt, ("rows, gemv_rows=" + std::to_string(rows)).c_str(), (size_t)w.nbytes(),
          [&](int64_t nb, int64_t ne) { GemmRows(a.data(), m, k, w.data, wt, y.data(), n, nb, ne, rows); },
          w.data);
    if (wt == DType::BF16 && Bf16DotSupported()) {
      time(
          wt, "rounded (bf16 dot)", (size_t)w.nbytes(),
          [&](int64_t nb, int64_t ne) {
            GemmRowsBf16Dot(a.data(), m, k, reinterpret_cast<const uint16_t*>(w.data), y.data(), n, nb, ne);
          },
          w.data);
      Bf16PanelWeight p = PackBf16Panels(reinterpret_cast<const uint16_t*>(w.data), n, k);
      time(
          wt, "dot-panels (bf16 dot)", p.bytes,
          [&](int64_t nb, int64_t ne) { GemmBf16Panels(a.data(), m, p, y.data(), n, nb, ne); }, p.data.get());
    }
    if (Int8DotSupported(wt, k)) int8_rows(wt, w.data);
    int8_avx2(wt, w.data);
    slices(wt, w.data, (size_t)w.nbytes());
    if (PanelGemmSupported(wt)) {
      PanelPackedWeight p = PackPanels(w.data, wt, n, k);
      time(
          wt, "panels", p.bytes,
          [&](int64_t nb, int64_t ne) { GemmPanels(a.data(), m, p, y.data(), n, nb, ne); }, p.data.get());
      for (int64_t rows : PanelTileRowsChoices(wt))  // the register tiles the search times besides 12 rows
        time(
            wt, ("panels, tile_rows=" + std::to_string(rows)).c_str(), p.bytes,
            [&](int64_t nb, int64_t ne) { GemmPanels(a.data(), m, p, y.data(), n, nb, ne, {}, rows); },
            p.data.get());
    }
    if (AmxGemmSupported(wt, k)) {
      AmxPackedWeight p = PackForAmx(w.data, wt, n, k);
      time(
          wt, "amx", p.bytes, [&](int64_t nb, int64_t ne) { GemmAmx(a.data(), m, p, y.data(), n, nb, ne); },
          p.data.get());
    }
  }
  // GGUF's read-only block formats (random bytes: the time does not depend on the values).
  for (DType wt :
       {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q3_K, DType::Q2_K, DType::IQ4_NL, DType::IQ4_XS}) {
    if (!GemmSupports(wt, k) || !wanted(wt)) continue;
    HostTensor w = HostTensor::Zeros(wt, {n, k});
    for (int64_t i = 0; i < w.nbytes(); ++i) static_cast<uint8_t*>(w.data)[i] = (uint8_t)rng();
    time(
        wt, "rows", (size_t)w.nbytes(),
        [&](int64_t nb, int64_t ne) { GemmRows(a.data(), m, k, w.data, wt, y.data(), n, nb, ne); }, w.data);
    if (BlockQ8KSupported(wt, k))
      time(
          wt, "q8k (int8)", (size_t)w.nbytes(),
          [&](int64_t nb, int64_t ne) { GemmRowsBlockQ8K(a.data(), m, k, w.data, wt, y.data(), n, nb, ne); },
          w.data);
    if (Int8DotSupported(wt, k)) int8_rows(wt, w.data);
    int8_avx2(wt, w.data);
    slices(wt, w.data, (size_t)w.nbytes());
    if (PanelGemmSupported(wt)) {
      PanelPackedWeight p = PackPanels(w.data, wt, n, k);
      time(
          wt, "panels (int8 VNNI)", p.bytes,
          [&](int64_t nb, int64_t ne) { GemmPanels(a.data(), m, p, y.data(), n, nb, ne); }, p.data.get());
      if (Int8PanelsGroupSupported(wt, k))
        time(
            wt, "q8k-panels (int8 VNNI)", p.bytes,
            [&](int64_t nb, int64_t ne) {
              GemmPanelsInt8(a.data(), m, p.data.get(), wt, k, y.data(), n, nb, ne, 0, kSuperBlock);
            },
            p.data.get());
    }
  }
  return 0;
}
