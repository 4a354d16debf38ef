// The engine: one model, its bounded queue of requests and the worker that steps them together.
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
    : name_(std::move(name)), lm_(std::move(lm)), opts_(opts), metrics_(metrics) {
  if (lm_->kv_block() <= 0) throw Error("engine: the model must be loaded for batched steps");
  pool_ = std::make_unique<KvBlockPool>((int32_t)lm_->kv_blocks(), (int32_t)lm_->kv_block());
  scheduler_ = std::make_unique<BatchScheduler>(pool_.get(), opts.batch);
  Warm();
  Publish();
  worker_ = std::thread([this] { Loop(); });
}

Engine::Engine(std::string name, std::unique_ptr<TextEncoder> encoder, Metrics* metrics)
    : name_(std::move(name)), encoder_(std::move(encoder)), metrics_(metrics) {
  encoder_->Embed(encoder_->Tokenize("warm"));  // weights packed before the first request
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& job : queue_) job->Cancel();
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::vector<std::vector<float>> Engine::Embed(const EmbeddingRequest& r, int64_t* prompt_tokens) {
  if (!encoder_)
    throw BadRequest("model '" + name_ + "' generates text; /v1/embeddings needs an embedding model",
                     "model");
  const TextEncoder& enc = *encoder_;
  if (r.dimensions && *r.dimensions != enc.dim())
    throw BadRequest("model '" + name_ + "' makes " + std::to_string(enc.dim()) +
                         "-dimensional embeddings, not " + std::to_string(*r.dimensions),
                     "dimensions");
  // Every input's tokens first: a bad one fails the request before any work.
  std::vector<std::vector<int32_t>> inputs;
  for (const std::string& t : r.texts) inputs.push_back(enc.Tokenize(t));
  for (const std::vector<int32_t>& ids : r.token_ids) {
    for (int32_t id : ids)
      if (id >= enc.config().vocab_size)
        throw BadRequest("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(enc.config().vocab_size) + ")",
                         "input");
    inputs.push_back(enc.WithSpecials(ids));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_) throw ApiError(503, "server_error", "the server is shutting down");
    ++running_;
  }
  std::vector<std::vector<float>> out;
  try {
    out = enc.EmbedMany(inputs);
    for (const std::vector<int32_t>& ids : inputs) *prompt_tokens += (int64_t)ids.size();
  } catch (...) {
    Finished();
    throw;
  }
  Finished();
  return out;
}

void Engine::Finished() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  idle_cv_.notify_all();
}

std::shared_ptr<Job> Engine::Submit(const ServeRequest& r) {
  if (!lm_)
    throw BadRequest("model '" + name_ + "' makes embeddings; use /v1/embeddings",
                     r.chat ? "messages" : "prompt");
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
  const int64_t context = std::min(lm_->max_context(), lm_->kv_blocks() * lm_->kv_block());
  const int64_t room = context - (int64_t)job->ids_.size();
  if (room < 1)
    throw BadRequest("the prompt is " + std::to_string(job->ids_.size()) + " tokens; the context holds " +
                         std::to_string(context),
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
    if (queue_.size() + waiting_ >= opts_.max_queue)
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
  return queue_.size() + waiting_;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Engine::Warm() {
  // Decode (1 token), a batch (kBatchSeq) and a prefill (kBatchSeqMax): throwaway K/V in free blocks.
  for (int64_t n : {int64_t{1}, kBatchSeq, kBatchSeqMax}) {
    const int64_t blocks = (n + lm_->kv_block() - 1) / lm_->kv_block();
    if (n > lm_->max_context() || blocks > lm_->kv_blocks()) break;
    std::vector<int32_t> tokens(n, 0), table(blocks);
    for (int64_t b = 0; b < blocks; ++b) table[b] = (int32_t)b;
    lm_->StepBatch({{tokens, 0, table, true}});
  }
}

void Engine::Publish() {
  waiting_ = scheduler_->waiting();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = {pool_->used_blocks(),
            pool_->num_blocks(),
            pool_->prefix_hit_tokens(),
            pool_->prefix_query_tokens(),
            preemptions_,
            steps_,
            step_sequences_};
}

void Engine::Loop() {
  for (;;) {
    std::deque<std::shared_ptr<Job>> incoming;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !choices_.empty(); });
      stopping = stopping_;
      if (stopping && queue_.empty() && choices_.empty()) return;
      incoming.swap(queue_);
      running_ += incoming.size();
    }
    for (const auto& job : incoming) Admit(job);
    // Cancelled requests (and every request when the engine stops) leave the batch now, their blocks freed.
    for (auto it = choices_.begin(); it != choices_.end();) {
      Choice& c = *it++;
      if (stopping) c.job->Cancel();
      if (c.job->cancel_) Close(&c);
    }
    if (!choices_.empty()) Step();
    Publish();
  }
}

