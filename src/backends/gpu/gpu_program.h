// A graph compiled for a GPU-style device: kernels rendered in its dialect, buffers on the device.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/device.h"
#include "backends/gpu/gpu_candidates.h"
#include "backends/gpu/gpu_device.h"
#include "compiler/kernel_ir.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace prism {

struct GpuCompileOptions {
  FusionOptions fusion;
  GpuSchedule schedule;                 // for every kernel ...
  std::vector<GpuSchedule> per_kernel;  // ... unless one per kernel is given (a schedule search)
  // Per kernel (empty: none): run it with the CUDA tensor-core GEMM template (codegen/cuda_mma_gemm.h)
  // instead of its rendering; only for kernels where CudaMmaGemmApplies, on a CUDA device.
  std::vector<bool> mma_gemm;
  // ... or (on CUDA, with mma_min_rows > 0) every kernel where CudaMmaGemmApplies.
  bool mma_where_applicable = false;
  // ... when its GEMM has at least this many rows; below, the kernel's rendering runs (a decode
  // step's single row streams the weights better through a GEMV than through 64-row tiles).
  int64_t mma_min_rows = 1;
  // Per kernel (empty: none): run it through the device's GEMM library (GpuDevice::LibraryGemm,
  // cuBLAS on CUDA) instead of a generated kernel; only for kernels where LibraryGemmApplies and
  // whose weight dtype the device's library takes. A program using it launches kernel by kernel
  // even with graph replay on (library calls are not nodes of the recorded graph).
  std::vector<bool> library_gemm;
};

// True when kernel k is a GemmTemplate with f32 activations and an f32 output (whether the weight's
// dtype is taken is the device's to say: GpuDevice::LibraryGemmAvailable).
bool LibraryGemmApplies(const KernelProgram& p, const Kernel& k);

struct GpuCompileStats {
  int graph_nodes = 0;
  int kernels = 0;
  int functions = 0;           // distinct entry points after deduplication
  int cooperative = 0;         // kernels rendered as work-group reductions
  double plan_seconds = 0;     // fusion + lowering + rendering
  double compile_seconds = 0;  // the device compiler (for CompileMany: the shared build)
};

// What the schedule search decided for one kernel in one size bucket.
struct GpuKernelChoice {
  enum class Tier : uint8_t {
    AsCompiled,   // as GpuCompileOptions say
    Rendered,     // `schedule`, through the renderer
    TensorCores,  // the CUDA tensor-core GEMM template, at every size
    Library,      // the device's GEMM library
  };
  Tier tier = Tier::AsCompiled;
  GpuSchedule schedule;
};

// The form a choice takes in the tuning database and in an artifact's schedule.json.
nlohmann::json GpuChoiceToJson(const GpuKernelChoice& c);
GpuKernelChoice GpuChoiceFromJson(const nlohmann::json& j);  // an unknown tier: AsCompiled

// GEMMs with at least this many rows run on the tensor cores in a CUDA step (bf16 weights). On an
// H100 (1B shape) the tensor-core template lost at 16 and 32 rows and won from 64.
inline constexpr int64_t kStepMmaMinRows = 64;

// The executable of GPU-style devices: the same graph and kernel IR as the CPU's Program, rendered in the
// device's dialect. Weights and state live on the device; state persists across runs until ResetState.
class GpuProgram : public Executable {
 public:
  static std::unique_ptr<GpuProgram> Compile(const Graph& g, std::shared_ptr<GpuDevice> device,
                                             const GpuCompileOptions& opts = {});
  // Several graphs (e.g. a prefill and a decode step) in one device build: one translation unit,
  // one compiler invocation. opts has one entry per graph, or one for all.
  static std::vector<std::unique_ptr<GpuProgram>> CompileMany(const std::vector<const Graph*>& graphs,
                                                              std::shared_ptr<GpuDevice> device,
                                                              const std::vector<GpuCompileOptions>& opts);
  ~GpuProgram();
  GpuProgram(const GpuProgram&) = delete;
  GpuProgram& operator=(const GpuProgram&) = delete;

