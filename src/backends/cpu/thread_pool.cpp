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
    if (spin < 4000) __builtin_ia32_pause();
    else std::this_thread::yield();
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

void ThreadPool::Drain() {
  for (int t; (t = next_.fetch_add(1)) < job_size_.load();) {
    (*job_.load())(t);
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
    Drain();
  }
}

void ThreadPool::ParallelFor(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int t = 0; t < n; ++t) fn(t);
    return;
  }
  // job_size_ is 0 while the job is swapped, so a straggler from the previous loop claims nothing.
  job_size_.store(0);
  job_.store(&fn);
  done_.store(0);
  next_.store(0);
  job_size_.store(n);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  Drain();
  for (int spin = 0; done_.load(std::memory_order_acquire) < n; ++spin)
    if (spin > 4000) std::this_thread::yield();
}

}  // namespace prism
