// Measures this machine's ceilings (read bandwidth, multiply-add rates) for roofline figures in receipts.
#include "backends/cpu/machine_probe.h"

// GCC 12 warns inside its own AVX-512 reduction intrinsics (_mm512_reduce_add_ps): false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/gemm_amx.h"
#include "backends/cpu/thread_pool.h"
#include "ir/error.h"

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

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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
PRISM_PEAK_LOOP(Int8Avx2Loop, "avx2", __m256i, _mm256_set1_epi8((char)(i + 1)),
                _mm256_maddubs_epi16(a, _mm256_set1_epi8(1)), 32 * 2)
#undef PRISM_PEAK_LOOP

// One thread's read of n floats as S interleaved sequential streams (the range cut into S parts read
// in lockstep, 256 bytes of each per step), with software prefetch `ahead` bytes in front of each
// (0: none). Written once over 64-byte vectors; each caller's target picks the instructions.
typedef float Vec16 __attribute__((vector_size(64)));
template <int S>
__attribute__((always_inline)) inline float ReadStreams(const float* p, int64_t n, int64_t ahead) {
  const int64_t len = n / S / 64 * 64;
  Vec16 acc[S][2] = {};
  for (int64_t i = 0; i < len; i += 64)
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if (ahead > 0)
        for (int line = 0; line < 4; ++line)
          __builtin_prefetch(reinterpret_cast<const char*>(q) + ahead + 64 * line);
      Vec16 v[4];
      std::memcpy(v, q, sizeof v);
      acc[s][0] += v[0] + v[1];
      acc[s][1] += v[2] + v[3];
    }
  float sum = 0;
  for (int s = 0; s < S; ++s)
    for (int l = 0; l < 16; ++l) sum += acc[s][0][l] + acc[s][1][l];
  return sum;
}

template <int S>
__attribute__((target("avx512f"))) float ReadStreams512(const float* p, int64_t n, int64_t ahead) {
  return ReadStreams<S>(p, n, ahead);
}
template <int S>
__attribute__((target("avx2"))) float ReadStreams256(const float* p, int64_t n, int64_t ahead) {
  return ReadStreams<S>(p, n, ahead);
}

// The read of 1, 2 or 4 streams (entry 0, 1, 2) with the widest loads the CPU has.
using ReadFn = float (*)(const float*, int64_t, int64_t);
const ReadFn kReads512[] = {ReadStreams512<1>, ReadStreams512<2>, ReadStreams512<4>};
const ReadFn kReads256[] = {ReadStreams256<1>, ReadStreams256<2>, ReadStreams256<4>};

MachinePeaks Measure(int threads) {
  MachinePeaks m;
  m.cpu = CpuModelName();
  m.threads = threads;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("avx2")) return m;  // no probe below AVX2: no roofline
  ThreadPool pool(threads);
  // Each rate: best of several runs after a warm-up one (a single slow run, the vector units waking or
  // a neighbour on the host, once gave a third of the peak, and every floor of that search with it).
  auto rate = [&](const std::function<double(int64_t)>& loop, int64_t iters) {
    std::vector<double> ops(threads);
    double best = 0;
    for (int rep = 0; rep <= 10; ++rep) {
      auto t0 = Clock::now();
      pool.ParallelFor(threads, [&](int t) { ops[t] = loop(iters); });
      if (rep > 0) best = std::max(best, ops[0] * threads / Seconds(t0) / 1e9);
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
  m.int8_avx2_gops = peak(PeakLoop::Int8Avx2, 2'000'000);
  m.amx_bf16_gflops = peak(PeakLoop::AmxBf16, 20'000);
  m.amx_int8_gops = peak(PeakLoop::AmxInt8, 20'000);
  m.read_gbps = MeasureReadBandwidth(threads, (size_t)256 << 20, 3).gbps;
  return m;
}

}  // namespace

ReadBandwidth MeasureReadBandwidth(int threads, size_t bytes, int passes) {
  ReadBandwidth r;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("avx2")) return r;
  constexpr size_t kHugePage = (size_t)2 << 20;
  bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  float* data = static_cast<float*>(std::aligned_alloc(kHugePage, bytes));
  if (!data) return r;
  madvise(data, bytes, MADV_HUGEPAGE);  // a hint: without transparent huge pages, 4 KiB pages
  const int64_t n = (int64_t)(bytes / sizeof(float));
  // Each thread's slice, 256-byte aligned, first touched by the thread that reads it.
  auto slice = [&](int t) {
    return std::pair<int64_t, int64_t>{n / threads * t / 64 * 64, n / threads / 64 * 64};
  };
  ThreadPool pool(threads);
  pool.ParallelFor(threads, [&](int t) {
    auto [begin, len] = slice(t);
    for (int64_t i = begin; i < begin + len; ++i) data[i] = (float)(i & 1023) * 1e-6f;
  });
  struct Variant {
    int streams;
    int64_t ahead;
  };
  // 512 bytes ahead too: an Intel Xeon with AMX read 37 GB/s as 4 streams 512 bytes ahead, 34-35 at the
  // best of the others, and Prism's decode had read more than the probe's figure then.
  const Variant variants[] = {{1, 0},    {2, 0},    {4, 0},    {2, 512},  {4, 512}, {1, 1024},
                              {2, 1024}, {4, 1024}, {1, 4096}, {2, 4096}, {4, 4096}};
  std::vector<float> sink(threads);
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms the page tables and the TLBs
    double pass_best = 0;
    for (const Variant& v : variants) {
      const auto t0 = Clock::now();
      pool.ParallelFor(threads, [&](int t) {
        auto [begin, len] = slice(t);
        const float* p = data + begin;
        sink[t] += (avx512 ? kReads512 : kReads256)[v.streams / 2](p, len, v.ahead);
      });
      const int64_t read = v.streams * (slice(0).second / v.streams / 64 * 64);  // floats per thread
      const double gbps = (double)read * threads * sizeof(float) / Seconds(t0) / 1e9;
      if (pass == 0) continue;
      pass_best = std::max(pass_best, gbps);
      if (gbps > r.gbps) {
        r.gbps = gbps;
        r.variant = std::to_string(v.streams) + (v.streams == 1 ? " stream" : " streams") + " per thread, " +
                    (v.ahead ? "prefetch " + std::to_string(v.ahead) + " B ahead" : "no prefetch");
      }
    }
    if (pass > 0) r.samples.push_back(pass_best);
  }
  volatile float keep = 0;
  for (float x : sink) keep = keep + x;
  std::free(data);
  return r;
}

