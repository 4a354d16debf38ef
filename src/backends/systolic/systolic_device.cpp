// The systolic system's executable: the host Program runs the step, handing matrix products and attention
// to the simulated devices; their time comes from the timing model, the host's from its own clock.
#include "backends/systolic/systolic_device.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

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
  c.placement = PlacementFromName(j.at("placement").get<std::string>());
  return c;
}

AttentionCall AttentionCallOf(const KernelProgram& kp, const AttentionTemplate& at, void* const* bufs,
                              const SymbolBindings& b) {
  AttentionCall call{
      {at.heads_kv, at.group, at.head_dim, at.seq.Eval(b), at.total.Eval(b), at.k_layout.row.Eval(b),
       at.k_layout.head.Eval(b), at.v_layout.row.Eval(b), at.v_layout.head.Eval(b)},
      nullptr};
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
  opts.fusion.recompute = false;       // a residual stream is one buffer, not a chain of the ones before it
  opts.threads = req.threads;
  opts.exact = req.exact;
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
    on_device_[k] = (kn.gemm && kn.gemm->index_buffer < 0) ||
                    (kn.attention && kn.attention->RowsAtStrides() && AttentionTemplateSupported());
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
  const nlohmann::json placed = j.value("placements", nlohmann::json::object());
  for (const auto& [bucket, arr] : placed.items())
    if (arr.size() == kp.kernels.size())
      for (const auto& p : arr) placements_[bucket].push_back(PlacementFromName(p.get<std::string>()));
}

void SystolicProgram::SaveArtifact(const std::string& dir, nlohmann::json& manifest) {
  host_->SaveArtifact(dir, manifest);
  nlohmann::json choices = nlohmann::json::object();
  for (const auto& [bucket, cs] : choices_) {
    nlohmann::json arr = nlohmann::json::array();
    for (const DeviceChoice& c : cs) arr.push_back(DeviceChoiceToJson(c));
    choices[bucket] = arr;
  }
  nlohmann::json placements = nlohmann::json::object();
  for (const auto& [bucket, ps] : placements_)
    for (Placement p : ps) placements[bucket].push_back(PlacementName(p));
  std::ofstream(std::filesystem::path(dir) / "systolic.json") << nlohmann::json{
      {"description", nlohmann::json::parse(desc_.text)},
      {"placements", placements},
      {"choices", choices}}.dump(1);
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

Tiling SystolicProgram::TileFor(size_t k, Placement p, const SymbolBindings& b) {
  auto it = choices_.find(Bucket(b));
  if (it != choices_.end() && k < it->second.size() && it->second[k].tiling.m != 0 &&
      it->second[k].placement == p)
    return it->second[k].tiling;
  const auto& gm = host_->kernels().kernels[k].gemm;
  if (!gm) return {};
  const int64_t m = gm->m.Eval(b);
  auto [pos, fresh] = best_tile_.try_emplace({k, m, p});
  if (fresh) {
    const auto [cols, depth] = DeviceShare(desc_, gm->n, gm->k, p);
    pos->second = TilingCandidates(desc_, m, cols, depth, WeightBytes(desc_)).front();
  }
  return pos->second;
}

const std::vector<Placement>& SystolicProgram::PlacementsFor(const SymbolBindings& b) {
  auto it = placements_.find(Bucket(b));
  if (it != placements_.end()) return it->second;
  PlaceWeights(b);
  return placements_.at(Bucket(b));
}

DeviceChoice SystolicProgram::ChoiceFor(size_t k, const SymbolBindings& b) {
  const Placement p = PlacementsFor(b)[k];
  return {TileFor(k, p, b), p};
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
    const int pieces = c.placement == Placement::Row ? (int)std::min<int64_t>(desc_.devices, gm.k) : 1;
    SimulateGemm(desc_, static_cast<const float*>(bufs[gm.a_buffer]), gm.m.Eval(b),
                 weight ? *weight : BoundWeight(k), c.tiling, static_cast<float*>(bufs[kn.out_buffer]),
                 pieces);
    return;
  }
  const AttentionTemplate& at = *kn.attention;
  const AttentionCall call = AttentionCallOf(kp, at, bufs, b);
  SimulateAttention(desc_, static_cast<const float*>(bufs[at.q_buffer]),
                    static_cast<const float*>(bufs[at.k_buffer]),
                    static_cast<const float*>(bufs[at.v_buffer]), static_cast<float*>(bufs[kn.out_buffer]),
                    call.shape, at.scale, at.exp_scale, call.row);
}

