// The CPU executable: the graph's kernels built as C++ for the CPU, with buffers, weights and state.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/gemm_forms.h"
#include "backends/cpu/jit.h"
#include "backends/cpu/memory_plan.h"
#include "backends/cpu/thread_pool.h"
#include "backends/device.h"
#include "compiler/kernel_ir.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace prism {

struct CompileOptions {
  FusionOptions fusion{.gemm_epilogues = true, .kmajor_activations = true};
  int threads = 0;  // 0: DefaultThreadCount()
  // A compiled artifact's kernels: loaded instead of compiling. The source rendered now must equal
  // the artifact's (kernels.cpp), else the artifact is stale and loading fails.
  std::string prebuilt_so{}, prebuilt_source{};
  // No product rounds its activation: quantized weights keep the rows form (f32 products) unsearched and
  // the search offers no rounding form. Off: int8 dot products, as llama.cpp computes them.
  bool exact = false;
  // A GEMM whose activation outweighs its weight (a convolution's product over many pixels) runs its rows
  // in chunks: it computes its activation itself, a chunk at a time into cache, from the kernel that would
  // have stored it (an im2col), and runs the kernel that alone reads its output (batch norm, ReLU, pooling)
  // on each chunk's rows while they are in cache (program_chunks.cpp); off: each runs as its own kernel.
  bool gemm_chunks = true;
};

struct CompileStats {
  int graph_nodes = 0;
  int kernels = 0;
  double plan_seconds = 0;     // fusion + lowering + rendering
  double compile_seconds = 0;  // system compiler (or cache lookup) + load
  bool cache_hit = false;
  std::string so_path;
};

// Who runs a kernel: the team when its work is large enough (the default), thread 0 alone, or the team.
// Stored in the tuning database as -1, 0, 1 under "parallel".
enum class Threading : int8_t { ByWorkSize = -1, OneThread = 0, Team = 1 };

// What the search decided for one kernel in one size bucket.
struct KernelChoice {
  bool use_template = true;  // template micro-kernel when the kernel has one, else generated code
  Threading threading = Threading::ByWorkSize;
  bool reduce_outer = false;  // generated code with the reduce-outer loop order (when rendered)
  int form = 0;               // a template GEMM's form: its index in GemmForms() (0: "rows")
  int64_t param = 0;          // the form's template parameter (GemmForm::param; 0: the form's default)
  bool operator==(const KernelChoice&) const = default;
};
// The form a choice takes in the tuning database and in an artifact's schedule.
nlohmann::json ChoiceToJson(const KernelChoice& c);
KernelChoice ChoiceFromJson(const nlohmann::json& j);
using KernelChoices = std::map<std::string, std::vector<KernelChoice>>;  // bucket -> per kernel

using KernelFn = void (*)(void* const* bufs, const int64_t* syms, int64_t begin, int64_t end);

// A convolution's product: an activation far larger than the weight (few output channels over many
// pixels), which each thread would read whole under a split of the columns; or larger than a weight that
// stays in L2 while the thread's chunks of rows pass (the ConvNet's third convolution, 128 x 576).
bool ActivationDominates(int64_t m, const GemmTemplate& gm, DType wt);

class Program : public Executable {
 public:
  static std::unique_ptr<Program> Compile(const Graph& g, const CompileOptions& opts = {});
  // Loads what SaveArtifact wrote into `dir` (kernels.so, kernels.cpp, schedule.json) for this graph,
  // compiled with `opts`' fusion; the kernels rendered now must equal the artifact's (cpu_device.cpp).
  static std::unique_ptr<Program> LoadArtifact(const Graph& g, CompileOptions opts, const std::string& dir);