float ReadMemory(const void* p, size_t bytes, int streams, int64_t ahead) {
  if (streams != 1 && streams != 2 && streams != 4)
    throw Error("memory read: " + std::to_string(streams) + " streams (1, 2 or 4)");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("avx2")) return 0;
  return (avx512 ? kReads512 : kReads256)[streams / 2](static_cast<const float*>(p),
                                                       (int64_t)(bytes / sizeof(float)), ahead);
}

bool PeakLoopSupported(PeakLoop loop) {
  switch (loop) {
    case PeakLoop::Fp32Fma: return __builtin_cpu_supports("avx512f");
    case PeakLoop::Fp32Fma256: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case PeakLoop::Fp16Fma: return __builtin_cpu_supports("avx512fp16");
    case PeakLoop::Bf16Dot: return __builtin_cpu_supports("avx512bf16");
    case PeakLoop::Int8Vnni: return __builtin_cpu_supports("avx512vnni");
    case PeakLoop::Int8Avx2: return __builtin_cpu_supports("avx2");
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
    case PeakLoop::Int8Avx2: return Int8Avx2Loop(iters);
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
    case DType::Q4_0: return std::max({fp32_gflops, int8_vnni_gops, amx_int8_gops, int8_avx2_gops});
    // GGUF's block formats: the int8 panels and the q8k form's integer dot products, or f32 FMAs.
    default: return IsQuantized(wt) ? std::max({fp32_gflops, int8_vnni_gops, int8_avx2_gops}) : fp32_gflops;
  }
}

const char* MachinePeaks::GemmPeakBasis(DType wt) const {
  const double peak = GemmPeak(wt);
  if (peak == amx_bf16_gflops) return "amx_bf16";
  if (peak == amx_bf16_gflops / 3) return "amx_bf16/3 (split f32)";
  if (peak == amx_int8_gops) return "amx_int8";
  if (peak == int8_vnni_gops) return "int8_vnni";
  if (peak == int8_avx2_gops) return "int8_avx2";
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

// clflushopt where the CPU has it: clflush is ordered with every other clflush, and on a KVM guest (the
// Xeon with AMX these notes measure on) it took 2.7 ns a byte, 40x clflushopt: 45% of a 1B model's compile.
__attribute__((target("clflushopt"))) static void FlushOpt(const char* c, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) _mm_clflushopt(const_cast<char*>(c + i));
}

void EvictFromCache(const void* p, size_t bytes) {
  static const bool opt = __builtin_cpu_supports("clflushopt");
  const char* c = static_cast<const char*>(p);
  if (opt)
    FlushOpt(c, bytes);
  else
    for (size_t i = 0; i < bytes; i += 64) _mm_clflush(c + i);
  _mm_mfence();  // orders clflushopt too: the lines are gone before what follows reads them
}

}  // namespace prism
