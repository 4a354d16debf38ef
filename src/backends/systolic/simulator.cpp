// The functional simulator of the systolic devices' products and attention, and its error bounds.
#include "backends/systolic/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/quant_formats.h"

namespace prism {
namespace {

constexpr double kU32 = 1.0 / (1 << 24);  // f32 unit roundoff
constexpr double kU16 = 1.0 / (1 << 8);   // bf16 unit roundoff

// Relative error of an f32 sum of n terms in any order (gamma_n), as a bound on sum |terms|.
double Gamma(double n) { return n * kU32 / (1 - n * kU32); }

}  // namespace

DeviceWeight ToDeviceWeight(const SystolicDescription& d, const void* data, DType t, int64_t n, int64_t k) {
  DeviceWeight w;
  w.n = n;
  w.k = k;
  const int64_t count = n * k;
  auto value = [&](int64_t i) -> float {
    if (t == DType::F32) return static_cast<const float*>(data)[i];
    if (IsBlockFormat(t)) return DequantBlockFormat(t, data, i);
    return (float)LoadAsDouble(data, t, i);
  };
  if (d.bf16_products) {
    w.bf16.resize(count);
    for (int64_t i = 0; i < count; ++i) w.bf16[i] = FloatToBF16(value(i));
  } else {
    w.f32.resize(count);
    for (int64_t i = 0; i < count; ++i) w.f32[i] = value(i);
  }
  return w;
}

void SimulateGemm(const SystolicDescription& d, const float* a, int64_t m, const DeviceWeight& w,
                  const Tiling& t, float* y, int pieces) {
  const int64_t n = w.n, k = w.k;
  // Partial sums run down a column over one fold of `rows` weights (weight-stationary) or over all of k
  // (output-stationary); a fold never spans two SRAM tiles.
  const int64_t fold = d.dataflow == Dataflow::WeightStationary ? d.rows : k;
  const int64_t piece = (k + pieces - 1) / std::max(1, pieces);
  std::vector<float> arow(k), wrow(k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; ++c) arow[c] = DeviceOperand(d, a[i * k + c]);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < k; ++c) wrow[c] = w.At(j, c);
      float total = 0;
      for (int64_t p0 = 0; p0 < k; p0 += piece) {
        const int64_t p1 = std::min(k, p0 + piece);
        float acc = 0;
        for (int64_t k0 = p0; k0 < p1; k0 += t.k) {
          const int64_t k1 = std::min(p1, k0 + t.k);
          for (int64_t f0 = k0; f0 < k1; f0 += fold) {
            float part = 0;
            for (int64_t c = f0, f1 = std::min(k1, f0 + fold); c < f1; ++c) part += arow[c] * wrow[c];
            acc += part;
          }
        }
        total = p0 == 0 ? acc : total + acc;
      }
      y[i * n + j] = total;
    }
  }
}

double GemmErrorBound(const SystolicDescription& d, const float* a_row, const DeviceWeight& w, int64_t j) {
  // Exact sum vs computed: each operand's rounding moves a product by at most (2u + u^2) of it (u of
  // bf16, or 0), and the f32 sums of at most k terms add gamma_k of the rounded products' magnitudes.
  const double u = d.bf16_products ? kU16 : 0;
  double mag = 0;
  for (int64_t c = 0; c < w.k; ++c) mag += std::fabs((double)a_row[c]) * std::fabs((double)w.At(j, c));
  // The device's weight is itself rounded from the host's: the reference reads the host's, so the bound
  // covers the weight's rounding with the same u (mag uses the rounded weights: scale by 1 + u).
  return mag * (1 + u) * ((2 * u + u * u) + Gamma((double)w.k + 1) * (1 + u) * (1 + u));
}

