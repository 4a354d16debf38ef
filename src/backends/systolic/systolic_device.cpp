// The systolic system's executable: the host Program runs the step, handing matrix products and attention
// to the simulated devices; their time comes from the timing model, the host's from its own clock.
#include "backends/systolic/systolic_device.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "backends/cpu/attention.h"
#include "ir/error.h"

namespace prism {

nlohmann::json DeviceChoiceToJson(const DeviceChoice& c) {
  return {{"tile", {c.tiling.m, c.tiling.n, c.tiling.k}}, {"placement", PlacementName(c.placement)}};
}

DeviceChoice DeviceChoiceFromJson(const nlohmann::json& j) {
  DeviceChoice c;
  const auto& t = j.at("tile");
  c.tiling = {t.at(0).get<int64_t>(), t.at(1).get<int64_t>(), t.at(2).get<int64_t>()};
  c.placement = j.at("placement").get<std::string>() == "layer" ? Placement::Layer : Placement::Column;
  return c;
}

AttentionCall AttentionCallOf(const KernelProgram& kp, const AttentionTemplate& at, void* const* bufs,
                              const SymbolBindings& b) {
  AttentionCall call{{at.heads_kv, at.group, at.head_dim, at.seq.Eval(b), at.total.Eval(b)}, nullptr};
  if (at.table_buffer >= 0) {
    const auto* table = static_cast<const int32_t*>(bufs[at.table_buffer]);
    const auto* positions = static_cast<const int32_t*>(bufs[at.positions_buffer]);
    const int64_t blocks = call.shape.total / at.block, block = at.block;
    const int64_t rows = kp.buffers[at.k_buffer].shape[0].value();
    call.row = [=](int64_t s, int64_t t) -> int64_t {
      if (t > positions[s]) return -1;
      return std::clamp<int64_t>((int64_t)table[s * blocks + t / block] * block + t % block, 0, rows - 1);
    };
  } else {
    const int64_t offset = at.offset.Eval(b);
    call.row = [=](int64_t s, int64_t t) -> int64_t { return t < s + offset ? t : -1; };
  }
  return call;
}

namespace {

SymbolBindings Bindings(const KernelProgram& kp, const int64_t* syms) {
  SymbolBindings b;
  for (size_t i = 0; i < kp.symbols.size(); ++i) b[kp.symbols[i]] = syms[i];
  return b;
}

double WeightBytes(const SystolicDescription& d) { return d.bf16_products ? 2 : 4; }

}  // namespace

SystolicProgram::SystolicProgram(std::string name, SystolicDescription desc, const Graph& g,
                                 const CompileRequest& req)
    : name_(std::move(name)), desc_(std::move(desc)) {
  CompileOptions opts;
  opts.fusion.gemm_epilogues = false;  // the device returns the product; the host finishes it
  opts.threads = req.threads;
  host_ =
      req.artifact_dir.empty() ? Program::Compile(g, opts) : Program::LoadArtifact(g, opts, req.artifact_dir);
  const KernelProgram& kp = host_->kernels();
  // Matrix products against weights and the fused attention go to the devices; expert-indexed products
  // (MoE) stay on the host: the simulator has no gathered-slab form.
  on_device_.assign(kp.kernels.size(), false);
  double total = 0;
  std::vector<double> bytes(kp.kernels.size(), 0);
  for (size_t k = 0; k < kp.kernels.size(); ++k) {
    const Kernel& kn = kp.kernels[k];
    on_device_[k] = (kn.gemm && kn.gemm->index_buffer < 0) || (kn.attention && AttentionTemplateSupported());
    if (kn.gemm) bytes[k] = (double)kn.gemm->n * kn.gemm->k * WeightBytes(desc_);
    total += on_device_[k] ? bytes[k] : 0;
  }
  // Layer placement: device kernels in order, in contiguous runs of about equal weight bytes per device.
  home_.assign(kp.kernels.size(), 0);
  double before = 0;
  for (size_t k = 0; k < kp.kernels.size(); ++k) {
    if (!on_device_[k]) continue;
    home_[k] = total > 0 ? std::min(desc_.devices - 1, (int)(before / total * desc_.devices)) : 0;
    before += bytes[k];
  }
  Offload(true);
  if (req.artifact_dir.empty()) return;
  const std::string path = (std::filesystem::path(req.artifact_dir) / "systolic.json").string();
  std::ifstream f(path);
  const nlohmann::json j = f ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json();
  if (!j.is_object() || !j.contains("description") || !j.contains("choices"))
    throw Error(path + ": missing or not a systolic schedule (compile the artifact with --device " + name_ +
                ")");
  if (j["description"].dump() != desc_.text)
    throw Error(path + ": compiled for systolic description '" + j["description"].value("name", "?") +
                "', not this device's '" + desc_.name + "' as given; compile it again");
  for (const auto& [bucket, arr] : j["choices"].items())
    for (const auto& c : arr) choices_[bucket].push_back(DeviceChoiceFromJson(c));
}

void SystolicProgram::SaveArtifact(const std::string& dir, nlohmann::json& manifest) {
  host_->SaveArtifact(dir, manifest);
  nlohmann::json choices = nlohmann::json::object();
  for (const auto& [bucket, cs] : choices_) {
    nlohmann::json arr = nlohmann::json::array();
    for (const DeviceChoice& c : cs) arr.push_back(DeviceChoiceToJson(c));
    choices[bucket] = arr;
  }
  std::ofstream(std::filesystem::path(dir) / "systolic.json")
      << nlohmann::json{{"description", nlohmann::json::parse(desc_.text)}, {"choices", choices}}.dump(1);
}

void SystolicProgram::Offload(bool on) {
  if (!on) return host_->SetOffload({}, nullptr);
  host_->SetOffload(on_device_, [this](size_t k, void* const* bufs, const int64_t* syms) {
    const SymbolBindings b = Bindings(host_->kernels(), syms);
    Simulate(k, ChoiceFor(k, b), bufs, b);
  });
}

void SystolicProgram::BindWeight(const std::string& name, const HostTensor& t) {
  host_->BindWeight(name, t);
  const KernelProgram& kp = host_->kernels();
  for (size_t k = 0; k < kp.kernels.size(); ++k) {
    const auto& gm = kp.kernels[k].gemm;
    if (on_device_[k] && gm && kp.buffers[gm->w_buffer].name == name)
      device_weights_[gm->w_buffer] = ToDeviceWeight(desc_, t.data, t.dtype, gm->n, gm->k);
  }
}

const DeviceWeight& SystolicProgram::BoundWeight(size_t k) const {
  const auto& gm = *host_->kernels().kernels[k].gemm;
  auto it = device_weights_.find(gm.w_buffer);
  if (it == device_weights_.end())
    throw Error("device " + name_ + ": weight '" + host_->kernels().buffers[gm.w_buffer].name +
                "' is not bound");
  return it->second;
}

DeviceChoice SystolicProgram::ChoiceFor(size_t k, const SymbolBindings& b) {
  auto it = choices_.find(BucketOf(b, choices_.count("prefill-long") > 0, choices_.count("batch") > 0));
  DeviceChoice c = it != choices_.end() && k < it->second.size() ? it->second[k] : DeviceChoice{};
  const auto& gm = host_->kernels().kernels[k].gemm;
  if (gm && c.tiling.m == 0) {  // the model's best tile for this many rows, by column
    const int64_t m = gm->m.Eval(b);
    auto [pos, fresh] = best_tile_.try_emplace({k, m});
    if (fresh) {
      const int64_t share = (gm->n + desc_.devices - 1) / desc_.devices;
      pos->second = TilingCandidates(desc_, m, share, gm->k, WeightBytes(desc_)).front();
    }
    c.tiling = pos->second;
  }
  return c;
}

KernelTime SystolicProgram::Predict(size_t k, const DeviceChoice& c, const SymbolBindings& b) const {
  const Kernel& kn = host_->kernels().kernels[k];
  if (kn.gemm)
    return PredictGemm(desc_, kn.gemm->m.Eval(b), kn.gemm->n, kn.gemm->k, WeightBytes(desc_), c.tiling,
                       c.placement);
  const AttentionTemplate& at = *kn.attention;
  return PredictAttention(desc_, {at.heads_kv, at.group, at.head_dim, at.seq.Eval(b), at.total.Eval(b)},
                          c.placement);
}

void SystolicProgram::Simulate(size_t k, const DeviceChoice& c, void* const* bufs, const SymbolBindings& b,
                               const DeviceWeight* weight) {
  const KernelProgram& kp = host_->kernels();
  const Kernel& kn = kp.kernels[k];
  if (kn.gemm) {
    const GemmTemplate& gm = *kn.gemm;
    SimulateGemm(desc_, static_cast<const float*>(bufs[gm.a_buffer]), gm.m.Eval(b),
                 weight ? *weight : BoundWeight(k), c.tiling, static_cast<float*>(bufs[kn.out_buffer]));
    return;
  }
  const AttentionTemplate& at = *kn.attention;
  const AttentionCall call = AttentionCallOf(kp, at, bufs, b);
  SimulateAttention(desc_, static_cast<const float*>(bufs[at.q_buffer]),
                    static_cast<const float*>(bufs[at.k_buffer]),
                    static_cast<const float*>(bufs[at.v_buffer]), static_cast<float*>(bufs[kn.out_buffer]),
                    call.shape, at.scale, at.exp_scale, call.row);
}

void SystolicProgram::CheckCapacity(const SymbolBindings& b) {
  std::vector<double> bytes(desc_.devices, 0);
  const KernelProgram& kp = host_->kernels();
  for (size_t k = 0; k < kp.kernels.size(); ++k) {
    if (!on_device_[k] || !kp.kernels[k].gemm) continue;
    const GemmTemplate& gm = *kp.kernels[k].gemm;
    const double w = (double)gm.n * gm.k * WeightBytes(desc_);
    if (ChoiceFor(k, b).placement == Placement::Layer)
      bytes[home_[k]] += w;
    else
      for (double& x : bytes) x += w / desc_.devices;
  }
  for (const KBuffer& kb : kp.buffers)  // the KV cache, spread over the devices with its layers
    if (kb.kind == BufferKind::State) {
      const double kv = (double)Product(kb.shape).Eval(b) * (desc_.bf16_products ? 2 : 4);
      for (double& x : bytes) x += kv / desc_.devices;
    }
  for (int d = 0; d < desc_.devices; ++d)
    if (bytes[d] > desc_.hbm_bytes)
      throw Error("device " + name_ + ": the weights placed on device " + std::to_string(d) + " need " +
                  std::to_string(bytes[d] / (1 << 30)) + " GiB; its HBM holds " +
                  std::to_string(desc_.hbm_bytes / (1 << 30)) + " GiB");
}

std::vector<HostTensor> SystolicProgram::Run(const std::map<std::string, HostTensor>& inputs,
                                             const SymbolBindings& syms) {
  CheckCapacity(BindSymbols(graph(), inputs, syms));
  return host_->Run(inputs, syms);
}

nlohmann::json SystolicProgram::PredictStep(const std::map<std::string, HostTensor>& inputs,
                                            const SymbolBindings& syms) {
  const KernelProgram& kp = host_->kernels();
  const SymbolBindings b = BindSymbols(graph(), inputs, syms);
  CheckCapacity(b);
  // The host's kernels timed for real, one dispatch each (the devices' kernels computed by the host too:
  // their time comes from the model).
  const std::vector<double> before = host_->kernel_seconds();
  Offload(false);
  host_->SetMegakernel(false);
  host_->EnableProfile(true);
  host_->Run(inputs, syms);
  host_->EnableProfile(false);
  host_->SetMegakernel(true);
  Offload(true);
  // The step's timeline. The host walks the kernels in order: it runs its own kernels once their inputs
  // are ready, and for a device kernel spends the launches, then goes on while the devices work; a device
  // kernel starts when launched, its inputs are ready and its devices are free, and its result is back
  // a link transfer and its device time later. A device loads a kernel's first weight tile as soon as it
  // is free (weights do not depend on the step's data), which hides behind whatever came before.
  std::vector<double> free_at(desc_.devices, 0), done(kp.kernels.size(), 0);
  std::vector<int> writer(kp.buffers.size(), -1);  // the kernel that last wrote each buffer
  double host = 0, end = 0, host_s = 0, hidden_s = 0, flops = 0, hbm = 0;
  KernelTime parts;
  nlohmann::json kernels = nlohmann::json::array();
  std::vector<std::pair<double, std::string>> gaps;
  for (size_t k = 0; k < kp.kernels.size(); ++k) {
    const Kernel& kn = kp.kernels[k];
    if (kn.covered_by >= 0 && on_device_[kn.covered_by]) continue;
    double ready = 0;
    for (int r : KernelReads(kn))
      if (writer[r] >= 0) ready = std::max(ready, done[writer[r]]);
    writer[kn.out_buffer] = (int)k;
    if (!on_device_[k]) {
      const double s = host_->kernel_seconds()[k] - before[k];
      host = std::max(host, ready) + s;
      done[k] = host;
      host_s += s;
      kernels.push_back({{"kernel", kn.name}, {"on", "host"}, {"measured_us", s * 1e6}});
      end = std::max(end, done[k]);
      continue;
    }
    const DeviceChoice c = ChoiceFor(k, b);
    const KernelTime t = Predict(k, c, b);
    auto uses = [&](int d) { return c.placement == Placement::Column ? d < t.devices : d == home_[k]; };
    double idle_since = 0;
    for (int d = 0; d < desc_.devices; ++d)
      if (uses(d)) idle_since = std::max(idle_since, free_at[d]);
    host += t.launch_s;
    const double start = std::max({host, ready, idle_since});
    const double hidden = std::min(t.first_load_s, start - idle_since);
    done[k] = start + t.link_s + t.device_s - hidden;
    for (int d = 0; d < desc_.devices; ++d)
      if (uses(d)) free_at[d] = done[k];
    end = std::max(end, done[k]);
    hidden_s += hidden;
    parts.launch_s += t.launch_s;
    parts.link_s += t.link_s;
    parts.device_s += t.device_s;
    parts.link_bytes += t.link_bytes;
    flops += t.flops;
    hbm += t.hbm_bytes;
    const double floor = RooflineSeconds(desc_, t.flops, t.hbm_bytes);
    gaps.push_back({t.seconds - hidden - floor, kn.name});
    nlohmann::json j = t.ToJson();
    j["kernel"] = kn.name;
    j["on"] = c.placement == Placement::Column ? "devices" : "device " + std::to_string(home_[k]);
    j["choice"] = DeviceChoiceToJson(c);
    j["start_us"] = start * 1e6;
    j["hidden_first_load_us"] = hidden * 1e6;
    j["roofline_us"] = floor * 1e6;
    j["roofline_fraction"] = t.seconds - hidden > 0 ? floor / (t.seconds - hidden) : 0;
    kernels.push_back(j);
  }
  const double now = end;
  std::sort(gaps.rbegin(), gaps.rend());
  nlohmann::json limits = nlohmann::json::array();
  for (size_t i = 0; i < gaps.size() && i < 5; ++i)
    limits.push_back({{"kernel", gaps[i].second}, {"over_roofline_us", gaps[i].first * 1e6}});
  const double floor = RooflineSeconds(desc_, flops, hbm);
  return {{"device", name_},
          {"description", desc_.name},
          {"sizes", b},
          {"predicted_us", now * 1e6},
          {"host_us", host_s * 1e6},
          {"device_us", parts.device_s * 1e6},
          {"link_us", parts.link_s * 1e6},
          {"launch_us", parts.launch_s * 1e6},
          {"hidden_weight_loads_us", hidden_s * 1e6},
          {"flops", flops},
          {"hbm_bytes", hbm},
          {"link_bytes", parts.link_bytes},
          {"roofline_us", floor * 1e6},
          {"roofline_fraction", now > 0 ? floor / now : 0},
          {"furthest_from_roofline", limits},
          {"kernels", kernels}};
}

std::unique_ptr<Executable> SystolicDevice::Compile(const Graph& g, const CompileRequest& req) {
  if (g.outputs().empty()) throw Error("compile: the graph has no outputs");
  return std::make_unique<SystolicProgram>(name_, desc_, g, req);
}

}  // namespace prism
