// The server's counters and latency histograms in Prometheus' text format.
#include "server/metrics.h"

#include <cstdio>

namespace prism {

void Metrics::Histogram::Observe(double v) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) counts[i]++;
  sum += v;
  count++;
}

void Metrics::Histogram::Render(const std::string& name, const std::string& help, std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  char line[160];
  for (size_t i = 0; i < bounds.size(); ++i) {
    std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %lld\n", name.c_str(), bounds[i],
                  (long long)counts[i]);
    out += line;
  }
  std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name.c_str(),
                (long long)count, name.c_str(), sum, name.c_str(), (long long)count);
  out += line;
}

void Metrics::Request(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_[status]++;
}

void Metrics::FirstToken(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Observe(s);
}

void Metrics::InterToken(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.Observe(s);
}

void Metrics::Tokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

std::string Metrics::Render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out =
      "# HELP prism_requests_total Requests answered, by HTTP status.\n# TYPE prism_requests_total counter\n";
  for (const auto& [status, n] : requests_)
    out += "prism_requests_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  ttft_.Render("prism_time_to_first_token_seconds", "Time from a request's arrival to its first token.", out);
  itl_.Render("prism_inter_token_latency_seconds", "Time between consecutive tokens of one response.", out);
  out +=
      "# HELP prism_prompt_tokens_total Prompt tokens processed.\n# TYPE prism_prompt_tokens_total counter\n";
  out += "prism_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  out +=
      "# HELP prism_generated_tokens_total Tokens generated.\n# TYPE prism_generated_tokens_total counter\n";
  out += "prism_generated_tokens_total " + std::to_string(generated_tokens_) + "\n";
  out +=
      "# HELP prism_requests_queued Requests waiting for the engine.\n# TYPE prism_requests_queued gauge\n";
  out += "prism_requests_queued " + std::to_string(g.queued) + "\n";
  out +=
      "# HELP prism_requests_running Requests the engine is generating.\n# TYPE prism_requests_running "
      "gauge\n";
  out += "prism_requests_running " + std::to_string(g.running) + "\n";
  out += "# HELP prism_models_loaded Models in memory.\n# TYPE prism_models_loaded gauge\n";
  out += "prism_models_loaded " + std::to_string(g.models_loaded) + "\n";
  out += "# HELP prism_model_loads_total Models loaded (first use, or again after an unload).\n";
  out += "# TYPE prism_model_loads_total counter\nprism_model_loads_total " + std::to_string(g.loads) + "\n";
  out +=
      "# HELP prism_model_unloads_total Models unloaded (idle, or for another within the memory budget).\n";
  out += "# TYPE prism_model_unloads_total counter\nprism_model_unloads_total " + std::to_string(g.unloads) +
         "\n";
  auto gauge = [&](const char* name, const char* type, const char* help, int64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(v) + "\n";
  };
  gauge("prism_kv_blocks_used", "gauge", "KV cache blocks held by sequences.", g.kv_blocks_used);
  gauge("prism_kv_blocks", "gauge", "KV cache blocks in the pools.", g.kv_blocks);
  gauge("prism_prefix_cache_hit_tokens", "gauge",
        "Prompt tokens whose KV came from the prefix cache (loaded models).", g.prefix_hit_tokens);
  gauge("prism_prefix_cache_query_tokens", "gauge",
        "Prompt tokens looked up in the prefix cache (loaded models).", g.prefix_query_tokens);
  gauge("prism_preemptions", "gauge", "Sequences preempted for KV blocks and recomputed (loaded models).",
        g.preemptions);
  gauge("prism_batch_steps", "gauge", "Batched steps run (loaded models).", g.steps);
  gauge("prism_batch_step_sequences", "gauge", "Sequences those steps carried, summed (loaded models).",
        g.step_sequences);
  char line[96];
  std::snprintf(line, sizeof line, "%.6f", g.load_seconds);
  if (g.prefix_query_tokens > 0) {
    std::snprintf(line, sizeof line, "%.6f", (double)g.prefix_hit_tokens / (double)g.prefix_query_tokens);
    out += "# HELP prism_prefix_cache_hit_rate Share of looked-up prompt tokens found in the prefix cache.\n";
    out +=
        "# TYPE prism_prefix_cache_hit_rate gauge\nprism_prefix_cache_hit_rate " + std::string(line) + "\n";
  }
  std::snprintf(line, sizeof line, "%.6f", g.load_seconds);
  out += "# HELP prism_model_load_seconds_total Time spent loading models.\n";
  out += "# TYPE prism_model_load_seconds_total counter\nprism_model_load_seconds_total " +
         std::string(line) + "\n";
  return out;
}

}  // namespace prism
