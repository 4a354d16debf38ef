// Token sampler: repetition penalties, top-k, temperature, top-p, min-p, then a seeded draw.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace prism {

struct SamplerConfig {
  float temperature = 0.8f;        // 0 → greedy (argmax; ties → lowest id)
  int top_k = 40;                  // 0 = off
  float top_p = 0.95f;             // 1 = off
  float min_p = 0.05f;             // 0 = off; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;     // llama.cpp style: logit>0 ? logit/pen : logit*pen
  int repeat_last_n = 64;          // window of history the penalties look at; 0 = none, -1 = all
  float presence_penalty = 0.0f;   // OpenAI style: minus this once if the token occurs in the window
  float frequency_penalty = 0.0f;  // OpenAI style: minus this times its count in the window
  uint64_t seed = 0xC0FFEE;
};

// Chooses the next token from a row of logits. Deterministic for a given seed and call sequence:
// the PRNG is std::mt19937_64 (fully specified by the standard) and the uniform conversion is ours.
// Not thread-safe: one Sampler per sequence.
class Sampler {
 public:
  explicit Sampler(SamplerConfig config);

  // history = prompt + generated tokens so far; only its last repeat_last_n entries are read.
  int32_t Sample(const float* logits, int32_t vocab, std::span<const int32_t> history);
  void Reseed(uint64_t seed);
  const SamplerConfig& config() const { return config_; }

 private:
  struct Candidate {
    float value;  // penalized logit, later probability
    int32_t id;
  };

  void CheckLogits(const float* logits, int32_t vocab) const;
  void CollectPenalties(const float* logits, int32_t vocab, std::span<const int32_t> history);
  int32_t Greedy(const float* logits, int32_t vocab) const;
  double Uniform01();  // in [0, 1), 53 random bits

  SamplerConfig config_;
  std::mt19937_64 rng_;
  // Scratch reused across calls so that steady-state sampling does not allocate.
  std::vector<int32_t> window_;
  std::vector<std::pair<int32_t, float>> overrides_;  // (id, penalized logit), sorted by id
  std::vector<Candidate> candidates_;
};

}  // namespace prism
