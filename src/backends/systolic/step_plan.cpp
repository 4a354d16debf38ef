// The systolic system's step as a plan: where each device kernel's weights live and which elementwise
// kernels the devices' vector units take, both decided with the step's timeline as the clock, and the
// step's predicted time under that plan.
#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <set>

#include "backends/systolic/piece_layout.h"
#include "backends/systolic/systolic_device.h"

namespace prism {
namespace {

// Lane operations of a kernel's value tree per output element (its reductions' inner work counted once per
// reduced element), at least one.
double OpsPerElement(const KValuePtr& v) {
  double ops = v->kind == KValue::Kind::Op ? 1 : 0;
  for (const KValuePtr& a : v->args) ops += OpsPerElement(a);
  for (const GatherBinding& g : v->gathers) ops += OpsPerElement(g.value);
  return ops;
}

double BufferBytes(const KBuffer& kb, const SymbolBindings& b) {
  return (double)StorageBytes(kb.dtype, Product(kb.shape).Eval(b));
}

// The rate at which this host adds partial sums (bytes read per second), measured once: four 256 KiB f32
// vectors into a fifth, the best of several runs.
double HostAddGbps() {
  static const double gbps = [] {
    constexpr int kN = 1 << 16, kParts = 4;
    std::vector<float> parts(kParts * kN), out(kN);
    for (size_t i = 0; i < parts.size(); ++i) parts[i] = (float)(i % 97) * 0.25f;
    double best = std::numeric_limits<double>::infinity();
    for (int run = 0; run < 9; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kN; ++i) {
        float acc = parts[i];
        for (int p = 1; p < kParts; ++p) acc += parts[p * kN + i];
        out[i] = acc;
      }
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      best = std::min(best, dt.count());
    }
    volatile float keep = out[kN / 3];
    (void)keep;
    return kParts * kN * 4.0 / best / 1e9;
  }();
  return gbps;
}

// The step's timeline with the vector units taking the kernels marked in `vec`; `planned`, if given, gets the
// step as the timeline ran it.
StepTime Timeline(const SystolicDescription& d, std::vector<TimedKernel> step,
                  const std::vector<TimedKernel>& vector_forms, const std::vector<bool>& vec,
                  const std::vector<TimedBuffer>& buffers, const std::vector<int>& outputs,
                  StepLayouts& layouts, std::vector<TimedKernel>* planned = nullptr) {
  for (size_t k = 0; k < step.size(); ++k)
    if (vec[k]) step[k] = vector_forms[k];
  layouts.Apply(step);
  const StepTime t = RunStep(d, step, buffers, outputs, HostAddGbps());
  if (planned) *planned = std::move(step);
  return t;
}

}  // namespace

