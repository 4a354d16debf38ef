// Token sampler: penalties → top-k → softmax with temperature → top-p → min-p → seeded draw.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "ir/error.h"

namespace prism {
namespace {

void Require(bool ok, const std::string& what) {
  if (!ok) throw Error("SamplerConfig: " + what);
}

// Four floats as one value (GCC's vector extension: an SSE register on any x86-64): the row-wide passes
// below keep four of them, sixteen logits, in flight.
using Floats4 = float __attribute__((vector_size(16)));
Floats4 Load4(const float* p) {
  Floats4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool PenaltiesActive(const SamplerConfig& c) {
  return c.repeat_last_n != 0 &&
         (c.repeat_penalty != 1.0f || c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f);
}

}  // namespace

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) {
  const SamplerConfig& c = config_;
  Require(std::isfinite(c.temperature) && c.temperature >= 0.0f,
          "temperature must be finite and >= 0, got " + std::to_string(c.temperature));
  Require(c.top_k >= 0, "top_k must be >= 0 (0 = off), got " + std::to_string(c.top_k));
  Require(c.top_p > 0.0f && c.top_p <= 1.0f, "top_p must be in (0, 1], got " + std::to_string(c.top_p));
  Require(c.min_p >= 0.0f && c.min_p <= 1.0f, "min_p must be in [0, 1], got " + std::to_string(c.min_p));
  Require(std::isfinite(c.repeat_penalty) && c.repeat_penalty > 0.0f,
          "repeat_penalty must be finite and > 0, got " + std::to_string(c.repeat_penalty));
  Require(c.repeat_last_n >= -1,
          "repeat_last_n must be >= -1 (-1 = whole history), got " + std::to_string(c.repeat_last_n));
  Require(std::isfinite(c.presence_penalty),
          "presence_penalty must be finite, got " + std::to_string(c.presence_penalty));
  Require(std::isfinite(c.frequency_penalty),
          "frequency_penalty must be finite, got " + std::to_string(c.frequency_penalty));
}

void Sampler::Reseed(uint64_t seed) {
  config_.seed = seed;
  rng_.seed(seed);
}

double Sampler::Uniform01() {
  // std::uniform_real_distribution is implementation-defined; 53 high bits are portable.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::CheckLogits(const float* logits, int32_t vocab) const {
  if (logits == nullptr) throw Error("Sampler::Sample: logits pointer is null");
  if (vocab <= 0) throw Error("Sampler::Sample: vocab must be > 0, got " + std::to_string(vocab));
  // One branch-free pass over the row (NaN and +inf both fail v < inf), the index only when one does.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const Floats4 inf = Floats4{} + kInf;
  auto ok0 = Floats4{} < inf, ok1 = ok0, ok2 = ok0, ok3 = ok0;  // every lane true
  int32_t i = 0;
  for (; i + 16 <= vocab; i += 16) {
    ok0 &= Load4(logits + i) < inf;
    ok1 &= Load4(logits + i + 4) < inf;
    ok2 &= Load4(logits + i + 8) < inf;
    ok3 &= Load4(logits + i + 12) < inf;
  }
  const auto ok = ok0 & ok1 & ok2 & ok3;
  bool bad = !ok[0] || !ok[1] || !ok[2] || !ok[3];
  for (; i < vocab; ++i) bad |= !(logits[i] < kInf);
  if (!bad) return;
  for (int32_t i = 0; i < vocab; ++i) {
    float v = logits[i];
    if (std::isnan(v)) throw Error("logits contain NaN at index " + std::to_string(i));
    // +inf would turn the softmax into inf/inf; -inf is a legitimate mask and is allowed.
    if (v == std::numeric_limits<float>::infinity())
      throw Error("logits contain +inf at index " + std::to_string(i));
  }
}

// Fills overrides_ with the penalized logit of every distinct token in the penalty window.
void Sampler::CollectPenalties(const float* logits, int32_t vocab, std::span<const int32_t> history) {
  overrides_.clear();
  if (!PenaltiesActive(config_) || history.empty()) return;
  size_t n = config_.repeat_last_n < 0 ? history.size()
                                       : std::min(history.size(), static_cast<size_t>(config_.repeat_last_n));
  size_t start = history.size() - n;
  window_.assign(history.begin() + static_cast<std::ptrdiff_t>(start), history.end());
  for (size_t i = 0; i < window_.size(); ++i) {
    if (window_[i] < 0 || window_[i] >= vocab)
      throw Error("Sampler::Sample: history token " + std::to_string(window_[i]) + " at position " +
                  std::to_string(start + i) + " is outside the vocabulary of " + std::to_string(vocab));
  }
  std::sort(window_.begin(), window_.end());
  for (size_t i = 0; i < window_.size();) {
    size_t j = i;
    while (j < window_.size() && window_[j] == window_[i]) ++j;
    int32_t id = window_[i];
    float count = static_cast<float>(j - i);
    float v = logits[id];
    if (config_.repeat_penalty != 1.0f)
      v = v > 0.0f ? v / config_.repeat_penalty : v * config_.repeat_penalty;
    v -= count * config_.frequency_penalty + config_.presence_penalty;
    overrides_.emplace_back(id, v);
    i = j;
  }
}

// Argmax over the penalized logits; ties go to the lowest id. Walks overrides_ in step with the ids
// instead of materializing a copy of the row. A block of 64 logits without an override is first reduced
// to its maximum, four vectors at a time, and scanned for the id only when that maximum beats the best
// so far: on a 128k-token row in random order, about ln(2,004) = 8 of its 2,004 blocks.
int32_t Sampler::Greedy(const float* logits, int32_t vocab) const {
  constexpr int32_t kBlock = 64;
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  size_t o = 0;
  for (int32_t b = 0; b < vocab; b += kBlock) {
    const int32_t end = std::min(vocab, b + kBlock);
    if (end - b == kBlock && !(o < overrides_.size() && overrides_[o].first < end)) {
      Floats4 m[4] = {Load4(logits + b), Load4(logits + b + 4), Load4(logits + b + 8),
                      Load4(logits + b + 12)};
      for (int32_t i = b + 16; i < end; i += 16)
        for (int j = 0; j < 4; ++j) {
          const Floats4 v = Load4(logits + i + 4 * j);
          m[j] = m[j] < v ? v : m[j];
        }
      float block_max = m[0][0];
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 4; ++l) block_max = std::max(block_max, m[j][l]);
      if (!(block_max > best_value)) continue;  // ties keep the earlier id
    }
    for (int32_t i = b; i < end; ++i) {
      float v = logits[i];
      if (o < overrides_.size() && overrides_[o].first == i) v = overrides_[o++].second;
      if (v > best_value) {
        best_value = v;
        best = i;
      }
    }
  }
  return best;
}

