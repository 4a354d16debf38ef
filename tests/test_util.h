// Shared helpers for Prism's tests: seeded random data and temporary folders.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ir/host_tensor.h"

namespace prism::testing {

// Uniform values in [lo, hi), never all zeros, reproducible from the seed.
std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// A tensor of GGUF blocks Prism only reads (K-quants, Q4_1/Q5_x, IQ4): random bytes with every f16
// scale finite and sized so values stay within a few units; shape's last dimension whole blocks.
HostTensor RandomBlocks(DType t, std::vector<int64_t> shape, uint64_t seed);
// A search budget no test's search reaches (a search stops when every kernel is decided): tests that check
// what a search decided must not depend on how loaded the machine is (CI runs two tests at once, under
// sanitizers too).
constexpr double kUnreachedSearchBudget = 900;
// A fresh empty folder under the system temp dir, unique per call.
std::filesystem::path MakeTempDir(const std::string& tag);

// A tuning database and kernel cache of the test's own (PRISM_CACHE_DIR = dir / sub), taken out of the
// environment when the test ends, however it ends.
struct FreshCache {
  std::filesystem::path dir;
  explicit FreshCache(const std::string& tag, const char* sub = "") : dir(MakeTempDir(tag)) {
    setenv("PRISM_CACHE_DIR", (*sub ? dir / sub : dir).c_str(), 1);
  }
  ~FreshCache() { unsetenv("PRISM_CACHE_DIR"); }
};

}  // namespace prism::testing
