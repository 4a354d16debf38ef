// Tests for the token sampler (greedy, filters, statistics, penalties, errors) and stop strings.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <functional>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/error.h"
#include "sampling/stop_strings.h"
#include "test_util.h"

namespace prism {
namespace {

SamplerConfig NoFilters(float temperature = 1.0f) {
  SamplerConfig c;
  c.temperature = temperature;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  return c;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double m = -INFINITY;
  for (float l : logits) m = std::max(m, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - m) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

std::vector<double> Frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[s.Sample(logits.data(), static_cast<int32_t>(logits.size()), {})] += 1.0;
  for (double& x : f) x /= draws;
  return f;
}

// Each frequency within 5 standard errors of its expected probability (deterministic seed, so not flaky).
void ExpectMatches(const std::vector<double>& freq, const std::vector<double>& expected, int draws) {
  ASSERT_EQ(freq.size(), expected.size());
  for (size_t i = 0; i < freq.size(); ++i) {
    double se = std::sqrt(std::max(expected[i] * (1 - expected[i]), 1e-4) / draws);
    EXPECT_NEAR(freq[i], expected[i], 5 * se + 1e-3) << "token " << i;
  }
}

std::vector<float> LogitsFromProbs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(NoFilters(0.0f));
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto logits = testing::RandomFloats(1000, seed, -5, 5);
    int32_t expected = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(s.Sample(logits.data(), 1000, {}), expected);
  }
}

TEST(Sampler, GreedyTiesGoToLowestId) {
  std::vector<float> logits = {0.0f, 2.0f, -1.0f, 2.0f, 2.0f};
  Sampler s(NoFilters(0.0f));
  EXPECT_EQ(s.Sample(logits.data(), 5, {}), 1);
  std::vector<float> all_masked(7, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(s.Sample(all_masked.data(), 7, {}), 0);
}

// Greedy reduces blocks of 64 before it looks for an id: ties across blocks, a maximum in the last partial
// block, penalised ids at block edges and -inf masks all give the plain scalar argmax of the penalised row.
TEST(Sampler, GreedyBlocksMatchAScalarArgmax) {
  const int32_t vocab = 64 * 17 + 37;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    auto logits = testing::RandomFloats(vocab, seed, -5, 5);
    for (int i = 0; i < 200; ++i) logits[rng() % vocab] = -std::numeric_limits<float>::infinity();
    const float top = seed % 4 == 0 ? 5.5f : 9.0f;  // sometimes below what a penalty lifts
    for (int i = 0; i < 3; ++i) logits[rng() % vocab] = top;  // ties, maybe in different blocks
    if (seed % 5 == 0) logits[vocab - 1] = 10.0f;           // in the last, partial block
    std::vector<int32_t> history = {63, 64, static_cast<int32_t>(rng() % vocab), vocab - 1, 127, 128};
    SamplerConfig c = NoFilters(0.0f);
    c.repeat_last_n = seed % 2 ? -1 : 0;  // penalties on or off
    c.presence_penalty = -static_cast<float>(rng() % 8);  // lifts the history's ids by 0-7
    std::vector<float> penalised = logits;
    if (c.repeat_last_n != 0)
      for (int32_t id : std::set<int32_t>(history.begin(), history.end())) penalised[id] -= c.presence_penalty;
    int32_t expected = 0;
    for (int32_t i = 1; i < vocab; ++i)
      if (penalised[i] > penalised[expected]) expected = i;
    Sampler s(c);
    EXPECT_EQ(s.Sample(logits.data(), vocab, history), expected) << "seed " << seed;
  }
}

TEST(Sampler, TopKOneEqualsGreedy) {
  SamplerConfig c = NoFilters(1.5f);
  c.top_k = 1;
  Sampler s(c);
  std::vector<float> ties = {0.5f, 3.0f, 3.0f, 1.0f};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.Sample(ties.data(), 4, {}), 1);
}

TEST(Sampler, TinyTopPEqualsGreedy) {
  SamplerConfig c = NoFilters(1.0f);
  c.top_p = 1e-6f;
  Sampler s(c);
  auto logits = testing::RandomFloats(5000, 7, -1, 1);
  int32_t expected = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.Sample(logits.data(), 5000, {}), expected);
}

