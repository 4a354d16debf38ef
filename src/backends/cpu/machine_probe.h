// Measures this machine's ceilings (read bandwidth, FP32 FMA rate) for roofline figures in receipts.
#pragma once

#include <string>

namespace prism {

struct MachinePeaks {
  std::string cpu;
  int threads = 1;
  double read_gbps = 0;    // streaming read bandwidth, GB/s
  double fp32_gflops = 0;  // fused multiply-add rate, GFLOP/s
};

// Runs the probe (about half a second) once per process and thread count.
const MachinePeaks& ProbeMachine(int threads);
std::string CpuModelName();

// Drops a memory range from every cache level, so that the next read of it comes from memory.
void EvictFromCache(const void* p, size_t bytes);

}  // namespace prism
