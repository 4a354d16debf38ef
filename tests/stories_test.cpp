// The shipped stories260K model reproduces the published greedy continuations exactly.
#include <gtest/gtest.h>

#include "backends/cpu/program.h"
#include "ir/error.h"
#include "stories_reference.h"
#include "test_util.h"

namespace prism {
namespace {

const std::string kModelDir = testing::kStoriesDir;

void ExpectReferenceText(const std::string& model_path) {
  auto lm = LanguageModel::Load(model_path);
  testing::ExpectReferenceText(*lm, model_path);
}

}  // namespace

TEST(Stories260K, GreedyTextMatchesReferenceFromLlama2cCheckpoint) {
  ExpectReferenceText(kModelDir + "stories260K.bin");
}

TEST(Stories260K, GreedyTextMatchesReferenceFromGguf) { ExpectReferenceText(kModelDir + "stories260K.gguf"); }

// The reference interpreter registered as a device runs the model through the same interface: its
// greedy text is the reference's, and its logits are the CPU program's.
TEST(Stories260K, GreedyTextMatchesReferenceOnTheInterpreterDevice) {
  // The CPU program as compiled: a tuning database another test filled may hold rounding forms (AMX's split
  // products), whose logits are within their own bounds, not 1e-4.
  testing::FreshCache cache("stories-interp");
  LoadOptions lo;
  lo.device = "interp";
  auto lm = LanguageModel::Load(kModelDir + "stories260K.bin", lo);
  EXPECT_EQ(lm->device(), "interp");
  testing::ExpectReferenceText(*lm, "stories260K.bin on the interp device");
  auto cpu = LanguageModel::Load(kModelDir + "stories260K.bin");
  lm->Reset();
  std::vector<int32_t> ids = cpu->tokenizer().Encode("Lily and Tom went to the park", true);
  std::vector<float> want = cpu->Forward(ids), got = lm->Forward(ids);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(want[i], got[i], 1e-4) << i;
  EXPECT_THROW(lm->step_as<Program>(), Error);
  // Its search has one candidate per node: nothing to time, a receipt per bucket saying so.
  for (const auto& r : lm->Tune(5)) EXPECT_EQ(r["chosen"], "only") << r.dump();
}

TEST(Stories260K, PrefillEqualsTokenByTokenDecode) {
  // One compiled program serves every sequence length: feeding the prompt at once or one token
  // at a time must give the same logits (decided without rounding forms: a database of its own).
  testing::FreshCache cache("stories-prefill");
  auto lm = LanguageModel::Load(kModelDir + "stories260K.bin");
  std::vector<int32_t> ids = lm->tokenizer().Encode("Lily and Tom went to the park", true);
  std::vector<float> all = lm->Forward(ids);
  lm->Reset();
  std::vector<float> last;
  for (int32_t t : ids) last = lm->Forward({t});
  ASSERT_EQ(all.size(), last.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_NEAR(all[i], last[i], 1e-4) << i;
}

TEST(Stories260K, ArenaNeverLetsKernelsThatRunAtOnceShareBytes) {
  // Two threads, a long prefill (parallel kernels beside serial ones) and decode steps.
  auto lm = LanguageModel::Load(kModelDir + "stories260K.bin", {"", 256, 2});
  std::vector<int32_t> ids;
  for (int i = 0; i < 200; ++i) ids.push_back(1 + (i * 37) % 500);
  lm->Forward(ids);
  EXPECT_EQ(lm->step_as<Program>().ArenaConflicts(), 0);
  for (int32_t t : {5, 6, 7}) lm->Forward({t});
  EXPECT_EQ(lm->step_as<Program>().ArenaConflicts(), 0);
}

TEST(Stories260K, BadInputsGiveClearErrors) {
  auto lm = LanguageModel::Load(kModelDir + "stories260K.bin", {"", 16, 0});
  EXPECT_THROW(lm->Forward({600}), Error);                        // outside the 512-token vocabulary
  EXPECT_THROW(lm->Forward(std::vector<int32_t>(17, 1)), Error);  // past the 16-token context
  EXPECT_THROW(LanguageModel::Load(kModelDir + "missing.bin"), Error);
}

}  // namespace prism