int32_t Sampler::Sample(const float* logits, int32_t vocab, std::span<const int32_t> history) {
  CheckLogits(logits, vocab);
  CollectPenalties(logits, vocab, history);
  if (config_.temperature == 0.0f || config_.top_k == 1) return Greedy(logits, vocab);

  // Candidates in id order, penalties applied.
  candidates_.resize(static_cast<size_t>(vocab));
  size_t o = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    float v = logits[i];
    if (o < overrides_.size() && overrides_[o].first == i) v = overrides_[o++].second;
    candidates_[static_cast<size_t>(i)] = {v, i};
  }
  // A strict total order (value desc, id asc) so that every partial sort below has one
  // possible result and draws are reproducible across standard libraries.
  auto before = [](const Candidate& a, const Candidate& b) {
    return a.value > b.value || (a.value == b.value && a.id < b.id);
  };
  auto begin = candidates_.begin();
  size_t n = candidates_.size();
  size_t sorted = 0;  // candidates_[0, sorted) hold the largest values in `before` order

  if (config_.top_k > 0 && static_cast<size_t>(config_.top_k) < n) {
    n = static_cast<size_t>(config_.top_k);
    std::nth_element(begin, begin + static_cast<std::ptrdiff_t>(n - 1), candidates_.end(), before);
    std::sort(begin, begin + static_cast<std::ptrdiff_t>(n), before);
    sorted = n;
  }

  // Softmax with temperature over the first n candidates (in place: value becomes probability).
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) max_logit = std::max(max_logit, candidates_[i].value);
  if (max_logit == -std::numeric_limits<float>::infinity())
    throw Error("Sampler::Sample: every candidate logit is -inf, nothing to sample");
  const float inv_temp = 1.0f / config_.temperature;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    float p = std::exp((candidates_[i].value - max_logit) * inv_temp);
    candidates_[i].value = p;
    sum += p;
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) candidates_[i].value *= inv_sum;

  // Top-p: smallest prefix (by probability) whose mass reaches top_p. Sort in growing chunks so
  // that a peaked distribution over a big vocabulary only sorts a few dozen entries.
  if (config_.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t keep = n;
    size_t chunk = 64;
    for (size_t i = 0; i < n; ++i) {
      if (i == sorted) {
        size_t end = std::min(n, sorted + chunk);
        auto first = begin + static_cast<std::ptrdiff_t>(sorted),
             last = begin + static_cast<std::ptrdiff_t>(end);
        std::nth_element(first, last - 1, begin + static_cast<std::ptrdiff_t>(n), before);
        std::sort(first, last, before);
        sorted = end;
        chunk *= 4;
      }
      cumulative += candidates_[i].value;
      if (cumulative >= config_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }

  // Min-p: drop tokens below min_p times the most likely one (which survives every filter).
  if (config_.min_p > 0.0f) {
    float p_max = 0.0f;
    for (size_t i = 0; i < n; ++i) p_max = std::max(p_max, candidates_[i].value);
    const float threshold = config_.min_p * p_max;
    auto last = std::remove_if(begin, begin + static_cast<std::ptrdiff_t>(n),
                               [&](const Candidate& c) { return c.value < threshold; });  // keeps order
    n = static_cast<size_t>(last - begin);
  }

  // Draw from what is left, renormalizing implicitly.
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += candidates_[i].value;
  double target = Uniform01() * total;
  for (size_t i = 0; i < n; ++i) {
    target -= candidates_[i].value;
    if (target < 0.0) return candidates_[i].id;
  }
  // Rounding left a sliver past the end: the last candidate with nonzero mass takes it.
  for (size_t i = n; i-- > 0;)
    if (candidates_[i].value > 0.0f) return candidates_[i].id;
  return candidates_[0].id;
}

}  // namespace prism
