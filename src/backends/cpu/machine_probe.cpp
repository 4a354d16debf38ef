// Measures this machine's ceilings (read bandwidth, FP32 FMA rate) for roofline figures in receipts.
#include "backends/cpu/machine_probe.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cpu/thread_pool.h"

namespace prism {

namespace {

// Seconds all cores spent busy since boot (-1 where /proc/stat cannot be read).
double SystemBusySeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu")
    return -1;
  return (user + nice + system + irq + softirq + steal) / (double)sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

BusyMeter::BusyMeter()
    : busy0_(SystemBusySeconds()), self0_(SelfCpuSeconds()), t0_(std::chrono::steady_clock::now()) {}

double BusyMeter::OthersFraction() const {
  double busy = SystemBusySeconds();
  if (busy < 0 || busy0_ < 0) return -1;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  double cores = (double)std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  double others = (busy - busy0_) - (SelfCpuSeconds() - self0_);
  return wall > 0 ? std::clamp(others / (wall * cores), 0.0, 1.0) : 0;
}

std::string CpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

namespace {

using Clock = std::chrono::steady_clock;

__attribute__((target("avx512f"))) double FmaLoop(int64_t iters) {
  // 12 independent accumulators hide the FMA latency. Fully unrolled, or they live on the stack and
  // each FMA waits on a store and a load (that measured a sixth of the peak); each starts from its own
  // value, or the compiler merges them into one chain.
  __m512 acc[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.01f * (float)i);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(a, x, y);
  __m512 s = acc[0];
#pragma GCC unroll 12
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f"))) double SumRange(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

MachinePeaks Measure(int threads) {
  MachinePeaks m;
  m.cpu = CpuModelName();
  m.threads = threads;
  if (!__builtin_cpu_supports("avx512f")) return m;
  ThreadPool pool(threads);
  const int64_t n = (int64_t)64 << 20;  // 256 MiB of floats, far beyond the caches
  std::vector<float> data(n, 1.0f);
  std::vector<double> sink(threads);
  double best_bw = 0;
  // Best of several: noise (a neighbour on the host, a frequency change) only ever lowers a reading.
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = Clock::now();
    pool.ParallelFor(threads,
                     [&](int t) { sink[t] += SumRange(data.data() + n * t / threads, n / threads); });
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best_bw = std::max(best_bw, n * 4.0 / s / 1e9);
  }
  // Best of several runs after a warm-up one: a single slow run (the vector units waking, a
  // neighbour on the host) once gave a third of the peak, and every floor of that search with it.
  const int64_t iters = 4'000'000;
  double best_fl = 0;
  pool.ParallelFor(threads, [&](int t) { sink[t] += FmaLoop(iters); });
  for (int rep = 0; rep < 10; ++rep) {
    auto t0 = Clock::now();
    pool.ParallelFor(threads, [&](int t) { sink[t] += FmaLoop(iters); });
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best_fl = std::max(best_fl, threads * iters * 12.0 * 16 * 2 / s / 1e9);
  }
  m.read_gbps = best_bw;
  m.fp32_gflops = best_fl;
  return m;
}

}  // namespace

const MachinePeaks& ProbeMachine(int threads) {
  static std::mutex mu;
  static std::map<int, MachinePeaks> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(threads);
  if (it == cache.end()) it = cache.emplace(threads, Measure(threads)).first;
  return it->second;
}

void EvictFromCache(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush(c + i);
  _mm_mfence();
}

}  // namespace prism