void SimulateAttention(const SystolicDescription& d, const float* q, const float* k, const float* v,
                       float* out, const AttentionShape& a, double scale, double exp_scale,
                       const KeyRow& row) {
  const int64_t H = a.heads_kv, G = a.group, D = a.head_dim;
  std::vector<float> qr(D), s(a.total);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t sq = 0; sq < a.seq; ++sq) {
        const float* qs = q + sq * H * G * D + (h * G + g) * D;
        for (int64_t dd = 0; dd < D; ++dd) qr[dd] = DeviceOperand(d, qs[dd]);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < a.total; ++t) {
          const int64_t r = row(sq, t);
          if (r < 0) {
            s[t] = -std::numeric_limits<float>::infinity();
            continue;
          }
          float acc = 0;  // D <= one fold: one column sum
          const float* kr = k + a.KAt(r, h);
          for (int64_t dd = 0; dd < D; ++dd) acc += qr[dd] * DeviceOperand(d, kr[dd]);
          s[t] = (float)scale * acc;
          mx = std::max(mx, s[t]);
        }
        float sum = 0;
        for (int64_t t = 0; t < a.total; ++t) {
          s[t] = std::isinf(s[t]) ? 0.0f : std::exp2((s[t] - mx) * (float)exp_scale);
          sum += s[t];
        }
        float* o = out + ((h * G + g) * a.seq + sq) * D;
        for (int64_t dd = 0; dd < D; ++dd) {
          float acc = 0;
          for (int64_t t = 0; t < a.total; ++t) {
            const int64_t r = row(sq, t);
            if (r >= 0) acc += DeviceOperand(d, s[t] / sum) * DeviceOperand(d, v[a.VAt(r, h) + dd]);
          }
          o[dd] =
              mx == -std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::quiet_NaN() : acc;
        }
      }
}

double AttentionErrorBound(const SystolicDescription& d, const float* q, const float* k, const float* v,
                           const AttentionShape& a, double scale, double exp_scale, const KeyRow& row,
                           int64_t out_index) {
  const int64_t H = a.heads_kv, G = a.group, D = a.head_dim;
  const int64_t dd = out_index % D, sq = out_index / D % a.seq, g = out_index / (D * a.seq) % G,
                h = out_index / (D * a.seq * G);
  const double u = d.bf16_products ? kU16 : 0;
  const float* qs = q + sq * H * G * D + (h * G + g) * D;
  // Scores: each exponent 2^((x - max) * exp_scale) moves by the score's error e_t (scaled), so each
  // unnormalised weight by a factor within 2^(+-E), the normalised ones within 2^(+-2E) (E the largest,
  // plus the f32 exp2, subtraction and sum), then P and V are rounded and summed in f32.
  double E = 0, mx = -INFINITY;
  std::vector<double> x(a.total, -INFINITY);
  for (int64_t t = 0; t < a.total; ++t) {
    const int64_t r = row(sq, t);
    if (r < 0) continue;
    double dot = 0, mag = 0;
    for (int64_t c = 0; c < D; ++c) {
      dot += (double)qs[c] * k[a.KAt(r, h) + c];
      mag += std::fabs((double)qs[c] * k[a.KAt(r, h) + c]);
    }
    x[t] = scale * dot;
    mx = std::max(mx, x[t]);
    const double score_err = std::fabs(scale) * mag * ((2 * u + u * u) * (1 + Gamma(D)) + Gamma(D + 1));
    E = std::max(E, std::fabs(exp_scale) * (score_err * 2 + std::fabs(x[t]) * 4 * kU32) + 8 * kU32);
  }
  if (mx == -INFINITY) return 0;  // no key: NaN either way
  double sum = 0;
  for (double& xt : x) sum += xt == -INFINITY ? 0 : (xt = std::exp2((xt - mx) * exp_scale));
  const double growth = std::exp2(2 * E + Gamma((double)a.total + 2)) - 1;
  double pv = 0;
  for (int64_t t = 0; t < a.total; ++t) {
    const int64_t r = row(sq, t);
    if (r >= 0) pv += x[t] / sum * std::fabs((double)v[a.VAt(r, h) + dd]);
  }
  // p moves by growth * p; the rounded p and v add (2u + u^2) of each product (on p * (1 + growth));
  // the f32 sum gamma_T of the magnitudes.
  const double prod = pv * (1 + growth);
  return pv * growth + prod * (2 * u + u * u) + prod * (1 + u) * (1 + u) * Gamma((double)a.total + 1);
}

}  // namespace prism
