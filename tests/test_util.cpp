// Shared helpers for Prism's tests: seeded random data and temporary folders.
#include "test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>

#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism::testing {

std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

HostTensor RandomBlocks(DType t, std::vector<int64_t> shape, uint64_t seed) {
  if (!IsBlockFormat(t)) throw Error("RandomBlocks: not a block format read from files: " + std::string(DTypeName(t)));
  HostTensor out = HostTensor::Zeros(t, std::move(shape));
  std::mt19937 rng((uint32_t)seed);
  FillRandomBlocks(t, out.data, out.numel() / BlockElems(t), rng);
  return out;
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
