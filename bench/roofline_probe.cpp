// prism_roofline_probe: measures this machine's roofline ceilings and prints them as JSON.
//
//   memory read bandwidth  a streaming sum over a 2 GiB float array (far beyond any L3), every
//                          thread reading its own contiguous slice; best of several passes.
//   peak compute           register-only loops of one instruction over independent accumulators
//                          (enough chains to cover latency x ports), so the number is the issue
//                          rate of the vector units, not of memory:
//                            fp32_fma     AVX-512F  vfmadd231ps   16 lanes x 2 flops
//                            fp32_fma256  AVX2/FMA  vfmadd231ps    8 lanes x 2 flops (fallback)
//                            bf16_dot     AVX512_BF16 vdpbf16ps   32 pairs x 2 flops, fp32 accumulate
//                            fp16_fma     AVX512_FP16 vfmadd231ph 32 lanes x 2 flops
//                            int8_vnni    AVX512_VNNI vpdpbusd    64 u8*s8 products x 2 ops
//                          Each kernel carries its own target attribute and runs only if
//                          __builtin_cpu_supports says the CPU has the instructions.
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

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

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

// Horizontal sums through memory (GCC 12's _mm512_reduce_* headers warn under -Wuninitialized).
__attribute__((target("avx512f"))) float HSum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}

__attribute__((target("avx512f"))) float HSumI(__m512i v) {
  alignas(64) int32_t t[16];
  _mm512_store_si512(t, v);
  int32_t s = 0;
  for (int32_t x : t) s += x;
  return (float)s;
}

// ---------------------------------------------------------------------------------------------
// Memory read bandwidth.

__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  float s = HSum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (; i < n; ++i) s += p[i];
  return s;
}

__attribute__((target("avx2"))) float SumAvx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float t[8];
  _mm256_storeu_ps(t, a);
  float s = 0;
  for (float x : t) s += x;
  for (; i < n; ++i) s += p[i];
  return s;
}

float SumScalar(const float* p, size_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

volatile float g_sink_f;
volatile int32_t g_sink_i;

struct BandwidthResult {
  double gbps;
  std::vector<double> passes;
};

BandwidthResult MeasureBandwidth(float* data, size_t n, int threads, int passes, const char* isa) {
  auto sum = std::string(isa) == "avx512f" ? SumAvx512 : std::string(isa) == "avx2" ? SumAvx2 : SumScalar;
  // Slices start on 64-byte boundaries (16 floats).
  size_t per = (n / threads) & ~size_t(15);
  std::vector<float> partial(threads);
  BandwidthResult r{0, {}};
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms the page tables and TLBs
    double sec = RunParallel(threads, [&](int t) {
      size_t begin = per * t, len = t == threads - 1 ? n - begin : per;
      partial[t] = sum(data + begin, len);
    });
    float s = 0;
    for (float x : partial) s += x;
    g_sink_f = s;
    if (pass > 0) r.passes.push_back(n * sizeof(float) / sec / 1e9);
  }
  r.gbps = *std::max_element(r.passes.begin(), r.passes.end());
  return r;
}

// ---------------------------------------------------------------------------------------------
// Peak compute. Each kernel runs `iters` iterations of kAcc independent instructions and returns
// something derived from every accumulator so that nothing is dead code. The multiplier/addend
// come in as arguments (read from volatiles) so the compiler cannot fold the loop.

constexpr int kAcc = 16;  // >= latency (4) x FMA ports (2), with slack

#define PRISM_REPEAT16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

__attribute__((target("avx512f"))) float Fp32Fma512(int64_t iters, float mul, float add) {
  __m512 b = _mm512_set1_ps(mul), c = _mm512_set1_ps(add);
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + i * 1e-3f);
  PRISM_REPEAT16(DECL)
#undef DECL
  for (int64_t k = 0; k < iters; ++k) {
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, b, c);
    PRISM_REPEAT16(STEP)
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define RED(i) s = _mm512_add_ps(s, a##i);
  PRISM_REPEAT16(RED)
#undef RED
  return HSum(s);
}

