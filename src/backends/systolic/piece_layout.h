// Buffers left in pieces over the devices (a column-split product's output, attention split by heads) and
// which kernels can work on such pieces where they lie: each output element computed on the device that
// holds every piece-element it reads.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/systolic/step_timeline.h"
#include "compiler/kernel_ir.h"
#include "ir/host_tensor.h"

namespace prism {

// Element f of the buffer lies on devices[((f / inner) % count) / share].
struct PieceLayout {
  int64_t inner = 1, count = 1, share = 1;
  std::vector<int> devices;
  bool operator==(const PieceLayout&) const = default;
  int DeviceOf(int64_t f) const { return devices[(f / inner) % count / share]; }
};

// The layout of a [.., count, inner...] dimension cut into `parts` runs of ceil(count / parts).
PieceLayout SplitLayout(int64_t inner, int64_t count, int parts);

// Whether kernel kn, reading the buffers in `pieces` as they lie (the others whole on every device), computes
// each output element on one device from that device's pieces alone; if so, its output's layout. Checked
// on a sample of output elements and reduction indices at sizes b (gathered indices taken as 0: they pick
// rows, not the split dimension); nullopt where an element needs pieces of two devices or the outputs'
// devices fit no split of one of the output buffer's dimensions.
std::optional<PieceLayout> LocalLayout(const KernelProgram& kp, const Kernel& kn,
                                       const std::map<int, PieceLayout>& pieces, const SymbolBindings& b);

// Which of a step's device kernels read pieces where they lie, and how their outputs lie, in step order: a
// column-split product leaves its output in column pieces, attention by KV heads its output by heads (and
// reads q and the KV cache in place when they lie by its heads); a row-split product reads its input in
// place when it lies in the product's row pieces; an elementwise kernel on the vector units works on its
// inputs' pieces where they lie when each output element needs one device's pieces only (LocalLayout).
class StepLayouts {
 public:
  StepLayouts(const KernelProgram& kp, const SymbolBindings& b) : kp_(kp), b_(b) {}
  // Sets each kernel's in_place reads, and a vector kernel's devices and output, for the step as given.
  void Apply(std::vector<TimedKernel>& step);

 private:
  const KernelProgram& kp_;
  const SymbolBindings& b_;
  std::map<std::string, std::optional<PieceLayout>> local_;  // LocalLayout's answers at these sizes
};

}  // namespace prism
