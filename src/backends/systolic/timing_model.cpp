// The timing model of the simulated system: array folds, SRAM tiles against HBM, links, vector units.
#include "backends/systolic/timing_model.h"

#include <algorithm>
#include <cmath>

namespace prism {
namespace {

int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One device's share of a product: tiles in m-outer, n, k-inner order, each tile's loads double-buffered
// against the previous tile's compute; the inputs stay in SRAM when the whole [m x k] fits its half.
// (size, count) of the tiles of extent x cut into pieces of t: whole ones, then the remainder.
std::vector<std::pair<int64_t, int64_t>> Pieces(int64_t x, int64_t t) {
  std::vector<std::pair<int64_t, int64_t>> v;
  if (x / t > 0) v.push_back({t, x / t});
  if (x % t) v.push_back({x % t, 1});
  return v;
}

void DeviceGemm(const SystolicDescription& d, int64_t m, int64_t n, int64_t k, double wbytes, const Tiling& t,
                KernelTime* kt) {
  const bool inputs_resident = 2.0 * m * k <= d.sram_inputs / 2.0;
  double cycles = 0, load_bytes = inputs_resident ? 2.0 * m * k : 0, first_bytes = -1, last_cycles = 0;
  for (auto [tm, cm] : Pieces(m, t.m))
    for (auto [tn, cn] : Pieces(n, t.n))
      for (auto [tk, ck] : Pieces(k, t.k)) {
        const double count = (double)cm * cn * ck, c = ArrayCycles(d, tm, tn, tk);
        const double bytes = tk * tn * wbytes + (inputs_resident ? 0 : 2.0 * tm * tk);
        cycles += count * c;
        load_bytes += count * bytes;
        if (first_bytes < 0) first_bytes = bytes + (inputs_resident ? 2.0 * m * k : 0);
        last_cycles = c;
      }
  const double hz = d.clock_ghz * 1e9, bw = d.hbm_gbps * 1e9;
  const double compute = cycles / hz, load = load_bytes / bw, first = first_bytes / bw,
               last = last_cycles / hz;
  kt->compute_s = compute;
  kt->hbm_s = load;
  kt->first_load_s = first;
  kt->device_s = first + std::max(load - first, compute - last) + last;
  kt->hbm_bytes += load_bytes;
  kt->utilization = cycles > 0 ? (double)m * n * k / (cycles * d.rows * d.cols * d.arrays) : 0;
}

}  // namespace

std::string PlacementName(Placement p) {
  return p == Placement::Column ? "column" : p == Placement::Row ? "row" : "layer";
}

Placement PlacementFromName(const std::string& name) {
  return name == "column" ? Placement::Column : name == "row" ? Placement::Row : Placement::Layer;
}

nlohmann::json KernelTime::ToJson() const {
  return {{"predicted_us", seconds * 1e6},
          {"link_us", link_s * 1e6},
          {"device_us", device_s * 1e6},
          {"compute_us", compute_s * 1e6},
          {"hbm_us", hbm_s * 1e6},
          {"first_load_us", first_load_s * 1e6},
          {"flops", flops},
          {"hbm_bytes", hbm_bytes},
          {"link_bytes", link_bytes},
          {"devices", devices},
          {"array_utilization", utilization}};
}

double ArrayCycles(const SystolicDescription& d, int64_t m, int64_t n, int64_t k) {
  const int64_t R = d.rows, C = d.cols;
  // Weight-stationary: a fold holds R x C weights and streams the m input rows; output-stationary: a
  // fold holds R x C outputs and streams k. Without double buffering (SCALE-Sim's count, which
  // bench/systolic_scalesim.py checks) a fold streams and fills and drains (R + C - 2), and a
  // weight-stationary one first shifts its weights in (R); with it, the next fold's weights shift in
  // during this one's stream and folds follow each other without draining: an array pays the skew once.
  const bool ws = d.dataflow == Dataflow::WeightStationary;
  const int64_t folds = ws ? Ceil(k, R) * Ceil(n, C) : Ceil(m, R) * Ceil(n, C), stream = ws ? m : k;
  const double per_array = (double)Ceil(folds, d.arrays);
  if (d.weight_double_buffer)
    return per_array * (double)(ws ? std::max(stream, R) : stream) + (double)(R + C - 2);
  return per_array * (double)(stream + (ws ? R : 0) + R + C - 2);
}

bool TilingFits(const SystolicDescription& d, const Tiling& t, double wbytes) {
  return 2 * 2.0 * t.m * t.k <= d.sram_inputs && 2 * wbytes * t.k * t.n <= d.sram_weights &&
         4.0 * t.m * t.n <= d.sram_outputs;
}

std::vector<Tiling> TilingCandidates(const SystolicDescription& d, int64_t m, int64_t n, int64_t k,
                                     double wbytes) {
  auto pow2s = [](int64_t lo, int64_t hi) {
    std::vector<int64_t> v;
    for (int64_t x = lo; x < hi; x *= 2) v.push_back(x);
    v.push_back(hi);
    return v;
  };
  // Multiples of the array's side up to the whole extent (small extents: the extent itself).
  const std::vector<int64_t> ms = pow2s(std::min(m, d.rows), std::max<int64_t>(m, 1)),
                             ns = pow2s(std::min(n, d.cols), std::max<int64_t>(n, 1)),
                             ks = pow2s(std::min(k, d.rows), std::max<int64_t>(k, 1));
  struct Fit {
    double in_step, compute_s, device_s;
    Tiling t;
  };
  std::vector<Fit> fits;
  for (int64_t tm : ms)
    for (int64_t tn : ns)
      for (int64_t tk : ks) {
        const Tiling t{tm, tn, tk};
        if (!TilingFits(d, t, wbytes)) continue;
        const KernelTime kt = PredictGemm(d, m, n, k, wbytes, t, Placement::Layer);
        fits.push_back({kt.InStep(), kt.compute_s, kt.device_s, t});
      }
  if (fits.empty()) {  // nothing fits: the smallest tile the array takes
    Tiling t{std::min(m, d.rows), std::min(n, d.cols), std::min(k, d.rows)};
    return {t};
  }
  // The model ranks them by their time in a step (then by the arrays' work, which is what is left of a
  // product whose weights streamed in ahead, then alone); the search times (by the model) and checks the
  // best few and the extremes.
  std::stable_sort(fits.begin(), fits.end(), [](const Fit& a, const Fit& b) {
    if (a.in_step != b.in_step) return a.in_step < b.in_step;
    return a.compute_s != b.compute_s ? a.compute_s < b.compute_s : a.device_s < b.device_s;
  });
  std::vector<Tiling> out;
  for (size_t i = 0; i < fits.size() && out.size() < 4; ++i) out.push_back(fits[i].t);
  if (std::find(out.begin(), out.end(), fits.back().t) == out.end()) out.push_back(fits.back().t);
  return out;
}

std::pair<int64_t, int64_t> DeviceShare(const SystolicDescription& d, int64_t n, int64_t k, Placement p) {
  if (p == Placement::Layer) return {n, k};
  const int64_t split = p == Placement::Row ? k : n, share = Ceil(split, std::min<int64_t>(d.devices, split));
  return p == Placement::Row ? std::pair{n, share} : std::pair{share, k};
}

KernelTime PredictGemm(const SystolicDescription& d, int64_t m, int64_t n, int64_t k, double wbytes,
                       const Tiling& t, Placement p) {
  KernelTime kt;
  kt.devices = p == Placement::Layer ? 1 : (int)std::min<int64_t>(d.devices, p == Placement::Row ? k : n);
  const auto [cols, depth] = DeviceShare(d, n, k, p);
  DeviceGemm(d, m, cols, depth, wbytes, t, &kt);
  kt.hbm_bytes *= kt.devices;
  kt.flops = 2.0 * m * n * k;
  // The host sends the bf16 inputs to each device (links in parallel) and gathers the f32 outputs; split
  // outputs (or the partial sums' total) go back down whole to the devices that read them next.
  const double in = 2.0 * m * depth, out = 4.0 * m * cols, link_bw = d.link_gbps * 1e9;
  kt.link_bytes = kt.devices * (in + out);
  kt.link_s = 2 * d.link_latency_us * 1e-6 + (in + out) / link_bw;
  if (kt.devices > 1) kt.link_s += d.link_latency_us * 1e-6 + 4.0 * m * n / link_bw;
  kt.seconds = kt.link_s + kt.device_s;
  return kt;
}

KernelTime PredictAttention(const SystolicDescription& d, const AttentionShape& a, Placement p) {
  KernelTime kt;
  kt.devices = p == Placement::Column ? (int)std::min<int64_t>(d.devices, a.heads_kv) : 1;
  const int64_t heads = Ceil(a.heads_kv, kt.devices);  // KV heads on the busiest device
  const int64_t rows = a.group * a.seq;                // queries sharing one KV head
  // Per KV head: scores [rows x D] . [D x T], then P [rows x T] . V [T x D]; the softmax on the vector
  // unit (max, subtract, exp, sum, scale: about five passes over the scores).
  const double cycles =
      heads * (ArrayCycles(d, rows, a.total, a.head_dim) + ArrayCycles(d, rows, a.head_dim, a.total) +
               5.0 * rows * a.total / d.vector_lanes);
  const double kv_bytes = 2.0 * 2 * heads * a.total * a.head_dim;
  const double hz = d.clock_ghz * 1e9, bw = d.hbm_gbps * 1e9;
  kt.compute_s = cycles / hz;
  kt.hbm_s = kv_bytes / bw;
  kt.first_load_s =
      std::min(kt.hbm_s, 2.0 * 2 * heads * std::min<int64_t>(a.total, d.rows) * a.head_dim / bw);
  kt.device_s = kt.first_load_s + std::max(kt.hbm_s - kt.first_load_s, kt.compute_s);
  kt.hbm_bytes = kv_bytes * kt.devices;
  kt.flops = 4.0 * a.heads_kv * rows * a.total * a.head_dim;
  kt.utilization = cycles > 0 ? kt.flops / kt.devices / 2 / (cycles * d.rows * d.cols * d.arrays) : 0;
  // In: q (bf16) and the new K and V rows; out: f32 results.
  const double in = 2.0 * heads * (rows + 2 * a.seq) * a.head_dim, out = 4.0 * heads * rows * a.head_dim;
  kt.link_bytes = kt.devices * (in + out);
  kt.link_s = 2 * d.link_latency_us * 1e-6 + (in + out) / (d.link_gbps * 1e9);
  if (kt.devices > 1)
    kt.link_s += d.link_latency_us * 1e-6 + 4.0 * a.heads_kv * rows * a.head_dim / (d.link_gbps * 1e9);
  kt.seconds = kt.link_s + kt.device_s;
  return kt;
}

double VectorSeconds(const SystolicDescription& d, double ops, double hbm_bytes) {
  return d.vector_start_cycles / (d.clock_ghz * 1e9) +
         std::max(ops / (d.vector_lanes * d.clock_ghz * 1e9), hbm_bytes / (d.hbm_gbps * 1e9));
}

double RooflineSeconds(const SystolicDescription& d, double flops, double hbm_bytes) {
  return std::max(flops / (d.devices * d.PeakFlops()), hbm_bytes / (d.devices * d.hbm_gbps * 1e9));
}

}  // namespace prism