__attribute__((target("avx2,fma"))) float Fp32Fma256(int64_t iters, float mul, float add) {
  __m256 b = _mm256_set1_ps(mul), c = _mm256_set1_ps(add);
#define DECL(i) __m256 a##i = _mm256_set1_ps(1.0f + i * 1e-3f);
  PRISM_REPEAT16(DECL)
#undef DECL
  for (int64_t k = 0; k < iters; ++k) {
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, b, c);
    PRISM_REPEAT16(STEP)
#undef STEP
  }
  __m256 s = _mm256_setzero_ps();
#define RED(i) s = _mm256_add_ps(s, a##i);
  PRISM_REPEAT16(RED)
#undef RED
  float t[8];
  _mm256_storeu_ps(t, s);
  return t[0] + t[7];
}

__attribute__((target("avx512f,avx512bf16"))) float Bf16Dot(int64_t iters, float mul, float add) {
  // acc += sum over pairs of bf16(x) * bf16(y): fp32 accumulators grow slowly, stay finite.
  __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(mul * 1e-3f), _mm512_set1_ps(add));
  __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(add), _mm512_set1_ps(mul * 1e-3f));
#define DECL(i) __m512 a##i = _mm512_set1_ps(i * 1e-3f);
  PRISM_REPEAT16(DECL)