  void BindWeight(const std::string& name, const HostTensor& t) override;  // copies to the device
  std::vector<HostTensor> Run(const std::map<std::string, HostTensor>& inputs,
                              const SymbolBindings& syms = {}) override;
  void ResetState() override;
  HostTensor ReadStateRows(const std::string& name, int64_t first, int64_t rows) override;
  void WriteStateRows(const std::string& name, int64_t first, const HostTensor& rows) override;
  const std::string& device() const override { return device_name_; }
  size_t kernel_count() const override { return kp_.kernels.size(); }
  // The schedule space the one search explores (backends/gpu/gpu_schedule_space.cpp): the renderer's
  // schedules, the tensor-core and library GEMMs where they apply, and candidates `extra` adds (tests
  // add deliberately wrong ones). Its decisions reach the program through Reschedule.
  std::unique_ptr<ScheduleSpace> OpenSearch() override;
  void AddSearchCandidates(std::function<std::vector<GpuCandidate>(const KernelProgram&, size_t k)> extra) {
    extra_candidates_ = std::move(extra);
  }
  // Renders every bucket's choices (one per kernel) into one new build; a step then runs with the
  // choices of its bucket (BucketOf), or as compiled where no bucket was searched.
  void Reschedule(const std::map<std::string, std::vector<GpuKernelChoice>>& per_bucket);
  const std::map<std::string, std::vector<GpuKernelChoice>>& choices() const { return choices_; }
  // Writes schedule.json (the choices per bucket; GpuTarget::Compile applies it to a program compiled
  // from the model files again) and adds its kernels to the manifest.
  void SaveArtifact(const std::string& dir, nlohmann::json& manifest) override;
  // Replays each step's launches as one recorded graph where the device can (CUDA graphs; no
  // effect on OpenCL): recorded on the first run, then updated with the step's arguments and
  // grids and replayed while the same kernels launch. Off by default. No effect either for a
  // program with library GEMMs (GpuCompileOptions::library_gemm): graph_replays() stays 0.
  void SetGraphReplay(bool on);
  int64_t graph_replays() const { return graph_replays_; }  // runs that replayed a recorded graph
  int64_t graph_records() const { return graph_records_; }  // graphs recorded

  const Graph& graph() const override { return graph_; }
  const KernelProgram& kernels() const { return kp_; }
  const GpuSource& source() const { return plans_.at("").src; }  // as compiled
  const GpuCompileStats& stats() const { return stats_; }
  GpuDevice& gpu() const { return *device_; }

 private:
  friend class GpuScheduleSpace;
  struct Slot {
    GpuMem mem = 0;
    bool allocated = false;
    size_t capacity = 0;  // bytes allocated (scratch is kept while big enough)
    std::vector<int64_t> shape;
  };
  // How each kernel runs in a bucket: its rendering's function, or a tensor-core or library GEMM.
  struct Plan {
    GpuSource src;
    std::vector<int> function_of;       // kernel -> module function of its rendering
    std::vector<int> mma_function;      // kernel -> module function of its tensor-core GEMM (-1: none)
    std::vector<int64_t> mma_min_rows;  // ... used from this many rows on
    std::vector<bool> library_gemm;     // kernel -> run through GpuDevice::LibraryGemm
  };
  GpuProgram(const Graph& g, std::shared_ptr<GpuDevice> device)
      : graph_(g), device_(std::move(device)), device_name_(GpuDialectName(device_->dialect())) {}
  void Place(size_t b, const std::vector<int64_t>& shape);  // (re)allocates zero-filled storage
  void Reuse(size_t b, const std::vector<int64_t>& shape);  // keeps storage that is big enough
  void Release(size_t b);
  // The buffer of state `name`, placed (zeros) if no step has run since ResetState.
  size_t StateSlot(const std::string& name);
  void Launch(const std::vector<size_t>& kernels, const std::vector<GpuLaunchParams>& launches);
  // Renders the kernels under per-kernel choices (empty: as compiled) into a build's source and functions.
  Plan BuildPlan(const std::vector<GpuKernelChoice>& choices, const std::string& prefix, std::string& source,
                 std::vector<std::string>& functions) const;

  Graph graph_;
  std::shared_ptr<GpuDevice> device_;
  std::string device_name_;
  KernelProgram kp_;
  GpuCompileOptions opts_;
  std::map<std::string, Plan> plans_;                            // by bucket; "": as compiled
  std::map<std::string, std::vector<GpuKernelChoice>> choices_;  // what plans_ were built from
  std::shared_ptr<GpuModule> module_;                            // shared by the programs of one CompileMany
  std::function<std::vector<GpuCandidate>(const KernelProgram&, size_t)> extra_candidates_;
  std::vector<Slot> slots_;  // per buffer
  GpuCompileStats stats_;
  bool graph_replay_ = false;
  std::unique_ptr<GpuLaunchGraph> launch_graph_;
  std::vector<size_t> graph_kernels_;  // the kernels launch_graph_ runs, in order ...
  std::vector<int> graph_functions_;   // ... and their functions (a node's function is fixed)
  int64_t graph_replays_ = 0, graph_records_ = 0;
};

}  // namespace prism
