// Text generation: prompt prefill, then sampled decode steps streamed as text until a stop.
#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ir/error.h"
#include "sampling/stop_strings.h"

namespace prism {

using Clock = std::chrono::steady_clock;

namespace {

TokenLogprob LogprobOf(const std::vector<float>& logits, int32_t id, int top) {
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

GenerateResult GenerateFromTokens(LanguageModel& lm, const std::vector<int32_t>& input,
                                  const GenerateOptions& opts,
                                  const std::function<void(const std::string&)>& on_text) {
  GenerateResult r;
  r.prompt_tokens = (int)input.size();
  Sampler sampler(opts.sampler);
  StopStringMatcher stops(opts.stop);
  StreamDecoder decoder(lm.tokenizer());
  decoder.Prime(input);
  std::vector<int32_t> history = input;
  std::vector<int64_t> eos = lm.config().eos_token_ids;
  if (lm.tokenizer().EosId() >= 0) eos.push_back(lm.tokenizer().EosId());
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    r.text += piece;
    if (on_text) on_text(piece);
  };

  auto t0 = Clock::now();
  std::vector<float> logits = lm.Forward(input);
  auto t1 = Clock::now();
  r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
  const int32_t vocab = (int32_t)lm.config().vocab_size;
  r.finish_reason = "length";
  for (int i = 0; i < opts.max_tokens; ++i) {
    if (opts.cancel && opts.cancel->load()) {
      r.finish_reason = "cancelled";
      break;
    }
    int32_t next = sampler.Sample(logits.data(), vocab, history);
    bool is_eos = false;
    for (int64_t e : eos) is_eos = is_eos || e == next;
    if (opts.stop_at_eos && is_eos) {
      r.finish_reason = "stop";
      break;
    }
    r.tokens.push_back(next);
    history.push_back(next);
    if (opts.top_logprobs >= 0) {
      r.logprobs.push_back(LogprobOf(logits, next, opts.top_logprobs));
      if (opts.on_token) opts.on_token(r.logprobs.back());
    } else if (opts.on_token) {
      opts.on_token({next, 0, {}});
    }
    auto res = stops.Push(decoder.Push(next));
    emit(res.emit);
    if (res.stopped) {
      r.finish_reason = "stop";
      break;
    }
    if (i + 1 == opts.max_tokens) break;
    if (lm.position() + 1 > lm.max_context()) {
      r.finish_reason = "context";
      break;
    }
    logits = lm.Forward({next});
  }
  if (!stops.stopped() && r.finish_reason != "cancelled") {
    auto res = stops.Push(decoder.Flush());
    emit(res.emit);
    if (!res.stopped) emit(stops.Flush());
  }
  r.generate_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return r;
}

}  // namespace prism
