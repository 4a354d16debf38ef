// Text generation: prompt prefill, then sampled decode steps streamed as text until a stop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/language_model.h"
#include "sampling/sampler.h"

namespace prism {

struct GenerateOptions {
  int max_tokens = 256;
  SamplerConfig sampler;
  std::vector<std::string> stop;  // stop strings (never shown)
  bool add_special = true;        // BOS etc. as the tokenizer adds them
  bool stop_at_eos = true;
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;  // generated ids
  int prompt_tokens = 0;
  double prompt_seconds = 0, generate_seconds = 0;
  std::string finish_reason;  // "stop" (EOS or stop string), "length", or "context"
  double PromptTokensPerSecond() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double GenerateTokensPerSecond() const;
};

// Starts from an empty KV cache. on_text receives each newly completed piece of text.
GenerateResult Generate(LanguageModel& lm, const std::string& prompt, const GenerateOptions& opts,
                        const std::function<void(const std::string&)>& on_text = nullptr);
// Continues from the model's current KV cache with already-tokenized input (chat turns).
GenerateResult GenerateFromTokens(LanguageModel& lm, const std::vector<int32_t>& input,
                                  const GenerateOptions& opts,
                                  const std::function<void(const std::string&)>& on_text = nullptr);

}  // namespace prism
