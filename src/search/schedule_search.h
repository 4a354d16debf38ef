// The one schedule search: every device's kernels, per size bucket, checked against the kernel IR in
// double, timed in interleaved rounds on the device's clock, the fastest kept and remembered.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backends/device.h"

namespace prism {

struct SearchOptions {
  std::vector<std::pair<std::string, SymbolBindings>>
      buckets;                 // e.g. {"decode", seq=1}, {"prefill", seq=128}
  double budget_seconds = 30;  // over all buckets; 0: apply what the tuning database knows, time nothing
  std::string db_path;         // tuning database (JSON); "" = none
  std::string only_kernel;     // search this kernel only
  bool replay = false;         // search again what the database already decided (and save the result)
  double busy_limit = 0.2;     // decisions timed while others used more of the CPU are not saved
  // A bucket named here is searched only for the kernels with a loop over a range involving
  // `span_symbol` (attention over the KV cache, whose cost grows as the square of a prompt's length,
  // so a choice made at a short prefill does not carry to a long one); its other kernels take the
  // choices of bucket `from`, searched before it.
  struct Inherit {
    std::string from, span_symbol;
  };
  std::map<std::string, Inherit> inherit;
  // Timing: every passing candidate runs once per round (round 0 warms up) for at least min_runs
  // timed rounds, and more, up to max_runs, while the kernel has used under seconds_per_candidate each.
  int min_runs = 3, max_runs = 11;
  double seconds_per_candidate = 0.05;
  // A race: after the first timed round, a candidate slower than race_factor times that round's fastest
  // is timed no more (its receipt shows its one run and "raced_out").
  double race_factor = 3;
  int samples = 24;  // outputs checked per candidate
  uint64_t seed = 20261122;
  // Called as the search reaches each kernel of a bucket: kernels done of total, seconds of budget left.
  std::function<void(const std::string& bucket, size_t done, size_t total, double seconds_left)> progress;
};

// Searches the schedules of exe's kernels on its device and applies the fastest that pass the check
// (tolerance 2e-3 of the samples' largest magnitude, one unit of the output dtype's rounding, and a
// rounding candidate's per-output bound); returns one JSON receipt per decision. Decisions the database
// holds for this kernel, device and bucket are applied without timing (unless opts.replay).
nlohmann::json SearchSchedules(Executable& exe, const SearchOptions& opts);
// The same over a device's schedule space (what Executable::OpenSearch gives).
nlohmann::json SearchSchedules(ScheduleSpace& space, const SearchOptions& opts);

}  // namespace prism
