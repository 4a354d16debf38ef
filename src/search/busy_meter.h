// How busy the rest of the machine was while a search timed its candidates.
#pragma once

#include <chrono>

namespace prism {

// CPU time that other processes used while a measurement ran, as a fraction of all cores' time
// (from /proc/stat, less this process's own time). Timings of a team of threads mean little when it
// is high: a thread that shares its core makes every split kernel wait for it.
class BusyMeter {
 public:
  BusyMeter();
  double OthersFraction() const;  // since construction; -1 where /proc/stat cannot be read

 private:
  double busy0_, self0_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace prism
