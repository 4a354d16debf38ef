// The simulated systolic-array system as a device of the registry: matrix products and attention on the
// accelerators (functional simulator, timing model as their clock), everything else on the host CPU.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/program.h"
#include "backends/device.h"
#include "backends/systolic/description.h"
#include "backends/systolic/simulator.h"
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
  HostTensor ReadStateRows(const std::string& name, int64_t rows) override {
    return host_->ReadStateRows(name, rows);
  }
  void WriteStateRows(const std::string& name, const HostTensor& rows) override {
    host_->WriteStateRows(name, rows);
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
  // The choice kernel k runs with at these sizes (the bucket's, else the model's best tile, by column).
  DeviceChoice ChoiceFor(size_t k, const SymbolBindings& b);
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
  // Throws prism::Error when the weights placed on a device (under the choices at these sizes) and its share
  // of the KV cache exceed its HBM.
  void CheckCapacity(const SymbolBindings& b);

  std::string name_;
  SystolicDescription desc_;
  std::unique_ptr<Program> host_;
  std::vector<bool> on_device_;
  std::vector<int> home_;                       // per device kernel: its device under layer placement
  std::map<int, DeviceWeight> device_weights_;  // GEMM weight buffer -> its copy in HBM
  std::map<std::string, std::vector<DeviceChoice>> choices_;  // bucket -> per kernel (device kernels only)
  std::map<std::pair<size_t, int64_t>, Tiling> best_tile_;    // (kernel, rows) -> the model's best tile
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