std::vector<TimedKernel> SystolicProgram::StepKernels(const SymbolBindings& b,
                                                      const std::vector<Placement>& placements,
                                                      const std::vector<double>& host_s,
                                                      std::vector<TimedKernel>* vector_forms) {
  const KernelProgram& kp = host_->kernels();
  const size_t n = kp.kernels.size();
  std::vector<TimedKernel> out(n);
  for (size_t k = 0; k < n; ++k) {
    const Kernel& kn = kp.kernels[k];
    TimedKernel& t = out[k];
    if (kn.covered_by >= 0 && on_device_[kn.covered_by]) continue;
    // A device kernel reads its template's operands (its value tree's other buffers are the unfused form's).
    std::set<int> reads = KernelReads(kn);
    if (on_device_[k] && kn.gemm) reads = {kn.gemm->a_buffer, kn.gemm->w_buffer};
    if (on_device_[k] && kn.attention) {
      const AttentionTemplate& at = *kn.attention;
      reads = {at.q_buffer, at.k_buffer, at.v_buffer};
      if (at.table_buffer >= 0) reads.insert({at.table_buffer, at.positions_buffer});
    }
    t.reads.assign(reads.begin(), reads.end());
    t.write = kn.out_buffer;
    if (!on_device_[k]) {
      t.where = TimedKernel::Where::Host;
      t.seconds = host_s[k];
      continue;
    }
    const DeviceChoice c{TileFor(k, placements[k], b), placements[k]};
    t.where = TimedKernel::Where::Array;
    t.time = Predict(k, c, b);
    t.seconds = t.time.device_s;
    if (c.placement == Placement::Layer)
      t.devices = {home_[k]};
    else
      for (int d = 0; d < t.time.devices; ++d) t.devices.push_back(d);
    if (t.devices.size() > 1)
      t.out = c.placement == Placement::Row ? TimedKernel::Out::Partial : TimedKernel::Out::Pieces;
    t.share_state = kn.attention.has_value() && t.out == TimedKernel::Out::Pieces;
  }
  // An elementwise kernel on the vector units runs on the devices of the next device kernel (after the
  // last one: the last one's), whole on each; one reading a large weight (an embedding table's rows) only
  // where every device holds every weight.
  vector_forms->assign(n, TimedKernel{});
  const bool replicated = Replicated(b);
  std::vector<int> all(desc_.devices);
  for (int d = 0; d < desc_.devices; ++d) all[d] = d;
  const std::vector<int>* next = nullptr;
  for (size_t i = n; i-- > 0;)
    if (out[i].where == TimedKernel::Where::Array && !next) next = &out[i].devices;
  for (size_t i = n; i-- > 0;) {
    if (out[i].where == TimedKernel::Where::Array) next = &out[i].devices;
    if (out[i].where != TimedKernel::Where::Host) continue;
    const Kernel& kn = kp.kernels[i];
    const double elements =
        (double)Product(kn.extents).Eval(b) * std::max<int64_t>(1, kn.reduce_size.Eval(b));
    double weights = 0, large = 0;  // bytes read (at most one element per operation), largest weight
    for (int r : out[i].reads)
      if (kp.buffers[r].kind == BufferKind::Weight) {
        const double size = BufferBytes(kp.buffers[r], b);
        weights += std::min(size, elements * 4);
        large = std::max(large, size);
      }
    if (large > kVectorWeightBytes && !replicated) continue;
    TimedKernel v = out[i];
    v.where = TimedKernel::Where::Vector;
    v.devices = next ? *next : all;
    v.seconds = VectorSeconds(desc_, elements * std::max(1.0, OpsPerElement(kn.value)), weights);
    (*vector_forms)[i] = v;
  }
  return out;
}

// The step's inputs start on the host, weights and the KV cache everywhere (a state buffer moves only the
// rows the step writes), the rest nowhere until written.
std::vector<TimedBuffer> SystolicProgram::StepBuffers(const SymbolBindings& b) const {
  const KernelProgram& kp = host_->kernels();
  std::vector<TimedBuffer> buffers(kp.buffers.size());
  for (size_t i = 0; i < kp.buffers.size(); ++i) {
    const KBuffer& kb = kp.buffers[i];
    buffers[i].start = kb.kind == BufferKind::Input ? TimedBuffer::Start::Host
                       : kb.kind == BufferKind::Weight || kb.kind == BufferKind::State
                           ? TimedBuffer::Start::Everywhere
                           : TimedBuffer::Start::Nowhere;
    buffers[i].bytes = kb.kind == BufferKind::State ? 0 : BufferBytes(kb, b);
  }
  for (const Kernel& kn : kp.kernels)
    if (kp.buffers[kn.out_buffer].kind == BufferKind::State)
      buffers[kn.out_buffer].bytes += (double)Product(kn.extents).Eval(b) * 4;
  return buffers;
}

