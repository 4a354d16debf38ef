// Measures this machine's ceilings (read bandwidth, peak rate of each kind of multiply-add) for
// roofline figures in receipts.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace prism {

struct MachinePeaks {
  std::string cpu;
  int threads = 1;
  double read_gbps = 0;    // streaming read bandwidth, GB/s
  double fp32_gflops = 0;  // f32 fused multiply-add rate (AVX-512, else AVX2), GFLOP/s
  // Rates of the other multiply-add instructions where the CPU has them (0 where not): AVX512_FP16
  // FMA, AVX512_BF16 dot products, AVX512-VNNI int8 dot products, AMX bf16 and int8 tile products, and
  // AVX2's byte products (vpmaddubsw: u8 x s8, pairs summed to 16 bits; the AVX2 int8 tiles' bound).
  double fp16_gflops = 0, bf16_dot_gflops = 0, int8_vnni_gops = 0, amx_bf16_gflops = 0, amx_int8_gops = 0;
  double int8_avx2_gops = 0;

  // The fastest rate at which this CPU can multiply an activation by weights of this type (for a
  // GEMM's roofline floor; f32/f16 on AMX count three bf16 products each), and where it comes from.
  double GemmPeak(DType wt) const;
  const char* GemmPeakBasis(DType wt) const;
};

// The probe's register-only loops, one per multiply-add instruction: `iters` rounds over independent
// accumulators (enough to cover latency x issue ports); each returns the operations it did (2 per
// multiply-add), or 0 where this CPU lacks the instruction (AMX: or the kernel withholds it).
enum class PeakLoop { Fp32Fma, Fp32Fma256, Fp16Fma, Bf16Dot, Int8Vnni, Int8Avx2, AmxBf16, AmxInt8 };
bool PeakLoopSupported(PeakLoop loop);
double RunPeakLoop(PeakLoop loop, int64_t iters);

// The best sustained read bandwidth `threads` threads reach over `bytes` of memory (far beyond the
// caches; advised to huge pages): each thread reads its own slice as 1, 2 or 4 interleaved sequential
// streams, with software prefetch none, 1 or 4 KiB ahead; every variant measured in each of `passes`
// passes after a warm-up one, the best kept (noise only ever lowers a reading). `samples`: each
// pass's best, for the spread between passes. 0 GB/s below AVX2.
struct ReadBandwidth {
  double gbps = 0;
  std::string variant;  // the one that gave gbps
  std::vector<double> samples;
};
ReadBandwidth MeasureReadBandwidth(int threads, size_t bytes, int passes);

// One read of `bytes` at p (a multiple of 256 read; the rest ignored) as the probe reads: `streams` (1, 2
// or 4) interleaved sequential streams, software prefetch `ahead` bytes in front (0: none). Returns a sum
// of what it read, for the caller to keep. For timing a kernel against a plain read of the same memory.
float ReadMemory(const void* p, size_t bytes, int streams, int64_t ahead);

// Runs the probe (about a second) once per process and thread count.
const MachinePeaks& ProbeMachine(int threads);
std::string CpuModelName();

// Drops a memory range from every cache level, so that the next read of it comes from memory.
void EvictFromCache(const void* p, size_t bytes);

}  // namespace prism
