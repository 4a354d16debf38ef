// Test helper: the published stories260K greedy continuations, and a check that a model reproduces them.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "runtime/generator.h"

namespace prism::testing {

inline const std::string kStoriesDir = std::string(PRISM_SOURCE_DIR) + "/models/stories260K/";

// tests/data/reference/stories260K.json: prompt and greedy_text from llama2.c's run.c and llama.cpp.
inline nlohmann::json StoriesReferences() {
  std::ifstream f(std::string(PRISM_TEST_DATA_DIR) + "/reference/stories260K.json");
  if (!f) throw std::runtime_error("tests/data/reference/stories260K.json is missing");
  return nlohmann::json::parse(f);
}

// Greedy text from every reference prompt must start with the reference text (its first `chars`
// characters), character for character.
inline void ExpectReferenceText(LanguageModel& lm, const std::string& what,
                                size_t chars = std::string::npos) {
  for (const auto& ref : StoriesReferences()) {
    std::string prompt = ref["prompt"], want = ref["greedy_text"];
    while (!want.empty() && want.back() == '\n') want.pop_back();  // run.c ends its output with a newline
    want = want.substr(0, chars);
    GenerateOptions go;
    go.sampler.temperature = 0;
    go.max_tokens = 400;
    go.stop_at_eos = true;
    std::string got = prompt + Generate(lm, prompt, go).text;
    ASSERT_GE(got.size(), want.size()) << what << " stopped early for prompt '" << prompt << "': " << got;
    EXPECT_EQ(got.substr(0, want.size()), want) << what << ", prompt '" << prompt << "'";
  }
}

}  // namespace prism::testing
