// Measures this machine's ceilings (read bandwidth, FP32 FMA rate) for roofline figures in receipts.
#pragma once

#include <chrono>
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

// CPU time that other processes used while a measurement ran, as a fraction of all cores' time
// (from /proc/stat, less this process's own time). Timings of a team of threads mean little when it
// is high: a thread that shares its core makes every split kernel wait for it.
class BusyMeter {
 public:
  BusyMeter();
  double OthersFraction() const;  // since construction; -1 where /proc/stat cannot be read

 private:
  double busy0_, self0_;
  std::chrono::steady_clock::time_point t0_;
};

// Drops a memory range from every cache level, so that the next read of it comes from memory.
void EvictFromCache(const void* p, size_t bytes);

}  // namespace prism
