// The functional simulator: what the device's arrays and vector unit compute, element by element, in the
// description's numerics (operands rounded to bf16, products exact in f32, sums in f32 in the order the
// array adds them), run on this machine and checked against the reference like every device.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backends/systolic/description.h"
#include "backends/systolic/timing_model.h"
#include "ir/dtype.h"

namespace prism {

// A weight [n, k] as the device holds it in HBM: rounded to bf16 (bf16 products) or f32.
struct DeviceWeight {
  int64_t n = 0, k = 0;
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  float At(int64_t row, int64_t col) const {
    const int64_t i = row * k + col;
    return bf16.empty() ? f32[i] : BF16ToFloat(bf16[i]);
  }
};
// Converts a host weight of any dtype (block formats dequantized as ggml does) to the device's copy.
DeviceWeight ToDeviceWeight(const SystolicDescription& d, const void* data, DType t, int64_t n, int64_t k);

// An operand as the array's inputs hold it.
inline float DeviceOperand(const SystolicDescription& d, float x) {
  return d.bf16_products ? BF16ToFloat(FloatToBF16(x)) : x;
}

// y[i, j] = sum_k a[i, k] w[j, k] for rows [0, m): each array fold adds `rows` consecutive products down a
// column (weight-stationary) in f32, and the folds' partial sums meet in the f32 output buffer in k
// order, tile by tile; output-stationary PEs add every k in order. With `pieces` > 1 (row placement) k is
// cut into that many runs of ceil(k / pieces), one per device, each summed so, and the host adds the
// pieces' sums in f32 in device order.
void SimulateGemm(const SystolicDescription& d, const float* a, int64_t m, const DeviceWeight& w,
                  const Tiling& t, float* y, int pieces = 1);
// The most the device's rounding can move y[i, j] from the exact sum (a rigorous bound: operand rounding
// plus f32 accumulation over k terms, in any order, so also with the k cut into pieces).
double GemmErrorBound(const SystolicDescription& d, const float* a_row, const DeviceWeight& w, int64_t j);

// Key t of query s: its row in the K and V buffers, or -1 when s does not see it.
using KeyRow = std::function<int64_t(int64_t s, int64_t t)>;
// out[h, g, s, dd] (over [heads_kv, group, seq, head_dim]) = softmax_t(scale * q . k_t) . v_t, the softmax
// as exp2((x - max) * exp_scale) on the vector unit in f32; q [seq, H*G*D]; K and V rows [H, D] (f32 on
// the host, bf16 in the device's HBM when its products are). Scores and P.V run on the array.
void SimulateAttention(const SystolicDescription& d, const float* q, const float* k, const float* v,
                       float* out, const AttentionShape& a, double scale, double exp_scale,
                       const KeyRow& row);
// A rigorous bound on how far out[h, g, s, dd] can be from the exact value, from the inputs.
double AttentionErrorBound(const SystolicDescription& d, const float* q, const float* k, const float* v,
                           const AttentionShape& a, double scale, double exp_scale, const KeyRow& row,
                           int64_t out_index);

}  // namespace prism
