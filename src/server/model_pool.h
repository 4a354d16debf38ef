// The models a server offers by name: each loaded on first use, unloaded after it has been idle for a
// while (scale to zero), and least recently used first when loading another would pass a memory budget.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/engine.h"

namespace prism {

struct ModelSpec {
  std::string name, path;
};

struct PoolOptions {
  double idle_unload_seconds = 0;  // 0: never unload an idle model
  int64_t memory_budget_bytes =
      0;  // 0: no budget; else the loaded models' files stay within it where they can
};

class ModelPool {
 public:
  using Loader = std::function<std::unique_ptr<Engine>(const ModelSpec&)>;
  ModelPool(std::vector<ModelSpec> specs, PoolOptions opts, Loader load);
  ~ModelPool();
  std::vector<std::string> names() const;
  const std::string& default_name() const { return specs_.front().name; }
  // The named model's engine ("" = the first), loaded if it is not (other requests for it wait for the
  // same load). Throws ApiError: 404 for an unknown name, 503 when it fails to load.
  std::shared_ptr<Engine> Get(const std::string& name);
  bool Loaded(const std::string& name) const;
  // For /metrics.
  struct Stats {
    int64_t loaded = 0, loads = 0, unloads = 0, queued = 0, running = 0;
    double load_seconds = 0;  // summed over loads
    EngineStats kv;           // summed over loaded models
  };
  Stats stats() const;
  // Every loaded model finishes what it accepted; new requests are the server's to refuse.
  void Drain();

 private:
  struct Entry {
    ModelSpec spec;
    int64_t bytes = 0;  // its files on disk: what the budget counts
    std::shared_ptr<Engine> engine;
    bool loading = false;
    std::chrono::steady_clock::time_point last_used;
  };
  static bool Idle(const Entry& e);  // loaded, and nothing queued, running or holding it
  void Unload(Entry& e);
  void Reap();

  std::vector<ModelSpec> specs_;
  PoolOptions opts_;
  Loader load_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  Stats stats_;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace prism