  // Weights are bound once (borrowed: the caller keeps the memory alive, e.g. an mmap).
  void BindWeight(const std::string& name, const HostTensor& t) override;
  std::vector<HostTensor> Run(const std::map<std::string, HostTensor>& inputs,
                              const SymbolBindings& syms = {}) override;
  void ResetState() override;
  HostTensor ReadStateRows(const std::string& name, int64_t first, int64_t rows) override;
  void WriteStateRows(const std::string& name, int64_t first, const HostTensor& rows) override;
  const std::string& device() const override { return device_; }
  const Graph& graph() const override { return graph_; }
  size_t kernel_count() const override { return kp_.kernels.size(); }
  // Writes kernels.so, kernels.cpp and schedule.json; the manifest gets kernels, buffers and the arena's
  // size at a full-context prefill and a decode step (manifest["max_context"] must be set).
  void SaveArtifact(const std::string& dir, nlohmann::json& manifest) override;
  const KernelProgram& kernels() const { return kp_; }
  const std::string& source() const { return source_; }
  const CompileStats& stats() const { return stats_; }
  // Scratch memory of a step at these sizes: intermediates live in one arena, placed by lifetime (see
  // PlanArena); the report gives its size against the bytes separate buffers would need.
  nlohmann::json MemoryReport(const SymbolBindings& b);
  // Pairs of buffers the last step's arena lets share bytes while kernels touching them could run at
  // once or both be live (0 when the plan is right; for tests). Throws before the first step.
  int ArenaConflicts() const;
  // The GEMM that computed kernel k's values itself in the last step (CompileOptions::gemm_chunks), or
  // -1 where k ran as its own kernel.
  int ComputedInside(size_t k) const;
  // Rows of GEMM k's output the last step stored (the rest stayed in the threads' buffers, read there by
  // the kernel computed inside it).
  int64_t StoredRows(size_t k) const;
  // The GEMM form kernel k ran in the last step (a GemmForms() index; -1: no template GEMM).
  int RanForm(size_t k) const {
    return k < launches_.size() && launches_[k].use_template && kp_.kernels[k].gemm ? launches_[k].form : -1;
  }
  int threads() const { return pool_->size(); }
  // Per-kernel wall time accumulated over runs when profiling is on ($PRISM_PROFILE=1 turns it on
  // for every program and prints the table when the program is destroyed).
  void EnableProfile(bool on) { profile_ = on; }
  // One persistent parallel walk over all kernels per step (default), or one dispatch per kernel.
  void SetMegakernel(bool on) { megakernel_ = on; }
  // The schedule space the one search (search/schedule_search.h) explores
  // (backends/cpu/cpu_schedule_space.cpp): its decisions become choices() per size bucket.
  std::unique_ptr<ScheduleSpace> OpenSearch() override;
  const KernelChoices& choices() const { return choices_; }
  // What kernel k runs where neither a search nor the tuning database decided: the first order and form,
  // except where its loads favour the reduce-outer order, a bf16 activation makes bf16 dot products exact,
  // or its weights are quantized (int8 dot products, one row at a time or in panels by the rows in b).
  KernelChoice DefaultChoice(size_t k, const SymbolBindings& b) const;
  // Whether kernel k's product in form `form` rounds its activation (a bf16 activation on bf16 dot
  // products loses nothing).
  bool RoundsActivation(size_t k, int form) const;
  bool exact() const { return exact_; }
  void SetChoices(KernelChoices c) { choices_ = std::move(c); }
  std::string ProfileTable() const;
  // Wall seconds each kernel took over the profiled runs (per-kernel dispatch only).
  const std::vector<double>& kernel_seconds() const { return kernel_seconds_; }
  // Kernels another device computes (an accelerator around this host: backends/systolic): thread 0
  // calls `fn` for them instead of their own code, with the step's buffers and sizes (in kernels().symbols
  // order), at their place in the kernel order; the rest of the step runs here as before.
  using OffloadFn = std::function<void(size_t k, void* const* bufs, const int64_t* syms)>;
  void SetOffload(std::vector<bool> offloaded, OffloadFn fn) {
    offloaded_ = std::move(offloaded);
    offload_ = std::move(fn);
  }
  ~Program();

