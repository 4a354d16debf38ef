// The systolic system's schedule space for the one search: each bucket's step decides where the device
// kernels' weights are read from (SystolicProgram::PlaceWeights, the step's timeline as the clock); device
// kernels then choose an SRAM tile, timed by the timing model and checked in the functional simulator within
// its rounding bounds; host kernels are the CPU's, timed for real.
#include <functional>

#include "backends/systolic/systolic_device.h"

namespace prism {
namespace {

class SystolicScheduleSpace : public ScheduleSpace {
 public:
  SystolicScheduleSpace(SystolicProgram& p, std::unique_ptr<ScheduleSpace> host)
      : p_(p), host_(std::move(host)), d_(p.description()) {}

  const KernelProgram& kernels() const override { return p_.kernels(); }
  std::string identity() const override {
    // "steps": placements decided by the step's timeline (entries of the earlier per-kernel choice differ).
    return "systolic|steps|" + d_.name + "|" + std::to_string(std::hash<std::string>{}(d_.text)) + "|" +
           host_->identity();
  }
  DeviceCeilings Ceilings(size_t k) const override {
    if (!p_.OnDevice(k)) return host_->Ceilings(k);
    return {d_.devices * d_.PeakFlops() / 1e9,
            std::string(d_.bf16_products ? "bf16" : "f32") + " systolic arrays", d_.devices * d_.hbm_gbps};
  }
  void StartBucket(const std::string& bucket, const std::string& from, const SymbolBindings& sizes) override {
    host_->StartBucket(bucket, from, sizes);
    auto& chosen = p_.choices()[bucket];
    chosen = from.empty() ? std::vector<DeviceChoice>(kernels().kernels.size()) : p_.choices().at(from);
  }
  SearchBuffers Prepare(const SymbolBindings& sizes, const std::vector<bool>& timed, bool whole_step,
                        uint64_t seed) override {
    buffers_ = host_->Prepare(sizes, timed, whole_step, seed);
    weights_.clear();
    // Where each bucket's step runs best (or where the first bucket put the weights, when the devices cannot
    // each hold them all); the kernels then choose tiles.
    if (!placed_) p_.ForgetPlacements();
    placed_ = true;
    p_.PlaceWeights(sizes);
    return buffers_;
  }
  std::vector<ScheduleCandidate> Candidates(size_t k, nlohmann::json& notes) override {
    if (!p_.OnDevice(k)) return host_->Candidates(k, notes);
    const Kernel& kn = kernels().kernels[k];
    std::vector<ScheduleCandidate> out;
    const Placement pl = p_.PlacementsFor(buffers_.sizes)[k];
    std::vector<Tiling> tiles = {Tiling{0, 0, 0}};
    if (kn.gemm) {
      const auto [cols, depth] = DeviceShare(d_, kn.gemm->n, kn.gemm->k, pl);
      tiles = TilingCandidates(d_, kn.gemm->m.Eval(buffers_.sizes), cols, depth, d_.bf16_products ? 2 : 4);
    }
    for (const Tiling& t : tiles) {
      const DeviceChoice c{t, pl};
      std::string name = PlacementName(pl);
      if (kn.gemm) name += "/" + std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k);
      const KernelTime kt = p_.Predict(k, c, buffers_.sizes);
      out.push_back({name, DeviceChoiceToJson(c), kt.ToJson(), true, ""});
    }
    notes["on"] = "systolic devices (" + d_.name + ")";
    if (kn.attention) {  // the devices always run attention fused: the unfused form's kernels never run
      notes["always_fused"] = true;
      notes["unfused_kernels"] = nlohmann::json::array();
      for (size_t j = 0; j < kernels().kernels.size(); ++j)
        if (kernels().kernels[j].covered_by == (int)k)
          notes["unfused_kernels"].push_back(kernels().kernels[j].name);
    }
    return out;
  }
  void BeforeReference(size_t k) override { host_->BeforeReference(k); }
  std::vector<double> RunAndRead(size_t k, const ScheduleCandidate& c,
                                 const std::vector<int64_t>& at) override {
    if (!p_.OnDevice(k)) return host_->RunAndRead(k, c, at);
    const bool gemm = kernels().kernels[k].gemm.has_value();
    const DeviceChoice choice = DeviceChoiceFromJson(c.choice);
    p_.Simulate(k, choice, buffers_.host.data(), buffers_.sizes, gemm ? Weight(k) : nullptr);
    const KBuffer& out = kernels().buffers[kernels().kernels[k].out_buffer];
    std::vector<double> got;
    for (int64_t i : at)
      got.push_back(LoadAsDouble(buffers_.host[kernels().kernels[k].out_buffer], out.dtype, i));
    return got;
  }
  double ErrorBound(size_t k, const ScheduleCandidate& c, int64_t out_index) override {
    if (!p_.OnDevice(k)) return host_->ErrorBound(k, c, out_index);
    const Kernel& kn = kernels().kernels[k];
    void* const* bufs = buffers_.host.data();
    if (kn.gemm) {
      const auto* a = static_cast<const float*>(bufs[kn.gemm->a_buffer]);
      return GemmErrorBound(d_, a + out_index / kn.gemm->n * kn.gemm->k, *Weight(k), out_index % kn.gemm->n);
    }
    const AttentionTemplate& at = *kn.attention;
    const AttentionCall call = AttentionCallOf(kernels(), at, bufs, buffers_.sizes);
    return AttentionErrorBound(d_, static_cast<const float*>(bufs[at.q_buffer]),
                               static_cast<const float*>(bufs[at.k_buffer]),
                               static_cast<const float*>(bufs[at.v_buffer]), call.shape, at.scale,
                               at.exp_scale, call.row, out_index);
  }
  double TimeUs(size_t k, const ScheduleCandidate& c) override {
    if (!p_.OnDevice(k)) return host_->TimeUs(k, c);
    const KernelTime kt = p_.Predict(k, DeviceChoiceFromJson(c.choice), buffers_.sizes);
    return (kt.link_s + kt.InStep()) * 1e6;  // as in the step's timeline (ties: the model's order)
  }
  void Apply(const std::string& bucket, size_t k, const nlohmann::json& choice) override {
    if (!p_.OnDevice(k)) return host_->Apply(bucket, k, choice);
    auto& chosen = p_.choices()[bucket];
    chosen.resize(kernels().kernels.size());
    chosen[k] = DeviceChoiceFromJson(choice);  // (its tile is used where its placement is the bucket's)
  }
  bool Runs(const std::string& bucket, size_t k) const override {
    const Kernel& kn = kernels().kernels[k];
    if (kn.covered_by >= 0 && p_.OnDevice(kn.covered_by)) return false;
    return p_.OnDevice(k) || host_->Runs(bucket, k);
  }
  void Finish() override { host_->Finish(); }

 private:
  // The device copy of kernel k's weight as the search's buffers hold it (real weights where bound).
  const DeviceWeight* Weight(size_t k) {
    const GemmTemplate& gm = *kernels().kernels[k].gemm;
    auto [it, fresh] = weights_.try_emplace(gm.w_buffer);
    if (fresh)
      it->second =
          ToDeviceWeight(d_, buffers_.host[gm.w_buffer], kernels().buffers[gm.w_buffer].dtype, gm.n, gm.k);
    return &it->second;
  }

  SystolicProgram& p_;
  std::unique_ptr<ScheduleSpace> host_;
  const SystolicDescription& d_;
  SearchBuffers buffers_;
  std::map<int, DeviceWeight> weights_;
  bool placed_ = false;
};

}  // namespace

std::unique_ptr<ScheduleSpace> SystolicProgram::OpenSearch() {
  return std::make_unique<SystolicScheduleSpace>(*this, host_->OpenSearch());
}

}  // namespace prism