void Engine::Admit(const std::shared_ptr<Job>& job) {
  job->open_choices_ = job->n_;
  for (int i = 0; i < job->n_; ++i) {
    Choice& c = choices_.emplace_back();
    c.job = job;
    c.index = i;
    c.options = job->options_;
    c.options.sampler.seed += (uint64_t)i;  // n choices: n draws
    c.options.on_token = [this, &c](const TokenLogprob& lp) {
      const Clock::time_point now = Clock::now();
      Job& j = *c.job;
      if (j.first_token_)
        metrics_->FirstToken(std::chrono::duration<double>(now - j.arrived_).count());
      else if (c.last != Clock::time_point())
        metrics_->InterToken(std::chrono::duration<double>(now - c.last).count());
      j.first_token_ = false;
      c.last = now;
      j.completion_tokens++;
      if (c.options.top_logprobs >= 0) c.pending.push_back(lp);
    };
    c.decoder = std::make_unique<SequenceDecoder>(*lm_, job->ids_, c.options, [&c](const std::string& text) {
      c.job->Push({c.index, text, std::move(c.pending), ""});
      c.pending.clear();
    });
    c.seq.id = next_seq_id_++;
    c.seq.tokens = job->ids_;
    by_seq_[&c.seq] = &c;
    try {
      scheduler_->Add(&c.seq);
    } catch (const Error& e) {
      Close(&c, e.what());
    }
  }
}

void Engine::Step() {
  StepPlan plan = scheduler_->Next();
  preemptions_ += (int64_t)plan.preempted.size();
  for (SchedSeq* s : plan.rejected) {  // grew past the whole pool
    Choice* c = by_seq_.at(s);
    c->decoder->End("length");
    Close(c);
  }
  std::vector<BatchPiece> pieces;
  for (const StepPiece& p : plan.pieces)
    pieces.push_back({std::span<const int32_t>(p.seq->tokens).subspan(p.start, p.count), p.start,
                      p.seq->kv.blocks, p.logits});
  LogitRows logits;
  try {
    const int64_t bs = pool_->block_size();
    for (const KvBlockCopy& c : plan.copies)  // partial prefix matches, copied on write before the step
      lm_->CopyKvRows((int64_t)c.from * bs, (int64_t)c.to * bs, c.rows);
    for (const KvBlockCopy& c : plan.copies) pool_->FinishCopy(c);
    plan.copies.clear();
    if (plan.pieces.empty()) return;
    logits = lm_->StepBatch(pieces);
  } catch (const std::exception& e) {  // the step failed: every choice in it fails with its message
    for (const KvBlockCopy& c : plan.copies) pool_->FinishCopy(c);
    for (const StepPiece& p : plan.pieces)
      if (by_seq_.count(p.seq)) Close(by_seq_.at(p.seq), e.what());
    return;
  }
  scheduler_->Done(plan);
  steps_++;
  step_sequences_ += (int64_t)plan.pieces.size();
  size_t r = 0;
  for (const StepPiece& p : plan.pieces) {
    if (!p.logits) continue;
    Choice* c = by_seq_.at(p.seq);
    const int32_t next = c->decoder->Next(logits[r++].data());
    if (next >= 0 && (int64_t)c->seq.tokens.size() + 1 > lm_->max_context()) c->decoder->End("context");
    if (c->decoder->done()) {
      Close(c);
    } else {
      c->seq.tokens.push_back(next);
    }
  }
}

void Engine::Close(Choice* c, const std::string& error) {
  scheduler_->Remove(&c->seq);
  by_seq_.erase(&c->seq);
  Job& job = *c->job;
  if (!error.empty()) {
    job.Cancel();  // the request fails as a whole: its other choices stop too
    job.error_once_ = error;
  } else if (c->decoder->done() && c->decoder->result().finish_reason != "cancelled") {
    job.Push({c->index, "", std::move(c->pending),
              c->decoder->result().finish_reason == "stop" ? "stop" : "length"});
  }
  metrics_->Tokens(c->index == 0 ? job.prompt_tokens : 0, (int64_t)c->decoder->result().tokens.size());
  std::shared_ptr<Job> keep = c->job;
  choices_.remove_if([c](const Choice& x) { return &x == c; });
  if (--keep->open_choices_ == 0) {
    keep->Finish(keep->error_once_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_--;
    }
    idle_cv_.notify_all();
  }
}

}  // namespace prism
