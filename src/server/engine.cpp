// The engine: one model, its bounded queue of requests and the worker that generates them.
#include "server/engine.h"

#include "ir/error.h"
#include "server/api_error.h"

namespace prism {

using Clock = std::chrono::steady_clock;

bool Job::Next(ChoiceEvent* ev, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return !events_.empty() || finished_; });
  if (events_.empty()) return false;
  *ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool Job::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ && events_.empty();
}

std::string Job::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Job::Push(ChoiceEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

void Job::Finish(const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

Engine::Engine(std::string name, std::unique_ptr<LanguageModel> lm, EngineOptions opts, Metrics* metrics)
    : name_(std::move(name)), lm_(std::move(lm)), opts_(opts), metrics_(metrics), worker_([this] {
        Loop();
      }) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& job : queue_) job->Cancel();
  }
  cv_.notify_all();
  worker_.join();
}

std::shared_ptr<Job> Engine::Submit(const ServeRequest& r) {
  auto job = std::make_shared<Job>();
  std::string prompt = r.prompt;
  if (r.chat) {
    if (!lm_->chat_template())
      throw BadRequest("model '" + name_ + "' has no chat template; use /v1/completions", "messages");
    try {
      prompt = lm_->chat_template()->Render(r.messages, true, lm_->chat_variables());
    } catch (const Error& e) {
      throw BadRequest(std::string("the chat template refused the messages: ") + e.what(), "messages");
    }
  }
  // A chat template writes its own BOS; a plain prompt gets what the tokenizer adds.
  job->ids_ = lm_->tokenizer().Encode(prompt, !r.chat);
  if (job->ids_.empty()) throw BadRequest("the prompt encodes to no tokens", r.chat ? "messages" : "prompt");
  const int64_t room = lm_->max_context() - (int64_t)job->ids_.size();
  if (room < 1)
    throw BadRequest("the prompt is " + std::to_string(job->ids_.size()) + " tokens; the context holds " +
                         std::to_string(lm_->max_context()),
                     r.chat ? "messages" : "prompt");
  job->prompt_tokens = (int)job->ids_.size();
  GenerateOptions& go = job->options_;
  go.max_tokens = (int)std::min<int64_t>(r.max_tokens.value_or(room), room);
  go.sampler.temperature = r.temperature;
  go.sampler.top_p = r.top_p;
  go.sampler.top_k = r.top_k;
  go.sampler.min_p = r.min_p;
  go.sampler.presence_penalty = r.presence_penalty;
  go.sampler.frequency_penalty = r.frequency_penalty;
  go.sampler.repeat_last_n = -1;  // OpenAI's penalties count the whole completion
  go.sampler.seed = r.seed ? *r.seed : (uint64_t)Clock::now().time_since_epoch().count();
  go.stop = r.stop;
  go.top_logprobs = r.logprobs;
  go.cancel = &job->cancel_;
  job->n_ = r.n;
  job->arrived_ = r.arrived;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_) throw ApiError(503, "server_error", "the server is shutting down");
    if (queue_.size() >= opts_.max_queue)
      throw ApiError(
          429, "rate_limit_error",
          "the queue is full (" + std::to_string(opts_.max_queue) + " requests waiting); retry later");
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void Engine::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

size_t Engine::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Engine::Loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = 1;
    }
    Run(*job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = 0;
    }
    idle_cv_.notify_all();
  }
}

void Engine::Run(Job& job) {
  try {
    bool first = true;
    Clock::time_point last = Clock::now();
    for (int i = 0; i < job.n_ && !job.cancel_; ++i) {
      GenerateOptions go = job.options_;
      go.sampler.seed += (uint64_t)i;     // n choices: n draws
      std::vector<TokenLogprob> pending;  // logprobs of tokens whose text has not come out yet
      go.on_token = [&](const TokenLogprob& lp) {
        const Clock::time_point now = Clock::now();
        if (first)
          metrics_->FirstToken(std::chrono::duration<double>(now - job.arrived_).count());
        else
          metrics_->InterToken(std::chrono::duration<double>(now - last).count());
        first = false;
        last = now;
        job.completion_tokens++;
        if (go.top_logprobs >= 0) pending.push_back(lp);
      };
      lm_->Reset();
      GenerateResult res = GenerateFromTokens(*lm_, job.ids_, go, [&](const std::string& text) {
        job.Push({i, text, std::move(pending), ""});
        pending.clear();
      });
      metrics_->Tokens(job.prompt_tokens, (int64_t)res.tokens.size());
      if (res.finish_reason == "cancelled") break;
      job.Push({i, "", std::move(pending), res.finish_reason == "stop" ? "stop" : "length"});
    }
    job.Finish();
  } catch (const std::exception& e) {
    job.Finish(e.what());
  }
}

}  // namespace prism
