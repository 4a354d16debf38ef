// Shared helpers for Prism's tests: seeded random data and temporary folders.
#include "test_util.h"

#include <atomic>
#include <random>
#include <unistd.h>

namespace prism::testing {

std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::filesystem::path MakeTempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("prism-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace prism::testing