TEST(Sampler, SameSeedSameSequence) {
  auto logits = testing::RandomFloats(300, 3, -2, 2);
  SamplerConfig c;  // defaults: every filter on
  c.temperature = 1.2f;
  Sampler a(c), b(c);
  std::vector<int32_t> seq_a, seq_b;
  for (int i = 0; i < 200; ++i) {
    seq_a.push_back(a.Sample(logits.data(), 300, seq_a));
    seq_b.push_back(b.Sample(logits.data(), 300, seq_b));
  }
  EXPECT_EQ(seq_a, seq_b);

  c.seed = 12345;
  Sampler other(c);
  std::vector<int32_t> seq_c;
  for (int i = 0; i < 200; ++i) seq_c.push_back(other.Sample(logits.data(), 300, seq_c));
  EXPECT_NE(seq_a, seq_c);

  other.Reseed(SamplerConfig{}.seed);
  std::vector<int32_t> seq_d;
  for (int i = 0; i < 200; ++i) seq_d.push_back(other.Sample(logits.data(), 300, seq_d));
  EXPECT_EQ(seq_a, seq_d);
}

TEST(Sampler, FrequenciesMatchSoftmax) {
  const int draws = 20000;
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.7f, 0.0f, -3.0f, 2.2f};
  Sampler s(NoFilters(1.0f));
  ExpectMatches(Frequencies(s, logits, draws), Softmax(logits, 1.0), draws);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const int draws = 20000;
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  for (float t : {0.5f, 2.0f}) {
    Sampler s(NoFilters(t));
    ExpectMatches(Frequencies(s, logits, draws), Softmax(logits, t), draws);
  }
}

TEST(Sampler, TopKKeepsOnlyTheKLargest) {
  const int draws = 20000;
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.7f, 0.0f};
  SamplerConfig c = NoFilters(1.0f);
  c.top_k = 3;
  Sampler s(c);
  // Renormalized softmax over ids 0, 1, 4.
  auto p = Softmax({1.0f, 2.0f, 1.7f}, 1.0);
  ExpectMatches(Frequencies(s, logits, draws), {p[0], p[1], 0, 0, p[2], 0}, draws);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  const int draws = 20000;
  auto logits = LogitsFromProbs({0.15, 0.5, 0.05, 0.3});
  SamplerConfig c = NoFilters(1.0f);
  c.top_p = 0.7f;  // 0.5 + 0.3 reaches it
  Sampler s(c);
  ExpectMatches(Frequencies(s, logits, draws), {0, 0.625, 0, 0.375}, draws);
}

TEST(Sampler, TopPOnLargeVocabularyWithoutTopK) {
  // Flat tail: the chunked partial sort must go through several rounds.
  std::vector<float> logits(20000, 0.0f);
  logits[123] = 20.0f;
  SamplerConfig c = NoFilters(1.0f);
  c.top_p = 0.9f;
  Sampler s(c);
  int hits = 0;
  for (int i = 0; i < 1000; ++i) hits += s.Sample(logits.data(), 20000, {}) == 123;
  // p(123) = e^20 / (e^20 + 19999) ≈ 0.99996 ≥ 0.9, so it is the only survivor.
  EXPECT_EQ(hits, 1000);

  std::vector<float> flat(20000, 0.0f);
  std::vector<int> seen(20000, 0);
  for (int i = 0; i < 1000; ++i) seen[s.Sample(flat.data(), 20000, {})]++;
  // Ties sort by id, so top_p = 0.9 keeps ids [0, 18000).
  int beyond = 0, distinct = 0;
  for (int i = 0; i < 20000; ++i) {
    if (i >= 18000) beyond += seen[i];
    distinct += seen[i] > 0;
  }
  EXPECT_EQ(beyond, 0);
  EXPECT_GT(distinct, 800);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  const int draws = 20000;
  auto logits = LogitsFromProbs({0.5, 0.3, 0.15, 0.05});
  SamplerConfig c = NoFilters(1.0f);
  c.min_p = 0.2f;  // threshold 0.1: token 3 goes
  Sampler s(c);
  ExpectMatches(Frequencies(s, logits, draws), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, draws);
}

