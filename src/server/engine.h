// The engine: one model, its bounded queue of requests and the worker that generates them, streaming each
// choice's text to the request's job as it is made.
//
// Requests run one at a time today (a LanguageModel holds one sequence's KV cache); the queue, the
// cancellation and the event stream are the contract a batching scheduler keeps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/generator.h"
#include "server/api_request.h"
#include "server/metrics.h"

namespace prism {

// Something a choice produced: text (with the logprobs of the tokens it completes), or its end.
struct ChoiceEvent {
  int index = 0;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;  // non-empty: the choice is done ("stop", "length")
};

// One request in the engine: the HTTP side reads its events and may cancel it.
class Job {
 public:
  // Waits up to `wait` for the next event; false when none came (check done()).
  bool Next(ChoiceEvent* ev, std::chrono::milliseconds wait);
  bool done() const;  // every choice finished (or failed, or was cancelled) and every event read
  void Cancel() { cancel_ = true; }
  std::string error() const;  // set when generation failed (the response is a 500)
  int prompt_tokens = 0;
  std::atomic<int> completion_tokens{0};

 private:
  friend class Engine;
  void Push(ChoiceEvent ev);
  void Finish(const std::string& error = "");
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceEvent> events_;
  bool finished_ = false;
  std::string error_;
  std::atomic<bool> cancel_{false};
  // What the worker runs.
  std::vector<int32_t> ids_;
  GenerateOptions options_;
  int n_ = 1;
  std::chrono::steady_clock::time_point arrived_ = std::chrono::steady_clock::now();
};

struct EngineOptions {
  size_t max_queue = 64;  // requests waiting beyond the running one; more get 429
};

class Engine {
 public:
  Engine(std::string name, std::unique_ptr<LanguageModel> lm, EngineOptions opts, Metrics* metrics);
  ~Engine();
  const std::string& name() const { return name_; }
  const LanguageModel& model() const { return *lm_; }
  // Prepares the request (chat template, tokens, limits) and queues it. Throws ApiError: 400 for a
  // prompt that does not fit the context or a chat without a template, 429 when the queue is full,
  // 503 while draining.
  std::shared_ptr<Job> Submit(const ServeRequest& r);
  // Stops taking requests and waits until every accepted one has finished.
  void Drain();
  size_t queued() const;
  size_t running() const { return running_; }

 private:
  void Loop();
  void Run(Job& job);

  std::string name_;
  std::unique_ptr<LanguageModel> lm_;
  EngineOptions opts_;
  Metrics* metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<size_t> running_{0};
  bool stopping_ = false, draining_ = false;
  std::thread worker_;
};

}  // namespace prism
