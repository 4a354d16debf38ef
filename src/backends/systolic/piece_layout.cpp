// Which kernels work on pieces where they lie: sampled output elements, each load's piece device; and the
// pass that follows pieces through a step.
#include "backends/systolic/piece_layout.h"

#include <algorithm>
#include <set>

namespace prism {
namespace {

constexpr int64_t kOutputSamples = 2048;  // output elements checked (all of them when fewer)
constexpr int64_t kReduceSamples = 5;     // values of each reduction variable: ends, middle and two more

// Walks a value tree at one binding of its variables, collecting the devices of the piece-elements it loads;
// false when a load's index cannot be evaluated.
class Walker {
 public:
  Walker(const std::map<int, PieceLayout>& pieces, SymbolBindings& env) : pieces_(pieces), env_(env) {}
  std::set<int> devices;

  bool Visit(const KValuePtr& v) {
    for (const GatherBinding& g : v->gathers) {
      env_[g.sym] = 0;
      if (!Visit(g.value)) return false;
    }
    switch (v->kind) {
      case KValue::Kind::Load: {
        auto it = pieces_.find(v->buffer);
        if (it != pieces_.end()) devices.insert(it->second.DeviceOf(v->index.Eval(env_)));
        return true;
      }
      case KValue::Kind::Guard: return v->index.Eval(env_) == 0 || Visit(v->args[0]);
      case KValue::Kind::Reduce: return Reduce(v, 0);
      default:
        for (const KValuePtr& a : v->args)
          if (!Visit(a)) return false;
        return true;
    }
  }

 private:
  bool Reduce(const KValuePtr& v, size_t var) {
    if (var == v->rvars.size()) return Visit(v->args[0]);
    const int64_t n = v->rextents[var].Eval(env_);
    std::set<int64_t> at;
    for (int64_t x : {int64_t{0}, n - 1, n / 2, n / 3, 2 * n / 3})
      if (x >= 0 && x < n && (int64_t)at.size() < kReduceSamples) at.insert(x);
    for (int64_t x : at) {
      env_[v->rvars[var]] = x;
      if (!Reduce(v, var + 1)) return false;
    }
    return true;
  }

  const std::map<int, PieceLayout>& pieces_;
  SymbolBindings& env_;
};

// Whether every query head's q lies on the device of its KV head.
bool QueryByHeads(const PieceLayout& q, const AttentionTemplate& at, const PieceLayout& heads) {
  for (int64_t h = 0; h < at.heads_kv; ++h)
    for (int64_t g = 0; g < at.group; ++g)
      for (int64_t d : {int64_t{0}, at.head_dim - 1})
        if (q.DeviceOf((h * at.group + g) * at.head_dim + d) != heads.DeviceOf(h * at.head_dim)) return false;
  return true;
}
}  // namespace

PieceLayout SplitLayout(int64_t inner, int64_t count, int parts) {
  PieceLayout p;
  p.inner = inner;
  p.count = count;
  p.share = (count + parts - 1) / parts;
  for (int d = 0; d * p.share < count; ++d) p.devices.push_back(d);
  return p;
}

std::optional<PieceLayout> LocalLayout(const KernelProgram& kp, const Kernel& kn,
                                       const std::map<int, PieceLayout>& pieces, const SymbolBindings& b) {
  SymbolBindings env = b;
  std::vector<int64_t> extents;
  int64_t total = 1;
  for (const Expr& e : kn.extents) total *= extents.emplace_back(e.Eval(b));
  if (total <= 0) return std::nullopt;
  std::vector<std::pair<int64_t, int>> placed;  // (output element, its device)
  uint64_t lcg = 0x9E3779B97F4A7C15ull;
  const int64_t samples = std::min(total, kOutputSamples);
  for (int64_t i = 0; i < samples; ++i) {
    int64_t flat = i;
    if (samples < total) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      flat = (int64_t)((lcg >> 11) % (uint64_t)total);
    }
    for (size_t v = kn.vars.size(); v-- > 0;) {
      env[kn.vars[v]] = flat % extents[v];
      flat /= extents[v];
    }
    for (const GatherBinding& g : kn.out_gathers) env[g.sym] = 0;
    Walker w(pieces, env);
    if (!w.Visit(kn.value)) return std::nullopt;
    if (w.devices.size() > 1) return std::nullopt;
    if (w.devices.size() == 1) placed.push_back({kn.out_index.Eval(env), *w.devices.begin()});
  }
  if (placed.empty()) return std::nullopt;
  std::set<int> used;
  for (const auto& [f, d] : placed) used.insert(d);
  // Fit a split of one of the output buffer's dimensions over the devices seen.
  std::vector<int64_t> dims;
  for (const Expr& e : kp.buffers[kn.out_buffer].shape) dims.push_back(e.Eval(b));
  int64_t inner = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    PieceLayout p = SplitLayout(inner, dims[i], (int)used.size());
    p.devices.assign(used.begin(), used.end());
    inner *= dims[i];
    if (std::all_of(placed.begin(), placed.end(),
                    [&](const auto& fd) { return p.DeviceOf(fd.first) == fd.second; }))
      return p;
  }
  return std::nullopt;
}

