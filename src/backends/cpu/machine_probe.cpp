// Measures this machine's ceilings (read bandwidth, multiply-add rates) for roofline figures in receipts.
#include "backends/cpu/machine_probe.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cpu/gemm_amx.h"
#include "backends/cpu/thread_pool.h"

namespace prism {

std::string CpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

namespace {

using Clock = std::chrono::steady_clock;

// 12 independent accumulators hide each instruction's latency. Fully unrolled, or they live on the
// stack and each waits on a store and a load (that measured a sixth of the FMA peak); each starts
// from its own value, or the compiler merges them into one chain. Returns operations done.
#define PRISM_PEAK_LOOP(NAME, TARGET, VEC, INIT, STEP, OPS)                                       \
  __attribute__((target(TARGET))) double NAME(int64_t iters) {                                    \
    VEC acc[12];                                                                                  \
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) acc[i] = INIT;                          \
    for (int64_t it = 0; it < iters; ++it) _Pragma("GCC unroll 12") for (auto& a : acc) a = STEP; \
    alignas(64) VEC sink[12];                                                                     \
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) sink[i] = acc[i];                       \
    asm volatile("" : : "r"(sink) : "memory");                                                    \
    return (double)iters * 12 * (OPS);                                                            \
  }

PRISM_PEAK_LOOP(FmaLoop, "avx512f", __m512, _mm512_set1_ps(1.0f + 0.01f * (float)i),
                _mm512_fmadd_ps(a, _mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-7f)), 16 * 2)
PRISM_PEAK_LOOP(Fma256Loop, "avx2,fma", __m256, _mm256_set1_ps(1.0f + 0.01f * (float)i),
                _mm256_fmadd_ps(a, _mm256_set1_ps(0.999999f), _mm256_set1_ps(1e-7f)), 8 * 2)
PRISM_PEAK_LOOP(Fp16Loop, "avx512f,avx512fp16", __m512h, _mm512_set1_ph((_Float16)(1.0f + 0.01f * (float)i)),
                _mm512_fmadd_ph(a, _mm512_set1_ph((_Float16)0.999f), _mm512_set1_ph((_Float16)1e-4f)), 32 * 2)
PRISM_PEAK_LOOP(Bf16DotLoop, "avx512f,avx512bf16", __m512, _mm512_set1_ps(0.01f * (float)i),
                _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi16(0x3c00), (__m512bh)_mm512_set1_epi16(0x3c00)),
                32 * 2)
PRISM_PEAK_LOOP(VnniLoop, "avx512f,avx512vnni", __m512i, _mm512_set1_epi32(i),
                _mm512_dpbusd_epi32(a, _mm512_set1_epi8(1), _mm512_set1_epi8(1)), 64 * 2)
#undef PRISM_PEAK_LOOP

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

