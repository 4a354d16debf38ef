// Shared helpers for Prism's tests: seeded random data and temporary folders.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace prism::testing {

// Uniform values in [lo, hi), never all zeros, reproducible from the seed.
std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// A fresh empty folder under the system temp dir, unique per call.
std::filesystem::path MakeTempDir(const std::string& tag);

}  // namespace prism::testing
