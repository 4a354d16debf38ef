// prism_roofline_probe: measures this machine's roofline ceilings and prints them as JSON.
//
//   memory read bandwidth  Prism's own probe (MeasureReadBandwidth): a 2 GiB array (far beyond any
//                          L3), every thread reading its own slice as 1, 2 or 4 interleaved streams
//                          with and without software prefetch; best variant of several passes.
//   peak compute           register-only loops of one instruction over independent accumulators
//                          (enough chains to cover latency x ports), so the number is the issue
//                          rate of the vector and tile units, not of memory; Prism's own probe
//                          loops (src/backends/cpu/machine_probe), which its receipts use:
//                            fp32_fma     AVX-512F  vfmadd231ps   16 lanes x 2 flops
//                            fp32_fma256  AVX2/FMA  vfmadd231ps    8 lanes x 2 flops (fallback)
//                            bf16_dot     AVX512_BF16 vdpbf16ps   32 pairs x 2 flops, fp32 accumulate
//                            fp16_fma     AVX512_FP16 vfmadd231ph 32 lanes x 2 flops
//                            int8_vnni    AVX512_VNNI vpdpbusd    64 u8*s8 products x 2 ops
//                            int8_avx2    AVX2      vpmaddubsw    32 u8*s8 products x 2 ops (pairs summed)
//                            amx_bf16     AMX-BF16  tdpbf16ps     16 x 16 x 32 products x 2 flops
//                            amx_int8     AMX-INT8  tdpbssd       16 x 16 x 64 products x 2 ops
//                          Each runs only where the CPU has the instructions (and, for AMX, Linux
//                          grants the tile state).
//
// Usage: prism_roofline_probe [--threads 1,2] [--mib 2048] [--quick]
// Output: one JSON object on stdout (see the end of main for its fields). Runs in ~10-20 s.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/machine_probe.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Runs fn(thread_index) on `threads` threads released together; returns the wall time from the
// release to the last thread's end.
double RunParallel(int threads, const std::function<void(int)>& fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> team;
  for (int i = 0; i < threads; ++i)
    team.emplace_back([&, i] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(i);
    });
  while (ready.load() < threads) {
  }
  auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : team) t.join();
  return Seconds(t0, Clock::now());
}

// ---------------------------------------------------------------------------------------------
// Peak compute: Prism's own probe loops (backends/cpu/machine_probe), the ones its receipts use.

struct ComputeKernel {
  const char* name;
  const char* instruction;
  const char* unit;  // "GFLOP/s" or "GOP/s"
  prism::PeakLoop loop;
};

