// How busy the rest of the machine was while a search timed its candidates, from /proc/stat.
#include "search/busy_meter.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace prism {

namespace {

// Seconds all cores spent busy since boot (-1 where /proc/stat cannot be read).
double SystemBusySeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu")
    return -1;
  return (user + nice + system + irq + softirq + steal) / (double)sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

BusyMeter::BusyMeter()
    : busy0_(SystemBusySeconds()), self0_(SelfCpuSeconds()), t0_(std::chrono::steady_clock::now()) {}

double BusyMeter::OthersFraction() const {
  double busy = SystemBusySeconds();
  if (busy < 0 || busy0_ < 0) return -1;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  double cores = (double)std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  double others = (busy - busy0_) - (SelfCpuSeconds() - self0_);
  return wall > 0 ? std::clamp(others / (wall * cores), 0.0, 1.0) : 0;
}

}  // namespace prism
