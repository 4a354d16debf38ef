// What a device offers the one schedule search (search/schedule_search.h): per kernel, the schedules it
// can run, and how it runs, reads and times one alone on random data at a bucket's sizes.
//
// The search owns the loop over buckets and kernels, the check against the kernel IR evaluated in
// double, the timing rounds, the busy-machine guard, the tuning database and the receipts; a device
// owns its candidates, its buffers, its clock and how a choice is applied.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/kernel_ir.h"
#include "ir/host_tensor.h"

namespace prism {

// One way to run one kernel on a device.
struct ScheduleCandidate {
  std::string name;       // unique among the kernel's candidates: "template-rows/parallel", "coop/128"
  nlohmann::json choice;  // the device's own form of it: what Apply takes and the tuning database keeps
  nlohmann::json detail;  // shown beside the candidate in the receipt (null: nothing)
  bool bounded = false;   // rounds on the way (bf16/int8 activations): ErrorBound allows more per output
  std::string broken;     // non-empty: cannot run (e.g. does not compile); fails the check with this message
};

// A device's ceilings for one kernel's roofline floor (0: unknown, no floor computed).
struct DeviceCeilings {
  double peak_gflops = 0;  // the fastest instruction the kernel's products may use
  std::string peak_basis;  // which instruction that is
  double read_gbps = 0;
};

// The search's view of a bucket's buffers: every one on the host, for the reference evaluation.
struct SearchBuffers {
  SymbolBindings sizes;     // every symbol of the kernel program bound
  std::vector<void*> host;  // per KernelProgram buffer (null where nothing is searched this bucket)
};

class ScheduleSpace {
 public:
  virtual ~ScheduleSpace() = default;
  virtual const KernelProgram& kernels() const = 0;
  // Where a decision holds (part of every tuning-database key): the device's model and what else changes
  // the answer, such as a team's size and the template kernels' revision.
  virtual std::string identity() const = 0;
  virtual DeviceCeilings Ceilings(size_t k) const {
    (void)k;
    return {};
  }
  // A bucket's choices start as those of bucket `from` (searched before it), or as the defaults at its
  // sizes ("").
  virtual void StartBucket(const std::string& bucket, const std::string& from,
                           const SymbolBindings& sizes) = 0;
  // Buffers at a bucket's sizes: every buffer the kernels marked in `timed` touch holds random non-zero
  // values (real weights where they are bound), and with `whole_step` every buffer of a step exists. With
  // neither, only the sizes are bound.
  virtual SearchBuffers Prepare(const SymbolBindings& sizes, const std::vector<bool>& timed, bool whole_step,
                                uint64_t seed) = 0;
  // Kernel k's candidates; `notes` (an object) gets what the receipt should say of the kernel as a whole.
  virtual std::vector<ScheduleCandidate> Candidates(size_t k, nlohmann::json& notes) = 0;
  // Before kernel k's reference values are taken: runs whatever computes its inputs this step (the
  // kernels a fused attention template covers, whose outputs its unfused form reads).
  virtual void BeforeReference(size_t k) { (void)k; }
  // Runs c once from the contents the reference was taken from and reads kernel k's output at `at`.
  virtual std::vector<double> RunAndRead(size_t k, const ScheduleCandidate& c,
                                         const std::vector<int64_t>& at) = 0;
  // For a bounded candidate: the most its rounding can move output `out_index`, from this output's inputs.
  virtual double ErrorBound(size_t k, const ScheduleCandidate& c, int64_t out_index) {
    (void)k, (void)c, (void)out_index;
    return 0;
  }
  // One run of c as a step would run it (weights not in cache), in microseconds of the device's clock.
  virtual double TimeUs(size_t k, const ScheduleCandidate& c) = 0;
  // Makes `choice` (a ScheduleCandidate::choice, possibly from the database) kernel k's in `bucket`.
  virtual void Apply(const std::string& bucket, size_t k, const nlohmann::json& choice) = 0;
  // Whether kernel k runs in a step under the bucket's choices (a fused template may cover it).
  virtual bool Runs(const std::string& bucket, size_t k) const {
    (void)bucket, (void)k;
    return true;
  }
  // Decisions over the whole step that timing kernels alone cannot see (how a CPU team splits it): the
  // variants worth timing under the bucket's choices, one timed step of a variant, and applying one.
  virtual std::vector<std::string> StepVariants(const std::string& bucket) {
    (void)bucket;
    return {};
  }
  virtual double TimeStepUs(const std::string& bucket, const std::string& variant) {
    (void)bucket, (void)variant;
    return 0;
  }
  virtual void ApplyStep(const std::string& bucket, const std::string& variant) {
    (void)bucket, (void)variant;
  }
  // The search is over: keep what the choices need, free what only candidates needed, reset the state.
  virtual void Finish() = 0;
};

}  // namespace prism
