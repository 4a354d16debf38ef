// Shared helpers for Prism's tests: seeded random data and temporary folders.
#include "test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>

#include "ir/error.h"

namespace prism::testing {

std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

HostTensor RandomBlocks(DType t, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor out = HostTensor::Zeros(t, std::move(shape));
  std::mt19937_64 rng(seed);
  uint8_t* bytes = static_cast<uint8_t*>(out.data);
  const int64_t total = StorageBytes(t, out.numel()), block = BlockBytes(t);
  for (int64_t i = 0; i < total; ++i) bytes[i] = (uint8_t)rng();
  // Offsets of the f16 scale fields (d, then a min where the format has one) and d's magnitude.
  struct Fields {
    int d, min;
    float scale;
  };
  Fields f{};
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: f = {0, 2, 0.1f}; break;
    case DType::Q5_0: f = {0, -1, 0.1f}; break;
    case DType::IQ4_NL: f = {0, -1, 0.01f}; break;
    case DType::Q2_K: f = {80, 82, 0.1f}; break;
    case DType::Q3_K: f = {108, -1, 0.02f}; break;
    case DType::Q4_K: case DType::Q5_K: f = {0, 2, 0.003f}; break;
    case DType::Q6_K: f = {208, -1, 0.001f}; break;
    case DType::IQ4_XS: f = {0, -1, 0.001f}; break;
    default: throw Error("RandomBlocks: not a block format read from files: " + std::string(DTypeName(t)));
  }
  std::uniform_real_distribution<float> mag(0.2f, 1.0f);
  auto put = [&](uint8_t* p, float v) {
    const uint16_t h = FloatToHalf(rng() % 2 ? v : -v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < total / block; ++b) {
    put(bytes + b * block + f.d, f.scale * mag(rng));
    if (f.min >= 0) put(bytes + b * block + f.min, f.scale * mag(rng));
  }
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