void SystolicProgram::PlaceWeights(const SymbolBindings& b) {
  const KernelProgram& kp = host_->kernels();
  const size_t n = kp.kernels.size();
  const std::vector<TimedBuffer> buffers = StepBuffers(b);
  const std::vector<double> no_host(n, 0);  // the same host kernels under every placement
  StepLayouts layouts(kp, b);
  const bool fits_any = Replicated(b);  // every placement fits when each device holds every weight
  auto cost = [&](const std::vector<Placement>& pl) {
    for (double bytes : fits_any ? std::vector<double>{} : HbmBytes(pl, b))
      if (bytes > desc_.hbm_bytes) return std::numeric_limits<double>::infinity();
    std::vector<TimedKernel> vector_forms;
    const std::vector<TimedKernel> step = StepKernels(b, pl, no_host, &vector_forms);
    std::vector<bool> vec(n);
    for (size_t k = 0; k < n; ++k) vec[k] = vector_forms[k].where == TimedKernel::Where::Vector;
    return Timeline(desc_, step, vector_forms, vec, buffers, kp.output_buffers, layouts).seconds;
  };
  std::vector<Placement> column(n, Placement::Column), layer(n, Placement::Layer);
  const std::string bucket = Bucket(b);
  if (desc_.devices == 1) {  // one device: the whole weight is on it either way
    placements_[bucket] = layer;
    return;
  }
  if (!placements_.empty() && !fits_any) {  // the weights stay where the first bucket put them
    placements_[bucket] = placements_.begin()->second;
    return;
  }
  const double by_column = cost(column), by_layer = cost(layer);
  std::vector<Placement> best = by_column <= by_layer ? column : layer;
  double best_s = std::min(by_column, by_layer);
  for (int pass = 0; pass < 3; ++pass) {
    bool improved = false;
    for (size_t k = 0; k < n; ++k) {
      if (!on_device_[k]) continue;
      const Placement was = best[k];
      for (Placement p : {Placement::Column, Placement::Layer, Placement::Row}) {
        if (p == was || (p == Placement::Row && !kp.kernels[k].gemm)) continue;
        const Placement keep = best[k];
        best[k] = p;
        const double s = cost(best);
        if (s < best_s * (1 - 1e-9)) {
          best_s = s;
          improved = true;
        } else {
          best[k] = keep;
        }
      }
    }
    if (!improved) break;
  }
  placements_[bucket] = best;
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
  std::vector<double> host_s(kp.kernels.size());
  for (size_t k = 0; k < host_s.size(); ++k) host_s[k] = host_->kernel_seconds()[k] - before[k];

  std::vector<TimedKernel> vector_forms;
  const std::vector<TimedKernel> step = StepKernels(b, PlacementsFor(b), host_s, &vector_forms);
  const std::vector<TimedBuffer> buffers = StepBuffers(b);
  StepLayouts layouts(kp, b);
  auto timeline = [&](const std::vector<bool>& vec) {
    return Timeline(desc_, step, vector_forms, vec, buffers, kp.output_buffers, layouts);
  };
  // Which elementwise kernels the vector units take: the better of none and all, then each kernel moved
  // alone while that shortens the step (the timeline is the clock).
  std::vector<bool> none(step.size(), false), vec(step.size(), false);
  std::vector<size_t> movable;
  for (size_t k = 0; k < step.size(); ++k)
    if (vector_forms[k].where == TimedKernel::Where::Vector) movable.push_back(k), vec[k] = true;
  const double host_only = timeline(none).seconds, all_vector = timeline(vec).seconds;
  if (host_only <= all_vector) vec = none;
  double best = std::min(host_only, all_vector);
  for (int pass = 0; pass < 2; ++pass) {
    bool improved = false;
    for (size_t k : movable) {
      vec[k] = !vec[k];
      const double t = timeline(vec).seconds;
      if (t < best * (1 - 1e-9)) {
        best = t;
        improved = true;
      } else {
        vec[k] = !vec[k];
      }
    }
    if (!improved) break;
  }
  std::vector<TimedKernel> planned;
  const StepTime st = Timeline(desc_, step, vector_forms, vec, buffers, kp.output_buffers, layouts, &planned);

  double flops = 0, hbm = 0;
  int on_vector = 0;
  nlohmann::json kernels = nlohmann::json::array();
  std::vector<std::pair<double, std::string>> gaps;
  auto names = [](const std::vector<int>& ds) {
    std::string s;
    for (int d : ds) s += (s.empty() ? "" : ",") + std::to_string(d);
    return s;
  };
  for (size_t k = 0; k < step.size(); ++k) {
    const Kernel& kn = kp.kernels[k];
    const TimedKernel& t = planned[k];
    nlohmann::json j = {{"kernel", kn.name}, {"start_us", st.start[k] * 1e6}, {"end_us", st.end[k] * 1e6}};
    switch (t.where) {
      case TimedKernel::Where::Skip: continue;
      case TimedKernel::Where::Host:
        j["on"] = "host";
        j["measured_us"] = t.seconds * 1e6;
        break;
      case TimedKernel::Where::Vector:
        on_vector++;
        j["on"] = "vector units of device " + names(t.devices) + (t.in_place.empty() ? "" : " (in place)");
        j["predicted_us"] = t.seconds * 1e6;
        break;
      case TimedKernel::Where::Array: {
        const DeviceChoice c = ChoiceFor(k, b);
        flops += t.time.flops;
        hbm += t.time.hbm_bytes;
        const double floor = RooflineSeconds(desc_, t.time.flops, t.time.hbm_bytes);
        const double took = st.end[k] - st.start[k];
        gaps.push_back({took - floor, kn.name});
        j.update(t.time.ToJson());
        j["on"] = "arrays of device " + names(t.devices);
        j["choice"] = DeviceChoiceToJson(c);
        j["busy_us"] = took * 1e6;
        j["roofline_us"] = floor * 1e6;
        j["roofline_fraction"] = took > 0 ? floor / took : 0;
        break;
      }
    }
    kernels.push_back(j);
  }
  nlohmann::json placed = nlohmann::json::object();  // device kernels by where their weights are read from
  for (size_t k = 0; k < step.size(); ++k)
    if (step[k].where == TimedKernel::Where::Array) {
      const std::string p = PlacementName(PlacementsFor(b)[k]);
      placed[p] = placed.value(p, 0) + 1;
    }
  std::sort(gaps.rbegin(), gaps.rend());
  nlohmann::json limits = nlohmann::json::array();
  for (size_t i = 0; i < gaps.size() && i < 5; ++i)
    limits.push_back({{"kernel", gaps[i].second}, {"over_roofline_us", gaps[i].first * 1e6}});
  const double floor = RooflineSeconds(desc_, flops, hbm);
  return {{"device", name_},
          {"description", desc_.name},
          {"sizes", b},
          {"predicted_us", st.seconds * 1e6},
          {"host_us", st.host_s * 1e6},
          {"device_us", st.array_s * 1e6},
          {"vector_us", st.vector_s * 1e6},
          {"link_us", st.link_s * 1e6},
          {"launch_us", st.launch_s * 1e6},
          {"hidden_weight_loads_us", st.hidden_load_s * 1e6},
          {"transfers", st.transfers},
          {"placements", placed},
          {"elementwise",
           {{"on_vector_units", on_vector},
            {"on_host",
             (int)std::count_if(step.begin(), step.end(),
                                [](const TimedKernel& t) { return t.where == TimedKernel::Where::Host; }) -
                 on_vector},
            {"all_on_host_us", host_only * 1e6},
            {"all_on_vector_units_us", all_vector * 1e6}}},
          {"flops", flops},
          {"hbm_bytes", hbm},
          {"link_bytes", st.link_bytes},
          {"roofline_us", floor * 1e6},
          {"roofline_fraction", st.seconds > 0 ? floor / st.seconds : 0},
          {"furthest_from_roofline", limits},
          {"kernels", kernels}};
}

}  // namespace prism
