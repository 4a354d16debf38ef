// Text generation: prompt prefill, then sampled decode steps streamed as text until a stop.
#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ir/error.h"

namespace prism {

using Clock = std::chrono::steady_clock;

namespace {

TokenLogprob LogprobOf(std::span<const float> logits, int32_t id, int top) {
  float max = -INFINITY;
  for (float v : logits) max = std::max(max, v);
  double sum = 0;
  for (float v : logits) sum += std::exp((double)v - max);
  const double log_z = max + std::log(sum);
  TokenLogprob lp{id, (float)(logits[id] - log_z), {}};
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int32_t)i;
  const size_t k = std::min<size_t>((size_t)std::max(top, 0), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + (ptrdiff_t)k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i) lp.top.emplace_back(ids[i], (float)(logits[ids[i]] - log_z));
  return lp;
}

}  // namespace

double GenerateResult::GenerateTokensPerSecond() const {
  // The first generated token comes from the prefill's logits; decode steps produce the rest.
  size_t steps = tokens.empty() ? 0 : tokens.size() - 1;
  return generate_seconds > 0 ? steps / generate_seconds : 0;
}

GenerateResult Generate(LanguageModel& lm, const std::string& prompt, const GenerateOptions& opts,
                        const std::function<void(const std::string&)>& on_text) {
  lm.Reset();
  std::vector<int32_t> ids = lm.tokenizer().Encode(prompt, opts.add_special);
  if (ids.empty()) throw Error("generate: the prompt encodes to no tokens; give a prompt or enable BOS");
  return GenerateFromTokens(lm, ids, opts, on_text);
}

SequenceDecoder::SequenceDecoder(const LanguageModel& lm, const std::vector<int32_t>& input,
                                 const GenerateOptions& opts, std::function<void(const std::string&)> on_text)
    : opts_(opts),
      on_text_(std::move(on_text)),
      vocab_((int32_t)lm.config().vocab_size),
      eos_(lm.config().eos_token_ids),
      sampler_(opts.sampler),
      stops_(opts.stop),
      decoder_(lm.tokenizer()),
      history_(input) {
  r_.prompt_tokens = (int)input.size();
  r_.finish_reason = "length";
  decoder_.Prime(input);
  if (lm.tokenizer().EosId() >= 0) eos_.push_back(lm.tokenizer().EosId());
}

void SequenceDecoder::Emit(const std::string& piece) {
  if (piece.empty()) return;
  r_.text += piece;
  if (on_text_) on_text_(piece);
}

void SequenceDecoder::End(const std::string& reason) {
  if (done_) return;
  done_ = true;
  r_.finish_reason = reason;
  if (!stops_.stopped() && reason != "cancelled") {
    auto res = stops_.Push(decoder_.Flush());
    Emit(res.emit);
    if (!res.stopped) Emit(stops_.Flush());
  }
}

int32_t SequenceDecoder::Next(const float* logits) {
  if (done_) return -1;
  if (opts_.cancel && opts_.cancel->load()) return End("cancelled"), -1;
  if ((int64_t)r_.tokens.size() >= opts_.max_tokens) return End("length"), -1;
  const int32_t next = sampler_.Sample(logits, vocab_, history_);
  const bool is_eos = std::find(eos_.begin(), eos_.end(), (int64_t)next) != eos_.end();
  if (opts_.stop_at_eos && is_eos) return End("stop"), -1;
  r_.tokens.push_back(next);
  history_.push_back(next);
  if (opts_.top_logprobs >= 0) {
    r_.logprobs.push_back(
        LogprobOf(std::span<const float>(logits, (size_t)vocab_), next, opts_.top_logprobs));
    if (opts_.on_token) opts_.on_token(r_.logprobs.back());
  } else if (opts_.on_token) {
    opts_.on_token({next, 0, {}});
  }
  auto res = stops_.Push(decoder_.Push(next));
  Emit(res.emit);
  if (res.stopped) return End("stop"), -1;
  if ((int64_t)r_.tokens.size() >= opts_.max_tokens) return End("length"), -1;
  return next;
}

GenerateResult GenerateFromTokens(LanguageModel& lm, const std::vector<int32_t>& input,
                                  const GenerateOptions& opts,
                                  const std::function<void(const std::string&)>& on_text) {
  SequenceDecoder d(lm, input, opts, on_text);
  auto t0 = Clock::now();
  std::vector<float> logits = lm.Forward(input);
  auto t1 = Clock::now();
  for (int32_t next; (next = d.Next(logits.data())) >= 0;) {
    if (lm.position() + 1 > lm.max_context()) {
      d.End("context");
      break;
    }
    logits = lm.Forward({next});
  }
  GenerateResult& r = d.result();
  r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.generate_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return std::move(r);
}

}  // namespace prism