TEST(Sampler, FiltersCompose) {
  const int draws = 20000;
  auto logits = LogitsFromProbs({0.4, 0.25, 0.2, 0.1, 0.05});
  SamplerConfig c = NoFilters(1.0f);
  c.top_k = 4;      // drops 0.05 → renormalized 0.421, 0.263, 0.211, 0.105
  c.top_p = 0.85f;  // 0.421 + 0.263 + 0.211 = 0.895 ≥ 0.85 → drops the 0.105
  c.min_p = 0.55f;  // threshold 0.55 * 0.421 = 0.232 → drops the 0.211
  Sampler s(c);
  ExpectMatches(Frequencies(s, logits, draws), {0.4 / 0.65, 0.25 / 0.65, 0, 0, 0}, draws);
}

TEST(Sampler, RepeatPenaltyPushesSeenTokensDown) {
  SamplerConfig c = NoFilters(0.0f);
  c.repeat_penalty = 1.5f;
  Sampler s(c);
  std::vector<float> positive = {2.0f, 1.9f, 0.0f};
  std::vector<int32_t> history = {0};
  EXPECT_EQ(s.Sample(positive.data(), 3, {}), 0);
  EXPECT_EQ(s.Sample(positive.data(), 3, history), 1);  // 2.0 / 1.5 < 1.9
  std::vector<float> negative = {-1.0f, -1.2f, -5.0f};
  EXPECT_EQ(s.Sample(negative.data(), 3, history), 1);  // -1.0 * 1.5 < -1.2

  // Only the last repeat_last_n tokens count.
  c.repeat_last_n = 2;
  Sampler windowed(c);
  std::vector<int32_t> old_history = {0, 2, 2};
  EXPECT_EQ(windowed.Sample(positive.data(), 3, old_history), 0);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  std::vector<float> logits = {3.0f, 2.5f, 0.0f};
  std::vector<int32_t> history = {0, 0, 0};
  SamplerConfig c = NoFilters(0.0f);
  c.presence_penalty = 0.4f;  // 3.0 - 0.4 = 2.6 still wins
  EXPECT_EQ(Sampler(c).Sample(logits.data(), 3, history), 0);
  c.presence_penalty = 0.0f;
  c.frequency_penalty = 0.2f;  // 3.0 - 3 * 0.2 = 2.4 loses
  EXPECT_EQ(Sampler(c).Sample(logits.data(), 3, history), 1);
  c.frequency_penalty = 0.1f;  // 3.0 - 0.3 = 2.7 wins
  EXPECT_EQ(Sampler(c).Sample(logits.data(), 3, history), 0);
}

TEST(Sampler, PenaltyAppliesInStochasticPath) {
  std::vector<float> logits = {5.0f, 5.0f};
  SamplerConfig c = NoFilters(1.0f);
  c.frequency_penalty = 100.0f;
  Sampler s(c);
  std::vector<int32_t> history = {1};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.Sample(logits.data(), 2, history), 0);
}

