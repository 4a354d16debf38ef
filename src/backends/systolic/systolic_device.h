// The simulated systolic-array system as a device of the registry: matrix products and attention on the
// accelerators' arrays (functional simulator, timing model as their clock), elementwise kernels on the host
// CPU or the accelerators' vector units (the host computes them either way; the step's timeline decides).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/program.h"
#include "backends/device.h"
#include "backends/systolic/description.h"
#include "backends/systolic/simulator.h"
#include "backends/systolic/step_timeline.h"
#include "backends/systolic/timing_model.h"

namespace prism {

// Where and how one device kernel runs in a size bucket.
struct DeviceChoice {
  Tiling tiling;  // GEMMs; {0,0,0}: the model's best for the step's rows
  Placement placement = Placement::Column;
  bool operator==(const DeviceChoice&) const = default;
};
nlohmann::json DeviceChoiceToJson(const DeviceChoice& c);
DeviceChoice DeviceChoiceFromJson(const nlohmann::json& j);

// An attention kernel at these sizes: its shape, and which K/V row query s's key t reads (through its block
// table when paged, else causally in place), over a step's buffers.
struct AttentionCall {
  AttentionShape shape;
  KeyRow row;
};
AttentionCall AttentionCallOf(const KernelProgram& kp, const AttentionTemplate& at, void* const* bufs,
                              const SymbolBindings& b);

class SystolicProgram : public Executable {
 public:
  // Compiles the host program (or loads it and the device choices from an artifact, req.artifact_dir).
  SystolicProgram(std::string name, SystolicDescription desc, const Graph& g, const CompileRequest& req);
  const std::string& device() const override { return name_; }
  const Graph& graph() const override { return host_->graph(); }
  void BindWeight(const std::string& name, const HostTensor& t) override;
  std::vector<HostTensor> Run(const std::map<std::string, HostTensor>& inputs,
                              const SymbolBindings& syms = {}) override;
  void ResetState() override { host_->ResetState(); }
  // The KV cache lives in the devices' HBM (each layer's on its devices); it crosses the links in parallel.
  HostTensor ReadStateRows(const std::string& name, int64_t first, int64_t rows) override {
    return host_->ReadStateRows(name, first, rows);
  }
  void WriteStateRows(const std::string& name, int64_t first, const HostTensor& rows) override {
    host_->WriteStateRows(name, first, rows);
  }
  double StateTransferSeconds(double bytes) const override {
    return desc_.link_latency_us * 1e-6 + bytes / desc_.devices / (desc_.link_gbps * 1e9);
  }
  std::unique_ptr<ScheduleSpace> OpenSearch() override;
  size_t kernel_count() const override { return host_->kernel_count(); }
  nlohmann::json PredictStep(const std::map<std::string, HostTensor>& inputs,
                             const SymbolBindings& syms) override;
  // The host program's artifact, and systolic.json: the description and the device kernels' choices.
  void SaveArtifact(const std::string& dir, nlohmann::json& manifest) override;

  const SystolicDescription& description() const { return desc_; }
  const KernelProgram& kernels() const { return host_->kernels(); }
  bool OnDevice(size_t k) const { return on_device_[k]; }
  // The choice kernel k runs with at these sizes: its placement (placements()), the bucket's tile for it,
  // else the model's best tile there.
  DeviceChoice ChoiceFor(size_t k, const SymbolBindings& b);
  // Where each device kernel's weights are read from in the bucket of these sizes (per kernel; host kernels'
  // entries unused): decided by PlaceWeights when the bucket first runs, unless decided before.
  const std::vector<Placement>& PlacementsFor(const SymbolBindings& b);
  // Decides the placements for the bucket of these sizes with the step's timeline, the elementwise kernels
  // on the vector units: the better of all by column and all by layer, then each kernel moved alone while
  // that shortens the step and the weights fit the devices' HBM. When every device's HBM holds all the
  // weights (and its share of the KV cache), each bucket reads them as suits it best; else the first
  // bucket decided places them for all.
  void PlaceWeights(const SymbolBindings& b);
  void ForgetPlacements() { placements_.clear(); }
  // Kernel k's predicted time under a choice at these sizes.
  KernelTime Predict(size_t k, const DeviceChoice& c, const SymbolBindings& b) const;
  // Runs device kernel k in the simulator on the step's buffers, under a choice; `weight` null: its bound
  // weight's device copy.
  void Simulate(size_t k, const DeviceChoice& c, void* const* bufs, const SymbolBindings& b,
                const DeviceWeight* weight = nullptr);
  const DeviceWeight& BoundWeight(size_t k) const;
  std::map<std::string, std::vector<DeviceChoice>>& choices() { return choices_; }
  Program& host() { return *host_; }

 private:
  // Whether the host hands the device kernels to the simulator (else it computes them itself, for speed).
  void Offload(bool on);
  // The bytes each device's HBM holds under these placements at these sizes: weights and its share of the
  // KV cache (all the weights on each when they fit: Replicated). CheckCapacity throws prism::Error when
  // one exceeds its HBM.
  std::vector<double> HbmBytes(const std::vector<Placement>& placements, const SymbolBindings& b) const;
  bool Replicated(const SymbolBindings& b) const;
  std::string Bucket(const SymbolBindings& b) const { return BucketOf(b, choices_); }
  void CheckCapacity(const SymbolBindings& b);
  // The step's kernels for the timeline at these sizes under these placements (host kernels taking host_s),
  // and per host kernel its form on the devices' vector units (Skip where it must stay on the host).
  std::vector<TimedKernel> StepKernels(const SymbolBindings& b, const std::vector<Placement>& placements,
                                       const std::vector<double>& host_s,
                                       std::vector<TimedKernel>* vector_forms);
  std::vector<TimedBuffer> StepBuffers(const SymbolBindings& b) const;
  // The tile kernel k uses under placement p at these sizes: the bucket's, else the model's best.
  Tiling TileFor(size_t k, Placement p, const SymbolBindings& b);
  // Elementwise kernels reading more weight bytes than this (an embedding table) stay on the host.
  static constexpr double kVectorWeightBytes = 1 << 20;

  std::string name_;
  SystolicDescription desc_;
  std::unique_ptr<Program> host_;
  std::vector<bool> on_device_;
  std::vector<int> home_;                       // per device kernel: its device under layer placement
  std::map<int, DeviceWeight> device_weights_;  // GEMM weight buffer -> its copy in HBM
  std::map<std::string, std::vector<DeviceChoice>> choices_;  // bucket -> per kernel (device kernels only)
  std::map<std::string, std::vector<Placement>> placements_;  // bucket -> per kernel
  std::map<std::tuple<size_t, int64_t, Placement>, Tiling> best_tile_;  // (kernel, rows, placement) -> tile
};

class SystolicDevice : public Device {
 public:
  // `name` is how the registry opened it: "systolic" (the built-in "quad") or "systolic:<description>".
  SystolicDevice(std::string name, SystolicDescription desc)
      : name_(std::move(name)), desc_(std::move(desc)) {}
  std::string name() const override { return name_; }
  std::unique_ptr<Executable> Compile(const Graph& g, const CompileRequest& req = {}) override;
  const SystolicDescription& description() const { return desc_; }

 private:
  std::string name_;
  SystolicDescription desc_;
};

}  // namespace prism