void StepLayouts::Apply(std::vector<TimedKernel>& step) {
  std::map<int, PieceLayout> pieces;
  for (size_t k = 0; k < step.size(); ++k) {
    TimedKernel& t = step[k];
    const Kernel& kn = kp_.kernels[k];
    t.in_place.clear();
    if (t.where == TimedKernel::Where::Skip) continue;
    std::optional<PieceLayout> out;
    const int parts = (int)t.devices.size();
    if (t.where == TimedKernel::Where::Array && kn.gemm && t.out == TimedKernel::Out::Pieces) {
      out = SplitLayout(1, kn.gemm->n, parts);
    } else if (t.where == TimedKernel::Where::Array && kn.gemm && t.out == TimedKernel::Out::Partial) {
      auto it = pieces.find(kn.gemm->a_buffer);
      if (it != pieces.end() && it->second == SplitLayout(1, kn.gemm->k, parts))
        t.in_place.push_back(kn.gemm->a_buffer);
    } else if (t.where == TimedKernel::Where::Array && kn.attention && t.out == TimedKernel::Out::Pieces) {
      const AttentionTemplate& at = *kn.attention;
      const PieceLayout heads = SplitLayout(at.head_dim, at.heads_kv, parts);
      // K and V by their heads, wherever a head's rows start (a head-major cache's heads are whole runs).
      for (const auto& [s, layout] : {std::pair{at.k_buffer, &at.k_layout}, {at.v_buffer, &at.v_layout}}) {
        auto it = pieces.find(s);
        if (it != pieces.end() && it->second == SplitLayout(layout->head.Eval(b_), at.heads_kv, parts))
          t.in_place.push_back(s);
      }
      auto q = pieces.find(at.q_buffer);
      if (q != pieces.end() && QueryByHeads(q->second, at, heads)) t.in_place.push_back(at.q_buffer);
      out = SplitLayout(at.group * at.seq.Eval(b_) * at.head_dim, at.heads_kv, parts);
    } else if (t.where == TimedKernel::Where::Vector) {
      std::map<int, PieceLayout> read;
      for (int r : t.reads)
        if (pieces.count(r)) read[r] = pieces.at(r);
      if (!read.empty()) {
        std::string key = std::to_string(k);
        for (const auto& [r, p] : read)
          key += "|" + std::to_string(r) + ":" + std::to_string(p.inner) + "," + std::to_string(p.count) +
                 "," + std::to_string(p.share) + "," + std::to_string(p.devices.size());
        auto [it, fresh] = local_.try_emplace(key);
        if (fresh) it->second = LocalLayout(kp_, kn, read, b_);
        if (it->second) {
          out = it->second;
          t.devices = out->devices;
          t.out = TimedKernel::Out::Pieces;
          for (const auto& [r, p] : read) t.in_place.push_back(r);
        } else {
          t.out = TimedKernel::Out::Whole;
        }
      }
    }
    if (out && out->devices.size() > 1)
      pieces[t.write] = *out;
    else
      pieces.erase(t.write);
  }
}

}  // namespace prism