#undef DECL
  for (int64_t k = 0; k < iters; ++k) {
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
    PRISM_REPEAT16(STEP)
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define RED(i) s = _mm512_add_ps(s, a##i);
  PRISM_REPEAT16(RED)
#undef RED
  return HSum(s);
}

__attribute__((target("avx512f,avx512fp16"))) float Fp16Fma(int64_t iters, float mul, float add) {
  __m512h b = _mm512_set1_ph((_Float16)mul), c = _mm512_set1_ph((_Float16)add);
#define DECL(i) __m512h a##i = _mm512_set1_ph((_Float16)(1.0f + i * 1e-2f));
  PRISM_REPEAT16(DECL)
#undef DECL
  for (int64_t k = 0; k < iters; ++k) {
#define STEP(i) a##i = _mm512_fmadd_ph(a##i, b, c);
    PRISM_REPEAT16(STEP)
#undef STEP
  }
  __m512h s = _mm512_setzero_ph();
#define RED(i) s = _mm512_add_ph(s, a##i);
  PRISM_REPEAT16(RED)
#undef RED
  alignas(64) _Float16 t[32];
  _mm512_store_ph(t, s);
  float r = 0;
  for (_Float16 x : t) r += (float)x;
  return r;
}

__attribute__((target("avx512f,avx512vnni"))) float Int8Vnni(int64_t iters, float mul, float add) {
  __m512i u = _mm512_set1_epi8((char)(int)(mul * 3)), s8 = _mm512_set1_epi8((char)(int)(add * 1e7f));
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
  PRISM_REPEAT16(DECL)
#undef DECL
  for (int64_t k = 0; k < iters; ++k) {
#define STEP(i) a##i = _mm512_dpbusd_epi32(a##i, u, s8);
    PRISM_REPEAT16(STEP)
#undef STEP
  }
  __m512i s = _mm512_setzero_si512();
#define RED(i) s = _mm512_add_epi32(s, a##i);
  PRISM_REPEAT16(RED)
#undef RED
  return HSumI(s);
}

struct ComputeKernel {
  const char* name;
  const char* instruction;
  const char* unit;  // "GFLOP/s" or "GOP/s"
  double ops_per_instruction;
  bool supported;
  float (*fn)(int64_t, float, float);
};

volatile float g_mul = 0.999999f, g_add = 1e-7f;

// Calibrates the iteration count to ~target_s on one thread, then measures best-of-`reps`
// aggregate throughput at each thread count.
std::vector<std::pair<int, double>> MeasureCompute(const ComputeKernel& k, const std::vector<int>& threads,
                                                   double target_s, int reps) {
  int64_t iters = 1 << 16;
  for (;;) {
    auto t0 = Clock::now();
    g_sink_f = k.fn(iters, g_mul, g_add);
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
      std::vector<float> res(t);
      double sec = RunParallel(t, [&](int i) { res[i] = k.fn(iters, g_mul, g_add); });
      for (float x : res) g_sink_f = x;
      double ops = double(iters) * kAcc * k.ops_per_instruction * t;
      best = std::max(best, ops / sec / 1e9);
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
  int max_threads = *std::max_element(threads.begin(), threads.end());

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
  auto has = [&](const char* n) {
    for (auto& f : features)
      if (std::strcmp(f.name, n) == 0) return f.on;
    return false;
  };

  // ---- memory bandwidth
  size_t n = mib * (1024 * 1024 / sizeof(float));
  float* data = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!data) {
    std::fprintf(stderr, "prism_roofline_probe: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  // First touch from max_threads threads, in the same slices the measurement reads.
  {
    size_t per = (n / max_threads) & ~size_t(15);
    RunParallel(max_threads, [&](int t) {
      size_t begin = per * t, end = t == max_threads - 1 ? n : begin + per;
      for (size_t i = begin; i < end; ++i) data[i] = (float)(i & 1023) * 1e-6f;
    });
  }
  const char* bw_isa = has("avx512f") ? "avx512f" : has("avx2") ? "avx2" : "scalar";
  int passes = quick ? 3 : 5;
  std::vector<std::pair<int, BandwidthResult>> bw;
  for (int t : threads) bw.push_back({t, MeasureBandwidth(data, n, t, passes, bw_isa)});
  std::free(data);

  // ---- peak compute
  std::vector<ComputeKernel> kernels = {
      {"fp32_fma", "vfmadd231ps zmm (AVX-512F)", "GFLOP/s", 16 * 2, has("avx512f"), Fp32Fma512},
      {"fp32_fma256", "vfmadd231ps ymm (AVX2/FMA)", "GFLOP/s", 8 * 2, has("avx2") && has("fma"), Fp32Fma256},
      {"bf16_dot", "vdpbf16ps zmm (AVX512_BF16)", "GFLOP/s", 32 * 2, has("avx512f") && has("avx512bf16"), Bf16Dot},
      {"fp16_fma", "vfmadd231ph zmm (AVX512_FP16)", "GFLOP/s", 32 * 2, has("avx512f") && has("avx512fp16"), Fp16Fma},
      {"int8_vnni", "vpdpbusd zmm (AVX512_VNNI)", "GOP/s", 64 * 2, has("avx512f") && has("avx512vnni"), Int8Vnni},
  };
  double target_s = quick ? 0.1 : 0.2;
  int reps = quick ? 2 : 3;

  std::string out = "{\n";
  out += "  \"cpu\": \"" + JsonEscape(CpuModel()) + "\",\n";
  out += "  \"hardware_threads\": " + std::to_string(hw) + ",\n";
  out += "  \"features\": {";
  for (size_t i = 0; i < std::size(features); ++i)
    out += std::string(i ? ", " : "") + "\"" + features[i].name + "\": " + (features[i].on ? "true" : "false");
  out += "},\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "  \"bandwidth\": {\"array_mib\": %zu, \"isa\": \"%s\", \"passes\": %d, \"gbps\": {",
                mib, bw_isa, passes);
  out += buf;
  for (size_t i = 0; i < bw.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s\"%d\": %.2f", i ? ", " : "", bw[i].first, bw[i].second.gbps);
    out += buf;
  }
  out += "}, \"samples\": {";
  for (size_t i = 0; i < bw.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s\"%d\": [", i ? ", " : "", bw[i].first);
    out += buf;
    for (size_t j = 0; j < bw[i].second.passes.size(); ++j) {
      std::snprintf(buf, sizeof buf, "%s%.2f", j ? ", " : "", bw[i].second.passes[j]);
      out += buf;
    }
    out += "]";
  }
  out += "}},\n  \"compute\": {\n";
  bool first = true;
  for (auto& k : kernels) {
    out += first ? "" : ",\n";
    first = false;
    std::snprintf(buf, sizeof buf, "    \"%s\": {\"instruction\": \"%s\", \"unit\": \"%s\", \"supported\": %s", k.name,
                  k.instruction, k.unit, k.supported ? "true" : "false");
    out += buf;
    if (k.supported) {
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
