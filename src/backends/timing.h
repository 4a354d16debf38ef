// Wall-clock timing shared by the CPU and GPU schedule searches: elapsed seconds and the summary a receipt
// records.
#pragma once

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

namespace prism {

using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median, min, max and count of timed runs in microseconds (sorts them); the median is "median_us".
inline nlohmann::json TimingSummary(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  return {
      {"median_us", us[us.size() / 2]}, {"min_us", us.front()}, {"max_us", us.back()}, {"runs", us.size()}};
}

}  // namespace prism
