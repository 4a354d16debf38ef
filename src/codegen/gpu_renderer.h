// Renders a kernel program for GPU-style devices, in two dialects (CUDA C and OpenCL C).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/kernel_ir.h"
#include "ir/host_tensor.h"

namespace prism {

enum class GpuDialect : uint8_t { Cuda, OpenCL };
std::string_view GpuDialectName(GpuDialect d);

// How one kernel is mapped onto threads. Correctness never depends on these choices (every
// combination computes the same values); a schedule search varies them per kernel.
struct GpuSchedule {
  enum class Reduce : uint8_t {
    Auto,         // cooperative when the kernel's value has a reduction of at least cooperative_min,
                  // with threads cut to fit a short constant reduction (not below 32)
    Cooperative,  // one work-group per output element; threads stride the reduction, tree-combine in local
                  // memory
    PerThread,    // one thread per output element; reductions are plain loops
  };
  int threads = 256;  // threads per work-group/block (cooperative: rounded down to a power of two)
  Reduce reduce = Reduce::Auto;
  int64_t cooperative_min =
      64;  // Auto: smallest reduction extent worth a work-group (symbolic extents qualify)
  int64_t max_groups = 1 << 16;  // grid cap; kernels loop (grid-stride) over the remaining elements
};

// One rendered kernel: how to call it. Arguments are, in order, the buffers in `buffers` (device
// pointers into KernelProgram::buffers) and then every KernelProgram::symbols value as int64.
struct GpuKernelPlan {
  std::string function;      // entry point; kernels with identical bodies share one function
  bool cooperative = false;  // one work-group per output element
  int threads = 0;           // work-group size the function was rendered for (and must run with)
  int64_t max_groups = 0;
  std::vector<int> buffers;  // argument buffer indices (the output first)
};

struct GpuSource {
  GpuDialect dialect = GpuDialect::OpenCL;
  std::string source;                  // one translation unit: the prelude, then every function
  std::string functions_source;        // the functions alone (programs can share one prelude)
  std::vector<GpuKernelPlan> kernels;  // one per KernelProgram::kernels
  std::vector<std::string> functions;  // distinct entry points, in source order
};

// Work-groups and threads for one launch, given the symbol values.
struct GpuLaunchDims {
  int64_t elements = 0;  // output elements (0: skip the launch)
  int64_t groups = 0;
  int threads = 0;
};

class GpuRenderer {
 public:
  explicit GpuRenderer(GpuDialect dialect) : dialect_(dialect) {}
  // One schedule for every kernel. Function names are the kernel names after `prefix`.
  GpuSource Render(const KernelProgram& p, const GpuSchedule& schedule = {},
                   const std::string& prefix = "") const;
  // A schedule per kernel (size must equal p.kernels.size()).
  GpuSource Render(const KernelProgram& p, const std::vector<GpuSchedule>& schedules,
                   const std::string& prefix = "") const;
  // Types and helpers every function needs, once per translation unit.
  std::string Prelude() const;
  GpuDialect dialect() const { return dialect_; }

 private:
  GpuDialect dialect_;
};

GpuLaunchDims GpuLaunch(const Kernel& k, const GpuKernelPlan& plan, const SymbolBindings& b);

}  // namespace prism