TEST(Sampler, RejectsBadLogits) {
  std::vector<float> logits = {0.0f, 1.0f, 2.0f, NAN};
  for (float t : {0.0f, 1.0f}) {
    Sampler s(NoFilters(t));
    try {
      s.Sample(logits.data(), 4, {});
      FAIL() << "expected prism::Error";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "logits contain NaN at index 3");
    }
    EXPECT_THROW(s.Sample(logits.data(), 0, {}), Error);
    EXPECT_THROW(s.Sample(nullptr, 4, {}), Error);
  }
  // A whole vocabulary's row: the one pass that finds nothing wrong must still see one bad value.
  std::vector<float> row(32000, 0.5f);
  row[31999] = INFINITY;
  try {
    Sampler(NoFilters(0.0f)).Sample(row.data(), 32000, {});
    FAIL() << "expected prism::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "logits contain +inf at index 31999");
  }
  row[31999] = -INFINITY, row[17] = NAN;
  EXPECT_THROW(Sampler(NoFilters(0.0f)).Sample(row.data(), 32000, {}), Error);
  // In every lane of the vector pass and in the tail after it.
  for (int at = 0; at < 37; ++at) {
    std::vector<float> odd(37, 0.5f);
    odd[at] = at % 2 ? NAN : INFINITY;
    EXPECT_THROW(Sampler(NoFilters(0.0f)).Sample(odd.data(), 37, {}), Error) << at;
  }
  std::vector<float> masked(4, -INFINITY);
  EXPECT_THROW(Sampler(NoFilters(1.0f)).Sample(masked.data(), 4, {}), Error);
  std::vector<float> ok = {0.0f, 1.0f};
  std::vector<int32_t> bad_history = {5};
  SamplerConfig c = NoFilters(1.0f);
  c.repeat_penalty = 1.1f;
  EXPECT_THROW(Sampler(c).Sample(ok.data(), 2, bad_history), Error);
}

void ExpectConfigError(SamplerConfig c, const std::string& parameter) {
  try {
    Sampler s(c);
    FAIL() << "expected prism::Error for " << parameter;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(parameter), std::string::npos) << e.what();
  }
}

TEST(Sampler, ValidatesConfig) {
  SamplerConfig c;
  c.temperature = -0.1f;
  ExpectConfigError(c, "temperature");
  c = {};
  c.temperature = NAN;
  ExpectConfigError(c, "temperature");
  c = {};
  c.top_k = -1;
  ExpectConfigError(c, "top_k");
  c = {};
  c.top_p = 0.0f;
  ExpectConfigError(c, "top_p");
  c = {};
  c.top_p = 1.01f;
  ExpectConfigError(c, "top_p");
  c = {};
  c.min_p = -0.5f;
  ExpectConfigError(c, "min_p");
  c = {};
  c.repeat_penalty = 0.0f;
  ExpectConfigError(c, "repeat_penalty");
  c = {};
  c.repeat_last_n = -2;
  ExpectConfigError(c, "repeat_last_n");
  c = {};
  c.frequency_penalty = INFINITY;
  ExpectConfigError(c, "frequency_penalty");
  EXPECT_NO_THROW(Sampler(SamplerConfig{}));
}