// The same read with AVX2 loads, for CPUs without AVX-512.
__attribute__((target("avx2"))) double SumRange256(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  double sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

MachinePeaks Measure(int threads) {
  MachinePeaks m;
  m.cpu = CpuModelName();
  m.threads = threads;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("avx2")) return m;  // no probe below AVX2: no roofline
  ThreadPool pool(threads);
  const int64_t n = (int64_t)64 << 20;  // 256 MiB of floats, far beyond the caches
  std::vector<float> data(n, 1.0f);
  std::vector<double> sink(threads);
  double best_bw = 0;
  // Best of several: noise (a neighbour on the host, a frequency change) only ever lowers a reading.
  for (int rep = 0; rep < 10; ++rep) {
    auto t0 = Clock::now();
    pool.ParallelFor(threads, [&](int t) {
      const float* p = data.data() + n * t / threads;
      sink[t] += avx512 ? SumRange(p, n / threads) : SumRange256(p, n / threads);
    });
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best_bw = std::max(best_bw, n * 4.0 / s / 1e9);
  }
  // Each rate: best of several runs after a warm-up one (a single slow run, the vector units waking or
  // a neighbour on the host, once gave a third of the peak, and every floor of that search with it).
  auto rate = [&](const std::function<double(int64_t)>& loop, int64_t iters) {
    std::vector<double> ops(threads);
    double best = 0;
    for (int rep = 0; rep <= 10; ++rep) {
      auto t0 = Clock::now();
      pool.ParallelFor(threads, [&](int t) { ops[t] = loop(iters); });
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep > 0) best = std::max(best, ops[0] * threads / s / 1e9);
    }
    return best;
  };
  auto peak = [&](PeakLoop loop, int64_t iters) {
    return PeakLoopSupported(loop) ? rate([loop](int64_t i) { return RunPeakLoop(loop, i); }, iters) : 0.0;
  };
  // The widest f32 FMA the CPU has: AVX-512, else AVX2 (a CPU without AVX-512 still has a roofline).
  m.fp32_gflops = PeakLoopSupported(PeakLoop::Fp32Fma) ? peak(PeakLoop::Fp32Fma, 2'000'000)
                                                       : peak(PeakLoop::Fp32Fma256, 2'000'000);
  m.fp16_gflops = peak(PeakLoop::Fp16Fma, 1'000'000);
  m.bf16_dot_gflops = peak(PeakLoop::Bf16Dot, 1'000'000);
  m.int8_vnni_gops = peak(PeakLoop::Int8Vnni, 1'000'000);
  m.amx_bf16_gflops = peak(PeakLoop::AmxBf16, 20'000);
  m.amx_int8_gops = peak(PeakLoop::AmxInt8, 20'000);
  m.read_gbps = best_bw;
  return m;
}

}  // namespace

bool PeakLoopSupported(PeakLoop loop) {
  switch (loop) {
    case PeakLoop::Fp32Fma: return __builtin_cpu_supports("avx512f");
    case PeakLoop::Fp32Fma256: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case PeakLoop::Fp16Fma: return __builtin_cpu_supports("avx512fp16");
    case PeakLoop::Bf16Dot: return __builtin_cpu_supports("avx512bf16");
    case PeakLoop::Int8Vnni: return __builtin_cpu_supports("avx512vnni");
    default: return AmxUsable();
  }
}

double RunPeakLoop(PeakLoop loop, int64_t iters) {
  if (!PeakLoopSupported(loop)) return 0;
  switch (loop) {
    case PeakLoop::Fp32Fma: return FmaLoop(iters);
    case PeakLoop::Fp32Fma256: return Fma256Loop(iters);
    case PeakLoop::Fp16Fma: return Fp16Loop(iters);
    case PeakLoop::Bf16Dot: return Bf16DotLoop(iters);
    case PeakLoop::Int8Vnni: return VnniLoop(iters);
    case PeakLoop::AmxBf16: return AmxPeakLoop(false, iters);
    default: return AmxPeakLoop(true, iters);
  }
}

double MachinePeaks::GemmPeak(DType wt) const {
  // f32 and f16 weights also run on AMX tiles as three bf16 products per product (GemmAmx's split).
  const double amx_split = amx_bf16_gflops / 3;
  switch (wt) {
    case DType::F32: return std::max(fp32_gflops, amx_split);
    case DType::F16: return std::max({fp32_gflops, fp16_gflops, amx_split});
    case DType::BF16: return std::max({fp32_gflops, bf16_dot_gflops, amx_bf16_gflops});
    case DType::Q8_0:
    case DType::Q4_0: return std::max({fp32_gflops, int8_vnni_gops, amx_int8_gops});
    default: return fp32_gflops;
  }
}

const char* MachinePeaks::GemmPeakBasis(DType wt) const {
  const double peak = GemmPeak(wt);
  if (peak == amx_bf16_gflops) return "amx_bf16";
  if (peak == amx_bf16_gflops / 3) return "amx_bf16/3 (split f32)";
  if (peak == amx_int8_gops) return "amx_int8";
  if (peak == int8_vnni_gops) return "int8_vnni";
  if (peak == bf16_dot_gflops) return "bf16_dot";
  if (peak == fp16_gflops) return "fp16_fma";
  return "fp32_fma";
}

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
