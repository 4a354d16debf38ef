// The step's timeline over the host, the devices and their links, following each buffer's copies.
#include "backends/systolic/step_timeline.h"

#include <algorithm>
#include <limits>

namespace prism {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// Where a buffer's data is, and since when: on the host, whole on a device, or spread over devices (in
// pieces, or as partial sums).
struct Copies {
  double host = kNever;
  std::vector<double> device;
  double spread = kNever;
  std::vector<int> spread_devices;
  TimedKernel::Out spread_as = TimedKernel::Out::Pieces;
};

class Timeline {
 public:
  Timeline(const SystolicDescription& d, const std::vector<TimedBuffer>& buffers, double host_add_gbps)
      : d_(d),
        buffers_(buffers),
        host_add_gbps_(host_add_gbps),
        up_(d.devices, 0),
        down_(d.devices, 0),
        busy_(d.devices, 0),
        free_(d.devices, 0),
        hbm_free_(d.devices, 0),
        launched_(d.devices, 0),
        streamed_(d.devices) {
    for (const TimedBuffer& b : buffers) {
      Copies c;
      c.device.assign(d.devices, kNever);
      if (b.start != TimedBuffer::Start::Nowhere) c.host = 0;
      if (b.start == TimedBuffer::Start::Everywhere) c.device.assign(d.devices, 0);
      copies_.push_back(c);
    }
    // One program per device, launched in turn; the host's own kernels follow.
    for (int i = 0; i < d.devices; ++i) launched_[i] = (i + 1) * d.launch_us * 1e-6;
    host_free_ = d.devices * d.launch_us * 1e-6;
    t_.launch_s = host_free_;
  }

  void Run(const std::vector<TimedKernel>& kernels) {
    t_.start.assign(kernels.size(), 0);
    t_.end.assign(kernels.size(), 0);
    for (size_t k = 0; k < kernels.size(); ++k) {
      const TimedKernel& kn = kernels[k];
      if (kn.where == TimedKernel::Where::Skip) continue;
      double start = 0;
      if (kn.where == TimedKernel::Where::Host) {
        for (int r : kn.reads) start = std::max(start, OnHost(r));
        start = std::max(start, host_free_);
        host_free_ = t_.end[k] = start + kn.seconds;
        t_.host_s += kn.seconds;
        Wrote(kn.write).host = t_.end[k];
      } else {
        for (int dv : kn.devices) {
          start = std::max({start, free_[dv], launched_[dv]});
          for (int r : kn.reads) {
            const Copies& c = copies_[r];
            const bool here = c.spread < kNever && c.spread_as == TimedKernel::Out::Pieces &&
                              std::find(kn.in_place.begin(), kn.in_place.end(), r) != kn.in_place.end();
            start = std::max(start,
                             here ? c.spread : OnDevice(r, dv, kn.share_state ? (int)kn.devices.size() : 1));
          }
        }
        double busy = kn.seconds;
        if (kn.where == TimedKernel::Where::Array) {
          // The weights stream from HBM ahead of the arrays, in program order, as far as the weight SRAM
          // holds them: the product ends when its arrays are done and its last weights are in.
          double loaded = 0;
          for (int dv : kn.devices) loaded = std::max(loaded, Stream(dv, kn.time.hbm_s, start));
          busy = std::max(kn.time.compute_s, loaded - start);
          t_.hidden_load_s += std::max(0.0, kn.time.device_s - busy);
          t_.array_s += busy;
        } else {
          t_.vector_s += busy;
        }
        t_.end[k] = start + busy;
        for (int dv : kn.devices) {
          free_[dv] = t_.end[k];
          if (kn.where == TimedKernel::Where::Array) streamed_[dv].back().first = t_.end[k];
        }
        Copies& c = Wrote(kn.write);
        if (kn.out != TimedKernel::Out::Whole && kn.devices.size() > 1) {
          c.spread = t_.end[k];
          c.spread_devices = kn.devices;
          c.spread_as = kn.out;
        } else {
          for (int dv : kn.devices) c.device[dv] = t_.end[k];
        }
      }
      t_.start[k] = start;
    }
  }

  StepTime Finish(const std::vector<int>& outputs) {
    double end = host_free_;
    for (int o : outputs) end = std::max(end, OnHost(o));
    for (double f : free_) end = std::max(end, f);
    t_.seconds = end;
    return t_;
  }