namespace {

double KvBytesPerDevice(const SystolicDescription& d, const KernelProgram& kp, const SymbolBindings& b) {
  double kv = 0;  // the KV cache, spread over the devices with its layers
  for (const KBuffer& kb : kp.buffers)
    if (kb.kind == BufferKind::State) kv += (double)Product(kb.shape).Eval(b) * (d.bf16_products ? 2 : 4);
  return kv / d.devices;
}

// Bytes of the weights the devices' vector units may read (norms' scales, an embedding table): every weight
// no device product reads, and of those the ones up to `limit` bytes each.
double VectorWeightBytes(const KernelProgram& kp, const std::vector<bool>& on_device, const SymbolBindings& b,
                         double limit) {
  std::set<int> products;
  for (size_t k = 0; k < kp.kernels.size(); ++k)
    if (on_device[k] && kp.kernels[k].gemm) products.insert(kp.kernels[k].gemm->w_buffer);
  double bytes = 0;
  for (size_t i = 0; i < kp.buffers.size(); ++i) {
    const KBuffer& kb = kp.buffers[i];
    if (kb.kind != BufferKind::Weight || products.count((int)i)) continue;
    const double size = (double)StorageBytes(kb.dtype, Product(kb.shape).Eval(b));
    if (size <= limit) bytes += size;
  }
  return bytes;
}

}  // namespace

bool SystolicProgram::Replicated(const SymbolBindings& b) const {
  const KernelProgram& kp = host_->kernels();
  double weights = VectorWeightBytes(kp, on_device_, b, std::numeric_limits<double>::infinity());
  for (size_t k = 0; k < kp.kernels.size(); ++k)
    if (on_device_[k] && kp.kernels[k].gemm)
      weights += (double)kp.kernels[k].gemm->n * kp.kernels[k].gemm->k * WeightBytes(desc_);
  return weights + KvBytesPerDevice(desc_, kp, b) <= desc_.hbm_bytes;
}

std::vector<double> SystolicProgram::HbmBytes(const std::vector<Placement>& placements,
                                              const SymbolBindings& b) const {
  const KernelProgram& kp = host_->kernels();
  const bool all = Replicated(b);
  std::vector<double> bytes(desc_.devices, KvBytesPerDevice(desc_, kp, b) +
                                               VectorWeightBytes(kp, on_device_, b,
                                                                 all ? std::numeric_limits<double>::infinity()
                                                                     : kVectorWeightBytes));
  for (size_t k = 0; k < kp.kernels.size(); ++k) {
    if (!on_device_[k] || !kp.kernels[k].gemm) continue;
    const GemmTemplate& gm = *kp.kernels[k].gemm;
    const double w = (double)gm.n * gm.k * WeightBytes(desc_);
    for (int d = 0; d < desc_.devices; ++d) {
      if (all)
        bytes[d] += w;
      else if (placements[k] == Placement::Layer)
        bytes[d] += d == home_[k] ? w : 0;
      else  // column and row placements hold 1/devices of the weight on each device
        bytes[d] += w / desc_.devices;
    }
  }
  return bytes;
}

void SystolicProgram::CheckCapacity(const SymbolBindings& b) {
  const std::vector<double> bytes = HbmBytes(PlacementsFor(b), b);
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

std::unique_ptr<Executable> SystolicDevice::Compile(const Graph& g, const CompileRequest& req) {
  if (g.outputs().empty()) throw Error("compile: the graph has no outputs");
  return std::make_unique<SystolicProgram>(name_, desc_, g, req);
}

}  // namespace prism
