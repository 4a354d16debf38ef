// One step of the simulated system as a timeline: the host's kernels, the devices' programs (matrix
// products and attention on the arrays, elementwise kernels on the vector units) and the transfers between
// them over each device's link, following where every buffer's data is at each moment.
#pragma once

#include <string>
#include <vector>

#include "backends/systolic/description.h"
#include "backends/systolic/timing_model.h"

namespace prism {

// A kernel of the step as the timeline sees it.
struct TimedKernel {
  enum class Where : uint8_t { Host, Array, Vector, Skip };
  Where where = Where::Skip;
  double seconds = 0;  // Host: measured; Vector: predicted; Array: time.device_s
  KernelTime time;     // Array: the model's parts (device_s, compute_s, hbm_s)
  enum class Out : uint8_t { Whole, Pieces, Partial };
  std::vector<int> devices;   // Array and Vector: the devices it runs on
  Out out = Out::Whole;       // Array and Vector: whole on each of `devices`, in pieces over them, or each
                              // device's partial sums (added up on the host)
  bool share_state = false;   // Array (attention): each device needs only its share of a state buffer
  std::vector<int> reads;     // buffers read
  std::vector<int> in_place;  // of those, read as their pieces lie on `devices` (no copy)
  int write = -1;             // buffer written
};

// A buffer as the timeline moves it.
struct TimedBuffer {
  enum class Start : uint8_t { Host, Everywhere, Nowhere };  // inputs; weights and the KV cache; the rest
  Start start = Start::Nowhere;
  double bytes = 0;  // what one transfer of it moves (a state buffer: the rows a step writes)
};

struct StepTime {
  double seconds = 0;                               // launch to the outputs on the host
  double host_s = 0, array_s = 0, vector_s = 0;     // busy time, summed over kernels
  double link_s = 0, link_bytes = 0, launch_s = 0;  // the busiest link's time, all bytes, launches
  double hidden_load_s = 0;                         // weight loads done before their product began
  int transfers = 0;                                // host <-> device copies
  std::vector<double> start, end;                   // per kernel (Skip: 0)
};

// The timeline: the host launches one program per device (launch_us each), then runs its kernels in order
// as their inputs reach it; a device runs its kernels in order as their inputs reach it. Data moves through
// the host: a device-to-device copy is a copy up and one down; a column-split output gathers its pieces
// (each device's over its own link, in parallel). Each link direction carries one copy at a time (its
// bandwidth); latency overlaps. Partial sums go up whole from each device and the host adds them (at
// host_add_gbps of bytes read). Each device streams its products' weights from HBM in program order, ahead
// of its arrays as far as its weight SRAM (and weight staging memory) holds them, so loads go on while it
// waits for data.
StepTime RunStep(const SystolicDescription& d, const std::vector<TimedKernel>& kernels,
                 const std::vector<TimedBuffer>& buffers, const std::vector<int>& outputs,
                 double host_add_gbps);

}  // namespace prism
