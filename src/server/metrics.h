// The server's counters and latency histograms, rendered in Prometheus' text format for /metrics.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace prism {

class Metrics {
 public:
  void Request(int status);         // a request answered with this HTTP status
  void FirstToken(double seconds);  // time to first token
  void InterToken(double seconds);  // time between two tokens of one response
  void Tokens(int64_t prompt, int64_t generated);
  // Gauges, sampled as /metrics is read.
  struct Gauges {
    int64_t queued = 0, running = 0;  // over every loaded model
    int64_t models_loaded = 0, loads = 0, unloads = 0;
    double load_seconds = 0;
    // KV pools and batching, over every loaded model.
    int64_t kv_blocks_used = 0, kv_blocks = 0, prefix_hit_tokens = 0, prefix_query_tokens = 0,
            preemptions = 0;
    int64_t steps = 0, step_sequences = 0;
  };
  std::string Render(const Gauges& g) const;

 private:
  struct Histogram {
    std::vector<double> bounds;  // upper bounds, seconds
    std::vector<int64_t> counts;
    double sum = 0;
    int64_t count = 0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
    void Observe(double v);
    void Render(const std::string& name, const std::string& help, std::string& out) const;
  };
  mutable std::mutex mu_;
  std::map<int, int64_t> requests_;  // by status
  Histogram ttft_{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram itl_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
};

}  // namespace prism
