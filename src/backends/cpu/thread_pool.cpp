// A fixed team of worker threads that run parallel loops with little wake-up overhead.
#include "backends/cpu/thread_pool.h"

#include <cstdlib>

namespace prism {

void SpinBarrier::Wait() {
  if (n_ <= 1) return;
  int g = generation_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    count_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    return;
  }
  // Spin first (the wait is usually microseconds), then yield so that an oversubscribed machine
  // does not starve the thread being waited for.
  for (int spin = 0; generation_.load(std::memory_order_acquire) == g; ++spin) {
    if (spin < 4000)
      __builtin_ia32_pause();
    else
      std::this_thread::yield();
  }
}

int DefaultThreadCount() {
  if (const char* s = std::getenv("PRISM_THREADS"); s && std::atoi(s) > 0) return std::atoi(s);
  unsigned n = std::thread::hardware_concurrency();
  return n ? (int)n : 1;
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Drain(uint64_t generation) {
  const uint64_t tag = (generation & 0xffffffffu) << 32;
  for (uint64_t v = next_.load(std::memory_order_acquire);;) {
    // Read after next_: a matching tag means this loop's job is published. Should the job change
    // meanwhile (every task claimed, the next loop begun), the claim below fails.
    const uint64_t n = (uint64_t)job_size_.load(std::memory_order_acquire);
    if ((v & ~0xffffffffull) != tag || (v & 0xffffffffu) >= n) return;
    const auto* fn = job_.load(std::memory_order_acquire);
    if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
    (*fn)((int)(v & 0xffffffffu));
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    // Spin briefly (decode steps issue many small loops back to back), then sleep.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 20000; ++spin) g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      generation_.wait(seen);
      continue;
    }
    seen = g;
    if (stop_) return;
    Drain(g);
  }
}

void ThreadPool::ParallelFor(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int t = 0; t < n; ++t) fn(t);
    return;
  }
  // Close the previous loop to late claimers before changing the job they would read: a worker
  // still draining it holds a stale claim word, and its claim now fails. Then publish the job,
  // then the tagged counter that opens it.
  const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
  next_.store(next_.load(std::memory_order_relaxed) | 0xffffffffu, std::memory_order_relaxed);
  job_.store(&fn, std::memory_order_release);
  job_size_.store(n, std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  next_.store((g & 0xffffffffu) << 32, std::memory_order_release);
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();
  Drain(g);
  for (int spin = 0; done_.load(std::memory_order_acquire) < n; ++spin)
    if (spin > 4000) std::this_thread::yield();
}

}  // namespace prism