 private:
  friend class CpuScheduleSpace;
  Program(const Graph& g, KernelProgram kp, std::string source, JitLibrary lib, int threads);
  // How one kernel runs this step: its size, and whether the team splits it or thread 0 runs it.
  struct KernelLaunch {
    int64_t total = 0, inner = 1, m = 0;
    int64_t a_group = 0;  // a GEMM's K-major activation: rows per group (GemmTemplate::a_group); 0: row-major
    bool parallel = false;
    bool use_template = false;
    bool reduce_outer = false;
    int form = 0;       // GemmForms() index
    int64_t param = 0;  // the form's template parameter (0: its default)
    bool barrier_before = false;
    bool skip = false;            // covered by an attention kernel that runs its template this step
    AttentionDims attn{};         // this step's sizes, for an attention template
    int64_t attn_offset[4] = {};  // where its q, K, V and mask start in their buffers (elements)
    int team_slot = 0;            // a GEMM the team rounds the activation of: which shared buffer (team_act_)
    int64_t work = 0;             // its multiply-adds (or elements), for whether it splits across threads
    int producer = -1;            // a GEMM computing its activation chunk by chunk: the kernel it runs for it
    int consumer = -1;            // a GEMM running its output's reader chunk by chunk: that kernel
    int consumed_in = -1;         // such a reader: the GEMM (it computes only the elements left over)
    bool whole_output = false;    // a GEMM running its reader: store all its output (the search reads it)
  };
  // Where a GEMM runs its output's reader (consumer_plan_): the reader's loop extents, its loads of the
  // GEMM's output as affine functions of its loop variables (non-decreasing in its elements' order), and per
  // thread the reader's elements [lo, hi) it computes inside the GEMM. Where no element reads rows further
  // apart than a chunk (`local`), the GEMM's output stays in a buffer of each thread's own: thread t stores
  // only its rows below stored[t].first and from stored[t].second on, which the leftovers read.
  struct ConsumerPlan {
    std::vector<int64_t> extents, base;
    std::vector<std::vector<int64_t>> coef;
    std::vector<std::pair<int64_t, int64_t>> inside, stored;
    bool local = false;
    int64_t total = 0;
    std::vector<int64_t> key;  // the rows, team and sizes it was made for, and what it decided then
    int result = -1;
    // The lowest (highest) output element element o reads; the first o in [lo, hi) whose reaches `element`.
    int64_t Read(int64_t o, bool highest) const;
    int64_t First(int64_t lo, int64_t hi, int64_t element, bool highest) const;
  };
  // Shared buffers for the rounded activations of GEMMs split across the team in a form with fit_team
  // (AMX), sized for this step's (PlanLaunches, or the search for one candidate). Successive such GEMMs
  // alternate between the two: a thread may start rounding the next one's while another still reads
  // this one's, never the one after (its rounding waits for everyone at the next one's barrier).
  void FitTeamActivations();
  // Weights repacked for a GEMM form (int8 blocks, panels, AMX tiles), made on first use and kept (by
  // form and weight buffer) when `pack`. Returns false where this CPU or weight type has no such form.
  bool PrepareForm(const GemmTemplate& gm, int form, bool pack = true);
  // Packs each (GEMM, form) pair's weights not packed yet, several weights at once on the team.
  void PackForms(const std::vector<std::pair<const GemmTemplate*, int>>& wanted);
  const void* Packed(int form, int w_buffer) const;  // the form's packed weights, or null
  // The search times a GEMM as a step runs it: its weights (and their repacked forms) not in cache.
  void EvictWeights(const GemmTemplate& gm) const;
  // How each kernel runs at these sizes (launches_), under the bucket's choices; `prepare` makes the
  // repacked weights the chosen forms read (false where nothing will run, as for a memory report).
  void PlanLaunches(const SymbolBindings& b, bool prepare = true);
  // Places this step's intermediates in the arena: buffers share bytes only when no two kernels touching
  // them can run at once; one no kernel touches this step gets none. Sizes grow
  // geometrically and the placement is kept while it fits, so decode steps (whose attention buffers
  // grow by one key each) rarely replan. Needs PlanLaunches first.
  void PlanArena(const std::vector<int64_t>& needed);
  // Per buffer: `needed` bytes (0 for buffers that are not intermediates or that no running kernel
  // touches) and its lifetime in kernel positions, under the planned steps.
  std::vector<ScratchItem> ScratchLifetimes(const std::vector<int64_t>& needed) const;
  std::vector<void*> PrepareBuffers(const std::map<std::string, HostTensor>& inputs, const SymbolBindings& b);
  void RunChunk(size_t k, int thread, int threads, void* const* bufs, const int64_t* syms);
  // A GEMM over many rows in chunks (program_chunks.cpp). Decided at construction, per kernel: the kernel
  // that alone writes its activation element by element for no other reader (ProducerOf), and the kernel
  // that alone reads its output at affine indices (ConsumerOf); -1: none. Per step: whether launch st of
  // GEMM k runs its rows in chunks, and so its producer (then skipped) and its consumer (then left the
  // elements that read two threads' rows); thread t's rows [mb, me) of GEMM k so; a consumer's leftovers.
  int ProducerOf(size_t k, const std::vector<std::set<int>>& reads) const;
  int ConsumerOf(size_t k, const std::vector<std::set<int>>& reads, std::vector<int>* first) const;
  bool RowsInChunks(size_t k, const KernelLaunch& st) const;
  int FusedProducer(size_t k, const KernelLaunch& st) const;
  int FusedConsumer(size_t k, const KernelLaunch& st, const SymbolBindings& b);  // fills consumer_plan_[k]
  void FuseTouched(size_t k);  // fused_touched_[k] for its launch
  void RunGemmInChunks(size_t k, int t, GemmCall call, int64_t mb, int64_t me, void* const* bufs,
                       const int64_t* syms);
  void RunConsumerRest(size_t c, void* const* bufs, const int64_t* syms);
  // Thread t's share of m rows split across `threads`, in blocks every form's row tile divides.
  static std::pair<int64_t, int64_t> RowShare(int64_t m, int t, int threads);
  bool Offloaded(size_t k) const { return k < offloaded_.size() && offloaded_[k]; }
  void RunMegakernel(void* const* bufs, const int64_t* syms);
  void RunPerKernel(void* const* bufs, const int64_t* syms);

