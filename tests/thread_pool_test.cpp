// The CPU thread pool and spin barrier: every task runs exactly once, even on an oversubscribed machine.
#include "backends/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <vector>

namespace prism {
namespace {

// Runs body on another thread and fails (ending the process) if it has not finished in time: a
// lost task shows as a hang, and the test should say so rather than wait for ctest's timeout.
template <typename F>
void WithinSeconds(int seconds, F body) {
  auto done = std::async(std::launch::async, body);
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "deadlock: the loop did not finish within %d s\n", seconds);
    std::_Exit(1);
  }
  done.get();
}

TEST(ThreadPool, EveryTaskRunsOnceAcrossManyShortLoops) {
  // More threads than this machine has cores, so that workers are preempted mid-loop.
  for (int threads : {2, 3, 5}) {
    WithinSeconds(120, [threads] {
      ThreadPool pool(threads);
      std::vector<std::atomic<int>> runs(16);
      for (int loop = 0; loop < 20000; ++loop) {
        int n = 1 + loop % 16;
        for (int t = 0; t < n; ++t) runs[t].store(0, std::memory_order_relaxed);
        pool.ParallelFor(n, [&](int t) { runs[t].fetch_add(1, std::memory_order_relaxed); });
        for (int t = 0; t < n; ++t) ASSERT_EQ(runs[t].load(), 1) << "loop " << loop << " task " << t;
      }
    });
  }
}

TEST(ThreadPool, TeamsMeetAtBarriersBetweenPhases) {
  // The megakernel's pattern: one task per team member, phases separated by a spin barrier.
  WithinSeconds(120, [] {
    const int threads = 3;
    ThreadPool pool(threads);
    SpinBarrier barrier(threads);
    std::vector<int> phase_of(threads);
    for (int loop = 0; loop < 2000; ++loop) {
      std::atomic<int> mismatches{0};
      pool.ParallelFor(threads, [&](int t) {
        for (int phase = 0; phase < 8; ++phase) {
          phase_of[t] = phase;
          barrier.Wait();
          for (int o = 0; o < threads; ++o) mismatches += phase_of[o] != phase;
          barrier.Wait();
        }
      });
      ASSERT_EQ(mismatches.load(), 0) << "loop " << loop;
    }
  });
}

}  // namespace
}  // namespace prism