 private:
  // Device dv's weight stream takes `load` seconds more of HBM for a product that starts computing at
  // `start`: it starts when the last load is done and the SRAM has room (the products before whose weights
  // it would overwrite have ended), and no more than the SRAM holds can arrive before `start`; returns when
  // it is in. The product's end is filled in by the caller.
  double Stream(int dv, double load, double start) {
    const double bw = d_.hbm_gbps * 1e9, room = (double)d_.sram_weights + (double)d_.weight_staging;
    double begin = std::max(hbm_free_[dv], launched_[dv]), held = std::min(load * bw, room);
    auto& done = streamed_[dv];  // (end, bytes) of the products streamed so far, in order
    for (size_t i = done.size(); i-- > 0;) {
      held += done[i].second;
      if (held > room) {
        begin = std::max(begin, done[i].first);
        break;
      }
    }
    done.push_back({kNever, load * bw});
    return hbm_free_[dv] = std::max(begin + load, start + std::max(0.0, load - room / bw));
  }

  Copies& Wrote(int b) {
    Copies& c = copies_[b];
    c.host = c.spread = kNever;
    c.device.assign(d_.devices, kNever);
    c.spread_devices.clear();
    return c;
  }
  double Copy(std::vector<double>& link, int dv, double ready, double bytes) {
    const double begin = std::max(ready, link[dv]), busy = bytes / (d_.link_gbps * 1e9);
    link[dv] = begin + busy;
    busy_[dv] += busy + d_.link_latency_us * 1e-6;
    t_.link_s = std::max(t_.link_s, busy_[dv]);
    t_.link_bytes += bytes;
    t_.transfers++;
    return begin + busy + d_.link_latency_us * 1e-6;
  }

  // When buffer b's data is on the host (copied up from a device, gathered from its pieces or its partial
  // sums added up, if needed).
  double OnHost(int b) {
    Copies& c = copies_[b];
    if (c.host < kNever) return c.host;
    const double bytes = buffers_[b].bytes;
    if (c.spread < kNever) {
      const bool partial = c.spread_as == TimedKernel::Out::Partial;
      const double parts = (double)c.spread_devices.size();
      double arrived = 0;
      for (int dv : c.spread_devices)
        arrived = std::max(arrived, Copy(up_, dv, c.spread, partial ? bytes : bytes / parts));
      if (partial) {  // the host adds them up (between its own kernels)
        const double add = parts * bytes / (host_add_gbps_ * 1e9);
        host_free_ = std::max(host_free_, arrived) + add;
        t_.host_s += add;
        arrived = host_free_;
      }
      return c.host = arrived;
    }
    int from = -1;
    for (int dv = 0; dv < d_.devices; ++dv)
      if (c.device[dv] < kNever && (from < 0 || c.device[dv] < c.device[from])) from = dv;
    if (from < 0) return c.host = 0;  // nothing wrote it this step
    const double arrived = Copy(up_, from, c.device[from], bytes);
    return c.host = arrived;
  }
  // When buffer b's data (its 1/share, for a device that needs only its share) is whole on device dv.
  double OnDevice(int b, int dv, int share) {
    Copies& c = copies_[b];
    if (c.device[dv] < kNever) return c.device[dv];
    const double ready = OnHost(b), arrived = Copy(down_, dv, ready, buffers_[b].bytes / share);
    return c.device[dv] = arrived;
  }

  const SystolicDescription& d_;
  const std::vector<TimedBuffer>& buffers_;
  const double host_add_gbps_;
  std::vector<Copies> copies_;
  std::vector<double> up_, down_, busy_;            // per device's link: when free each way, time busy
  std::vector<double> free_, hbm_free_, launched_;  // per device: idle from, weight loads done, started
  std::vector<std::vector<std::pair<double, double>>> streamed_;  // per device: (end, bytes) per product
  double host_free_ = 0;
  StepTime t_;
};

}  // namespace

StepTime RunStep(const SystolicDescription& d, const std::vector<TimedKernel>& kernels,
                 const std::vector<TimedBuffer>& buffers, const std::vector<int>& outputs,
                 double host_add_gbps) {
  Timeline t(d, buffers, host_add_gbps);
  t.Run(kernels);
  return t.Finish(outputs);
}

}  // namespace prism
