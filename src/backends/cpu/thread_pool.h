// A fixed team of worker threads that run parallel loops with little wake-up overhead.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace prism {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // the calling thread counts as one member of the team
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  int size() const { return (int)workers_.size() + 1; }
  // Runs fn(task) for every task in [0, n); returns when all have finished.
  void ParallelFor(int n, const std::function<void(int)>& fn);

 private:
  void WorkerLoop();
  std::vector<std::thread> workers_;
  void Drain(uint64_t generation);
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<int> job_size_{0};
  std::atomic<uint64_t> generation_{0};
  // The next task to claim, tagged with its loop's generation in the high 32 bits: a worker
  // still draining an earlier loop cannot claim (and so lose) a task of the current one.
  std::atomic<uint64_t> next_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
};

// A reusable barrier for a fixed team that spins (the waits between kernels are microseconds).
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void Wait();

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> generation_{0};
};

// Threads to use by default: $PRISM_THREADS, else the number of online CPUs.
int DefaultThreadCount();

}  // namespace prism
