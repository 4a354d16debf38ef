// Random-graph fuzzing: seeded random DAGs of primitives and views, compiled versus interpreted.
// PRISM_FUZZ_COUNT sets how many graphs (default 500); PRISM_FUZZ_SEED=S replays graph S only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "frontend/nn.h"
#include "graph_check.h"
#include "random_graph.h"

namespace prism {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

TEST(Fuzz, RandomGraphsCompiledMatchInterpreter) {
  int count = EnvInt("PRISM_FUZZ_COUNT", 500);
  int only = EnvInt("PRISM_FUZZ_SEED", -1);
  int failures = 0;
  for (int seed = 0; seed < count; ++seed) {
    if (only >= 0 && seed != only) continue;
    SCOPED_TRACE("fuzz seed " + std::to_string(seed) + " (replay: PRISM_FUZZ_SEED=" + std::to_string(seed) + ")");
    Graph g;
    testing::RandomGraphBuilder(seed).Build(&g);
    int before = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    try {
      testing::CheckGraph(g, {{{"n", 1}}, {{"n", 4}}}, 1e-3, 1e-3, seed, "fuzz graph");
    } catch (const std::exception& e) {
      ADD_FAILURE() << "exception: " << e.what() << "\n" << g.ToText();
    }
    int after = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    if (after != before) {
      std::cerr << "failing fuzz graph, seed " << seed << ":\n" << g.ToText();
      if (++failures >= 5) break;
    }
  }
  std::cout << "fuzzed " << (only >= 0 ? 1 : count) << " random graphs\n";
}

}  // namespace prism
