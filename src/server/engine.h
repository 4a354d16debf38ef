// The engine: one model, its bounded queue of requests and the worker that runs them, many at once: each
// step carries the tokens of every running choice (continuous batching over the model's paged KV cache,
// runtime/batch_scheduler.h), streaming each choice's text to its request's job as it is made. An embedding
// model's engine has no worker: each /v1/embeddings request runs its inputs through the encoder in turn.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/batch_scheduler.h"
#include "runtime/generator.h"
#include "runtime/text_encoder.h"
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
  int open_choices_ = 0;     // worker only: choices not finished
  bool first_token_ = true;  // worker only: the next token is the response's first
  std::string error_once_;   // worker only: the first choice's failure, the job's error
};

struct EngineOptions {
  size_t max_queue = 64;   // sequences waiting for a place in the batch; more get 429
  SchedulerOptions batch;  // tokens per step, sequences running at once
};

// The engine's KV pool and batching, for /metrics.
struct EngineStats {
  int64_t kv_blocks_used = 0, kv_blocks = 0, prefix_hit_tokens = 0, prefix_query_tokens = 0, preemptions = 0;
  int64_t steps = 0, step_sequences = 0;  // batched steps run, and the sequences they carried
};

class Engine {
 public:
  // `lm` must be a batched model (LoadOptions::kv_block > 0).
  Engine(std::string name, std::unique_ptr<LanguageModel> lm, EngineOptions opts, Metrics* metrics);
  // An embedding model's engine: requests run on their own threads, one input at a time (no queue).
  Engine(std::string name, std::unique_ptr<TextEncoder> encoder, Metrics* metrics);
  ~Engine();
  const std::string& name() const { return name_; }
  const LanguageModel& model() const { return *lm_; }  // a language model's engine only (after Submit)
  // The request's embeddings in input order; *prompt_tokens gains the tokens embedded. Throws ApiError:
  // 400 for a language model's engine, a token id outside the vocabulary or other dimensions, 503 while
  // draining. Texts and token inputs longer than the model takes are truncated (as sentence-transformers).
  std::vector<std::vector<float>> Embed(const EmbeddingRequest& r, int64_t* prompt_tokens);
  // Prepares the request (chat template, tokens, limits) and queues it. Throws ApiError: 400 for a
  // prompt that does not fit the context or a chat without a template, 429 when the queue is full,
  // 503 while draining.
  std::shared_ptr<Job> Submit(const ServeRequest& r);
  // Stops taking requests and waits until every accepted one has finished.
  void Drain();
  size_t queued() const;
  size_t running() const { return running_; }  // requests taken from the queue and not finished
  EngineStats stats() const;

 private:
  // One of a request's n choices: its sequence in the batch and its decoding.
  struct Choice {
    std::shared_ptr<Job> job;
    int index = 0;
    GenerateOptions options;  // the job's, with this choice's seed
    SchedSeq seq;
    std::unique_ptr<SequenceDecoder> decoder;
    std::vector<TokenLogprob> pending;  // logprobs of tokens whose text has not come out yet
    std::chrono::steady_clock::time_point last;
  };
  void Loop();
  void Admit(const std::shared_ptr<Job>& job);
  void Step();
  // Sends the choice's end (unless cancelled), counts it, and finishes its job after its last choice.
  void Close(Choice* c, const std::string& error = "");
  void Publish();  // the atomics other threads read
  void Warm();  // one step in each bucket's size: weights are packed for every form before the first request
  void Finished();  // an embedding request is done

  std::string name_;
  std::unique_ptr<LanguageModel> lm_;     // a language model's engine, or
  std::unique_ptr<TextEncoder> encoder_;  // an embedding model's
  EngineOptions opts_;
  Metrics* metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<size_t> running_{0}, waiting_{0};
  bool stopping_ = false, draining_ = false;
  // Worker only.
  std::unique_ptr<KvBlockPool> pool_;
  std::unique_ptr<BatchScheduler> scheduler_;
  std::list<Choice> choices_;
  std::unordered_map<const SchedSeq*, Choice*> by_seq_;
  int64_t next_seq_id_ = 0, preemptions_ = 0, steps_ = 0, step_sequences_ = 0;
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::thread worker_;
};

}  // namespace prism