// Calibrates the iteration count to ~target_s on one thread, then measures best-of-`reps`
// aggregate throughput at each thread count.
std::vector<std::pair<int, double>> MeasureCompute(const ComputeKernel& k, const std::vector<int>& threads,
                                                   double target_s, int reps) {
  int64_t iters = 1 << 10;
  for (;;) {
    auto t0 = Clock::now();
    prism::RunPeakLoop(k.loop, iters);
    double s = Seconds(t0, Clock::now());
    if (s > target_s / 4) {
      iters = (int64_t)(iters * target_s / s) + 1;
      break;
    }
    iters *= 4;
  }
  std::vector<std::pair<int, double>> out;
  for (int t : threads) {
    double best = 0;
    for (int r = 0; r < reps; ++r) {
      std::vector<double> ops(t);
      double sec = RunParallel(t, [&](int i) { ops[i] = prism::RunPeakLoop(k.loop, iters); });
      double total = 0;
      for (double x : ops) total += x;
      best = std::max(best, total / sec / 1e9);
    }
    out.push_back({t, best});
  }
  return out;
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      std::string s = line.substr(p + 1);
      s.erase(0, s.find_first_not_of(' '));
      return s;
    }
  return "unknown";
}

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::vector<int> ParseList(const char* s) {
  std::vector<int> v;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == 0) {
      if (!cur.empty()) v.push_back(std::atoi(cur.c_str()));
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  auto start = Clock::now();
  int hw = (int)std::max(1u, std::thread::hardware_concurrency());
  std::vector<int> threads = hw > 1 ? std::vector<int>{1, hw} : std::vector<int>{1};
  size_t mib = 2048;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = ParseList(argv[++i]);
    } else if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--threads 1,N] [--mib 2048] [--quick]\n"
                   "  Measures memory read bandwidth and peak vector throughput; prints JSON.\n",
                   argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (threads.empty()) threads = {1};

  __builtin_cpu_init();
  struct Feature {
    const char* name;
    bool on;
  } features[] = {
      {"avx2", (bool)__builtin_cpu_supports("avx2")},
      {"fma", (bool)__builtin_cpu_supports("fma")},
      {"avx512f", (bool)__builtin_cpu_supports("avx512f")},
      {"avx512bw", (bool)__builtin_cpu_supports("avx512bw")},
      {"avx512vnni", (bool)__builtin_cpu_supports("avx512vnni")},
      {"avx512bf16", (bool)__builtin_cpu_supports("avx512bf16")},
      {"avx512fp16", (bool)__builtin_cpu_supports("avx512fp16")},
      {"avxvnni", (bool)__builtin_cpu_supports("avxvnni")},
      {"amx-tile", (bool)__builtin_cpu_supports("amx-tile")},
  };
  // ---- memory bandwidth: Prism's own probe (backends/cpu/machine_probe), the best of its read variants
  const int passes = quick ? 3 : 5;
  std::vector<std::pair<int, prism::ReadBandwidth>> bw;
  for (int t : threads) bw.push_back({t, prism::MeasureReadBandwidth(t, mib << 20, passes)});

  // ---- peak compute
  using prism::PeakLoop;
  std::vector<ComputeKernel> kernels = {
      {"fp32_fma", "vfmadd231ps zmm (AVX-512F)", "GFLOP/s", PeakLoop::Fp32Fma},
      {"fp32_fma256", "vfmadd231ps ymm (AVX2/FMA)", "GFLOP/s", PeakLoop::Fp32Fma256},
      {"bf16_dot", "vdpbf16ps zmm (AVX512_BF16)", "GFLOP/s", PeakLoop::Bf16Dot},
      {"fp16_fma", "vfmadd231ph zmm (AVX512_FP16)", "GFLOP/s", PeakLoop::Fp16Fma},
      {"int8_vnni", "vpdpbusd zmm (AVX512_VNNI)", "GOP/s", PeakLoop::Int8Vnni},
      {"int8_avx2", "vpmaddubsw ymm (AVX2)", "GOP/s", PeakLoop::Int8Avx2},
      {"amx_bf16", "tdpbf16ps (AMX-BF16)", "GFLOP/s", PeakLoop::AmxBf16},
      {"amx_int8", "tdpbssd (AMX-INT8)", "GOP/s", PeakLoop::AmxInt8},
  };
  double target_s = quick ? 0.1 : 0.2;
  int reps = quick ? 2 : 3;

  std::string out = "{\n";
  out += "  \"cpu\": \"" + JsonEscape(CpuModel()) + "\",\n";
  out += "  \"hardware_threads\": " + std::to_string(hw) + ",\n";
  out += "  \"features\": {";
  for (size_t i = 0; i < std::size(features); ++i)
    out +=
        std::string(i ? ", " : "") + "\"" + features[i].name + "\": " + (features[i].on ? "true" : "false");
  out += "},\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "  \"bandwidth\": {\"array_mib\": %zu, \"passes\": %d, \"gbps\": {", mib,
                passes);
  out += buf;
  for (size_t i = 0; i < bw.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s\"%d\": %.2f", i ? ", " : "", bw[i].first, bw[i].second.gbps);
    out += buf;
  }
  out += "}, \"samples\": {";
  for (size_t i = 0; i < bw.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s\"%d\": [", i ? ", " : "", bw[i].first);
    out += buf;
    for (size_t j = 0; j < bw[i].second.samples.size(); ++j) {
      std::snprintf(buf, sizeof buf, "%s%.2f", j ? ", " : "", bw[i].second.samples[j]);
      out += buf;
    }
    out += "]";
  }
  out += "}, \"variants\": {";
  for (size_t i = 0; i < bw.size(); ++i)
    out += (i ? ", \"" : "\"") + std::to_string(bw[i].first) + "\": \"" + JsonEscape(bw[i].second.variant) +
           "\"";
  out += "}},\n  \"compute\": {\n";
  bool first = true;
  for (auto& k : kernels) {
    out += first ? "" : ",\n";
    first = false;
    std::snprintf(buf, sizeof buf,
                  "    \"%s\": {\"instruction\": \"%s\", \"unit\": \"%s\", \"supported\": %s", k.name,
                  k.instruction, k.unit, prism::PeakLoopSupported(k.loop) ? "true" : "false");
    out += buf;
    if (prism::PeakLoopSupported(k.loop)) {
      out += ", \"per_second_1e9\": {";
      auto res = MeasureCompute(k, threads, target_s, reps);
      for (size_t i = 0; i < res.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s\"%d\": %.1f", i ? ", " : "", res[i].first, res[i].second);
        out += buf;
      }
      out += "}";
    }
    out += "}";
  }
  std::snprintf(buf, sizeof buf, "\n  },\n  \"elapsed_s\": %.2f\n}\n", Seconds(start, Clock::now()));
  out += buf;
  std::fputs(out.c_str(), stdout);
  return 0;
}
