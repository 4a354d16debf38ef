// The simulated system's clock: predicted time of a matrix product or an attention on the devices, from
// the array's folds (fill and drain), SRAM tiles double-buffered against HBM loads and link transfers, and
// of an elementwise kernel on the vector units; the search times device kernels with it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backends/systolic/description.h"

namespace prism {

// An SRAM tile of a product [m x k] . [k x n]: rows of inputs, weight columns, depth.
struct Tiling {
  int64_t m = 0, n = 0, k = 0;  // 0: not chosen yet
  bool operator==(const Tiling&) const = default;
};
// Where a kernel's weights are read from: split by output columns (attention: by KV heads) over every
// device, whole on one device (its layer's), or split by rows (the reduction: products only) over every
// device, each computing a partial sum of every output that the host adds up.
enum class Placement : uint8_t { Column, Layer, Row };
std::string PlacementName(Placement p);
Placement PlacementFromName(const std::string& name);

struct KernelTime {
  double seconds = 0;                                 // inputs sent to output whole (alone on the system)
  double link_s = 0, device_s = 0;                    // its parts, in sequence
  double compute_s = 0, hbm_s = 0, first_load_s = 0;  // inside device_s (overlapped but the first load)
  double flops = 0, hbm_bytes = 0, link_bytes = 0;    // over every device it runs on
  int devices = 1;                                    // devices it runs on
  double utilization = 0;  // useful multiply-adds over the busy arrays' capacity while computing
  // Its time inside a step, where weight loads stream ahead of the arrays: the slower of the two.
  double InStep() const { return std::max(compute_s, hbm_s); }
  nlohmann::json ToJson() const;
};

// Cycles one array takes for [m x k] . [k x n], as SCALE-Sim counts them (within a cycle): per fold
// (weight-stationary: a rows x cols block of weights, inputs streamed through; output-stationary: a rows x
// cols block of outputs, k streamed through) the stream plus fill and drain, and the weights' shift-in
// where it is not double-buffered. Folds are shared among the device's arrays.
double ArrayCycles(const SystolicDescription& d, int64_t m, int64_t n, int64_t k);

// Whether the tile's double-buffered inputs (bf16), weights (wbytes each) and f32 outputs fit the SRAM.
bool TilingFits(const SystolicDescription& d, const Tiling& t, double wbytes);
// The tiles worth trying for a product on one device: powers of two fitted to the array and the SRAM.
std::vector<Tiling> TilingCandidates(const SystolicDescription& d, int64_t m, int64_t n, int64_t k,
                                     double wbytes);

// The busiest device's part of an [n x k] weight under placement p: (output columns, reduction depth).
std::pair<int64_t, int64_t> DeviceShare(const SystolicDescription& d, int64_t n, int64_t k, Placement p);

// y[m, n] = x[m, k] . w[n, k]^T with weights of wbytes per element in HBM. Alone: inputs from the host;
// a column-split output gathered through the host and sent back whole, a row-split one's partial sums added
// up on the host and sent back, a layer-placed one left whole.
KernelTime PredictGemm(const SystolicDescription& d, int64_t m, int64_t n, int64_t k, double wbytes,
                       const Tiling& t, Placement p);

// Causal attention over heads_kv x group heads of head_dim: seq queries against total keys whose K and V
// (bf16) live in HBM beside the layer's weights; the new seq rows of K and V come over the link.
struct AttentionShape {
  int64_t heads_kv, group, head_dim, seq, total;
  // Where K's and V's rows start, in elements: row r of head h at r * row + h * head (0: the dense
  // [rows, heads_kv, head_dim], row heads_kv * head_dim and head head_dim).
  int64_t k_row = 0, k_head = 0, v_row = 0, v_head = 0;
  int64_t KAt(int64_t r, int64_t h) const {
    return r * (k_row ? k_row : heads_kv * head_dim) + h * (k_head ? k_head : head_dim);
  }
  int64_t VAt(int64_t r, int64_t h) const {
    return r * (v_row ? v_row : heads_kv * head_dim) + h * (v_head ? v_head : head_dim);
  }
};
KernelTime PredictAttention(const SystolicDescription& d, const AttentionShape& a, Placement p);

// An elementwise kernel on one device's vector unit: `ops` lane operations, `hbm_bytes` read from HBM.
double VectorSeconds(const SystolicDescription& d, double ops, double hbm_bytes);

// The system's floor for moving `bytes` from HBM and doing `flops` on every device at once.
double RooflineSeconds(const SystolicDescription& d, double flops, double hbm_bytes);

}  // namespace prism
