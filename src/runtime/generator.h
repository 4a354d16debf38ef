// Text generation: prompt prefill, then sampled decode steps streamed as text until a stop.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/language_model.h"
#include "sampling/sampler.h"
#include "sampling/stop_strings.h"

namespace prism {

// A generated token's log-probability under the model (log-softmax of its logits, before the sampler's
// temperature and filters), with the most likely tokens at that step.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

struct GenerateOptions {
  int max_tokens = 256;
  SamplerConfig sampler;
  std::vector<std::string> stop;  // stop strings (never shown)
  bool add_special = true;        // BOS etc. as the tokenizer adds them
  bool stop_at_eos = true;
  int top_logprobs = -1;  // >= 0: each token's logprob and this many alternatives (GenerateResult::logprobs)
  // Read before every step: once set, generation ends with finish_reason "cancelled".
  const std::atomic<bool>* cancel = nullptr;
  // Called for each generated token before its text (which may come later, with a whole character).
  std::function<void(const TokenLogprob&)> on_token;
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;  // generated ids
  int prompt_tokens = 0;
  double prompt_seconds = 0, generate_seconds = 0;
  std::vector<TokenLogprob> logprobs;  // per generated token, when GenerateOptions::top_logprobs >= 0
  std::string finish_reason;           // "stop" (EOS or stop string), "length", "context" or "cancelled"
  double PromptTokensPerSecond() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double GenerateTokensPerSecond() const;
};

// One sequence's generation after its prompt: sampler, logprobs, stop strings and streamed text, fed the
// model's logits one step at a time (by GenerateFromTokens' loop, or by a batching server's).
class SequenceDecoder {
 public:
  SequenceDecoder(const LanguageModel& lm, const std::vector<int32_t>& input, const GenerateOptions& opts,
                  std::function<void(const std::string&)> on_text = nullptr);
  // Takes the logits ([vocab]) after the last token fed; returns the next token to feed, or -1 when
  // generation has ended (result().finish_reason says why: "stop", "length" or "cancelled").
  int32_t Next(const float* logits);
  // Ends generation early (e.g. "context" when the next token does not fit); flushes held-back text.
  void End(const std::string& reason);
  bool done() const { return done_; }
  GenerateResult& result() { return r_; }

 private:
  void Emit(const std::string& piece);
  const GenerateOptions& opts_;
  std::function<void(const std::string&)> on_text_;
  int32_t vocab_;
  std::vector<int64_t> eos_;
  Sampler sampler_;
  StopStringMatcher stops_;
  StreamDecoder decoder_;
  std::vector<int32_t> history_;
  GenerateResult r_;
  bool done_ = false;
};

// Starts from an empty KV cache. on_text receives each newly completed piece of text.
GenerateResult Generate(LanguageModel& lm, const std::string& prompt, const GenerateOptions& opts,
                        const std::function<void(const std::string&)>& on_text = nullptr);
// Continues from the model's current KV cache with already-tokenized input (chat turns).
GenerateResult GenerateFromTokens(LanguageModel& lm, const std::vector<int32_t>& input,
                                  const GenerateOptions& opts,
                                  const std::function<void(const std::string&)>& on_text = nullptr);

}  // namespace prism