  std::string device_ = "cpu";
  Graph graph_;
  KernelProgram kp_;
  std::string source_;
  JitLibrary lib_;
  // Per kernel: generated code, its reduce-outer variant or null, its GEMM template's epilogue or null.
  std::vector<KernelFn> fns_, fns_ro_, fns_epi_;
  std::vector<std::vector<int>> operands_;  // per kernel: the buffers its generated functions take, in order
  // Runs kernel k's generated function f over elements [begin, end), given every buffer's pointer; buffer
  // `moved` (if >= 0) at `moved_to` instead.
  void CallGenerated(KernelFn f, size_t k, void* const* bufs, const int64_t* syms, int64_t begin, int64_t end,
                     int moved = -1, void* moved_to = nullptr) const;
  // DefaultChoice's part that does not depend on sizes, per kernel, decided at construction.
  std::vector<KernelChoice> unsearched_;
  KernelChoice UnsearchedChoice(size_t k) const;
  bool exact_ = false;  // CompileOptions::exact
  std::unique_ptr<ThreadPool> pool_;
  std::map<std::pair<int, int>, PackedGemmWeight> packed_;  // (form, weight buffer) -> repacked weights
  AmxActivation team_act_[2];
  std::vector<HostTensor> storage_;  // per buffer: weights, state and scratch; inputs are borrowed per run
  std::vector<int64_t> capacity_;    // bytes allocated per output buffer (reused while big enough)
  // Per graph output: the memory of the last result Run returned and its bytes, written again by the next
  // Run once the caller has let that result go (a serving step's logits: not allocated and zeroed each step).
  std::vector<std::pair<std::shared_ptr<void>, int64_t>> results_;
  std::vector<std::vector<int64_t>> shapes_;  // per buffer, this step's shape
  // Sizes kept from step to step while the symbols they read keep their values (a decode step changes
  // `past`, which most kernels' and buffers' sizes do not read): per kernel, then per buffer after them,
  // the indices (into kp_.symbols) of the symbols its sizes read, or null where one is not among them.
  std::vector<std::optional<std::vector<int>>> size_symbols_;
  std::vector<std::vector<int64_t>> size_seen_;  // their values when last evaluated; empty: never
  std::vector<int> size_branch_;                 // per kernel: which of its sizes were evaluated then
  // Whether item i's sizes, last evaluated for `branch` (which of a kernel's sizes), may be kept at bindings
  // whose symbols are `values` (unbound: `bound` false); SizesEvaluated records them once evaluated.
  bool SizesKept(size_t item, int branch, const std::vector<int64_t>& values,
                 const std::vector<bool>& bound) const;
  void SizesEvaluated(size_t item, int branch, const std::vector<int64_t>& values);
  KernelChoice DefaultChoiceForRows(size_t k, int64_t m) const;
  std::vector<const Node*> input_nodes_;
  std::vector<std::set<int>> touched_;             // per kernel: buffers it reads or writes
  std::vector<std::vector<int>> in_place_inputs_;  // per kernel: inputs it may write its output over
  std::vector<std::vector<int>> deps_;    // per kernel: earlier kernels it must wait for (RAW, WAR, WAW)
  std::vector<int> producer_, consumer_;  // per kernel: ProducerOf, ConsumerOf
  std::vector<int> bias_;                 // per kernel: BiasOf (a form with adds_bias adds it itself)
  std::vector<std::vector<int>> consumer_first_;  // per kernel: what it runs before its consumer (ConsumerOf)
  std::vector<ConsumerPlan> consumer_plan_;       // per GEMM running its consumer this step
  // Per GEMM running its rows in chunks: what it touches (its own buffers, its producer's reads, its
  // consumer's); Touched(k): what kernel k touches in the planned step.
  std::vector<std::set<int>> fused_touched_;
  const std::set<int>& Touched(size_t k) const {
    const bool fused = k < launches_.size() && (launches_[k].producer >= 0 || launches_[k].consumer >= 0);
    return fused ? fused_touched_[k] : touched_[k];
  }
  bool gemm_chunks_ = true;  // CompileOptions::gemm_chunks
  std::vector<KernelLaunch> launches_;
  std::unique_ptr<SpinBarrier> barrier_;
  HostTensor arena_;                      // all intermediates of a step
  std::vector<ScratchItem> arena_items_;  // per buffer: planned bytes and lifetime (intermediates only)
  std::vector<int64_t> arena_offset_;     // per buffer: offset in the arena, -1 if none
  int64_t arena_bytes_ = 0;
  std::vector<uint8_t> arena_launches_;  // the step plan the lifetimes were taken from
  bool share_scratch_ = true;            // false while searching: kernels then run alone, in any order
  bool megakernel_ = true;
  KernelChoices choices_;
  CompileStats stats_;
  bool profile_ = false;
  std::vector<double> kernel_seconds_;
  std::vector<int64_t> kernel_calls_;
  std::vector<bool> offloaded_;
  OffloadFn offload_;
};

}  // namespace prism