TEST(Sampler, LargeVocabularyIsFast) {
  // The point is no full O(V log V) sort per token: each sampler must take under half of what one
  // sort of the vocabulary's (logit, id) pairs takes on this machine, measured beside it (best of
  // several rounds each, so a burst of load elsewhere does not decide).
  const int32_t vocab = 150000;
  auto logits = testing::RandomFloats(vocab, 11, -10, 10);
  std::vector<int32_t> history(64);
  for (int i = 0; i < 64; ++i) history[i] = i * 997 % vocab;
  auto best_ms = [](const std::function<void()>& f) {
    double best = 1e30;
    for (int round = 0; round < 7; ++round) {
      auto start = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
  };
  const double sort_ms = best_ms([&] {
    std::vector<std::pair<float, int32_t>> pairs(vocab);
    for (int32_t i = 0; i < vocab; ++i) pairs[i] = {logits[i], i};
    std::sort(pairs.begin(), pairs.end(), std::greater<>());
    ASSERT_GE(pairs[0].first, pairs[1].first);
  });
  Sampler greedy(NoFilters(0.0f));
  Sampler full{SamplerConfig{}};
  SamplerConfig p_only = NoFilters(1.0f);
  p_only.top_p = 0.5f;
  Sampler top_p(p_only);
  for (Sampler* s : {&greedy, &full, &top_p}) {
    const double ms = best_ms([&] { s->Sample(logits.data(), vocab, history); });
    EXPECT_LT(ms, 0.5 * sort_ms) << "one token took " << ms << " ms; sorting the vocabulary takes " << sort_ms;
  }
}

// ---- Stop strings ----

TEST(StopStrings, PassesTextWithoutStopPrefixes) {
  StopStringMatcher m({"</s>"});
  auto r = m.Push("Hello world");
  EXPECT_EQ(r.emit, "Hello world");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStrings, StopSplitAcrossPushes) {
  StopStringMatcher m({"</s>"});
  auto r = m.Push("Hello <");
  EXPECT_EQ(r.emit, "Hello ");
  r = m.Push("/");
  EXPECT_EQ(r.emit, "");
  EXPECT_FALSE(r.stopped);
  r = m.Push("s> trailing");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_TRUE(m.Push("more").stopped);
  EXPECT_EQ(m.Push("more").emit, "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStrings, FalseAlarmReleasesHeldText) {
  StopStringMatcher m({"</s>"});
  EXPECT_EQ(m.Push("a </").emit, "a ");
  auto r = m.Push("b>");
  EXPECT_EQ(r.emit, "</b>");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.Push("x <").emit, "x ");
  EXPECT_EQ(m.Flush(), "<");
}

TEST(StopStrings, EarliestOfSeveralStopsWins) {
  StopStringMatcher m({"END", "STOP"});
  auto r = m.Push("one STOP two END");
  EXPECT_EQ(r.emit, "one ");
  EXPECT_TRUE(r.stopped);

  // The stop that completes first wins, even when a longer one started earlier.
  StopStringMatcher k({"abcd", "bc"});
  r = k.Push("xabcd");
  EXPECT_EQ(r.emit, "xa");
  EXPECT_TRUE(r.stopped);

  StopStringMatcher n({"END", "STOP"});
  EXPECT_EQ(n.Push("aS").emit, "a");
  EXPECT_EQ(n.Push("TE").emit, "ST");  // "STE" is no stop prefix, but "E" is
  r = n.Push("ND!");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStrings, OverlappingPrefixes) {
  // "aab": after "aa" the held text must be "aa" (prefix of "aab"), not just "a".
  StopStringMatcher m({"ab", "aab", "bce"});
  EXPECT_EQ(m.Push("xa").emit, "x");
  EXPECT_EQ(m.Push("a").emit, "");
  auto r = m.Push("b");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
}

// Reference: find the first prefix of the text that contains a stop, cut at the stop ending there.
std::string CutAtStop(const std::string& text, const std::vector<std::string>& stops, bool* stopped) {
  for (size_t end = 1; end <= text.size(); ++end) {
    std::string_view prefix(text.data(), end);
    size_t longest = 0;
    for (const auto& s : stops)
      if (prefix.ends_with(s)) longest = std::max(longest, s.size());
    if (longest > 0) {
      *stopped = true;
      return text.substr(0, end - longest);
    }
  }
  *stopped = false;
  return text;
}

TEST(StopStrings, RandomChunkingMatchesWholeText) {
  std::mt19937_64 rng(99);
  const std::vector<std::vector<std::string>> stop_sets = {
      {"abc"}, {"aab", "ab"}, {"abab", "bb"}, {"cab", "abca", "c"}, {"aaaa"}};
  for (const auto& stops : stop_sets) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      int len = static_cast<int>(rng() % 30);
      for (int i = 0; i < len; ++i) text += static_cast<char>('a' + rng() % 3);
      bool expect_stop = false;
      std::string expected = CutAtStop(text, stops, &expect_stop);

      StopStringMatcher m(stops);
      std::string shown;
      bool stopped = false;
      for (size_t pos = 0; pos < text.size();) {
        size_t n = 1 + rng() % 4;
        auto r = m.Push(std::string_view(text).substr(pos, n));
        shown += r.emit;
        stopped = r.stopped;
        pos += n;
        // Never show anything that is not part of the final output.
        ASSERT_EQ(expected.compare(0, shown.size(), shown), 0) << text;
      }
      if (!stopped) shown += m.Flush();
      EXPECT_EQ(stopped, expect_stop) << text;
      EXPECT_EQ(shown, expected) << text;
    }
  }
}

TEST(StopStrings, RejectsEmptyStop) { EXPECT_THROW(StopStringMatcher({"ok", ""}), Error); }

}  // namespace
}  // namespace prism
