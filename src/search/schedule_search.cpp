// The one schedule search: per size bucket and kernel, every candidate a device offers is checked against
// the kernel IR evaluated in double, the passing ones timed in interleaved rounds, the fastest applied.
#include "search/schedule_search.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "backends/timing.h"
#include "compiler/kernel_eval.h"
#include "compiler/kernel_names.h"
#include "search/busy_meter.h"
#include "search/kernel_work.h"
#include "search/tuning_db.h"

namespace prism {
namespace {

// One unit of rounding of an output dtype, relative to the value (the device rounds its f32 result, the
// reference its double one: they may land one unit apart).
double RelativeUlp(DType t) {
  switch (t) {
    case DType::BF16: return 1.0 / 256;
    case DType::F16: return 1.0 / 2048;
    default: return 0;
  }
}

class Search {
 public:
  Search(ScheduleSpace& space, const SearchOptions& opts)
      : sp_(space), kp_(space.kernels()), opts_(opts), db_(opts.db_path), device_(space.identity()) {}

  nlohmann::json Run() {
    for (const auto& [bucket, sizes] : opts_.buckets) Bucket(bucket, sizes);
    for (const std::string& key : unsaved_) db_.Erase(key);
    sp_.Finish();
    db_.Save();
    return receipts_;
  }

 private:
  bool Known(const std::string& key) const { return db_.Find(key) && !redo_.count(key); }
  double Left() const { return opts_.budget_seconds - Since(start_); }

  void Bucket(const std::string& bucket, const SymbolBindings& sizes) {
    const size_t n = kp_.kernels.size();
    BusyMeter busy;
    // All kernels, or (inheriting) the ones whose loops span the context, the rest as decided before.
    std::vector<bool> searched(n, true);
    auto in = opts_.inherit.find(bucket);
    const bool inherits = in != opts_.inherit.end();
    if (inherits) {
      if (!started_.count(in->second.from))
        throw Error("bucket " + bucket + " inherits from " + in->second.from + ", not searched before it");
      for (size_t k = 0; k < n; ++k) searched[k] = LoopsSpan(kp_.kernels[k], in->second.span_symbol);
    }
    sp_.StartBucket(bucket, inherits ? in->second.from : "", sizes);
    started_.insert(bucket);
    keys_.clear();
    for (size_t k = 0; k < n; ++k) keys_.push_back(TuningDb::KernelKey(kp_, k, device_, bucket));
    const std::string step_key = TuningDb::StepKey(keys_, device_, bucket);
    // A replay searches again what the database holds: the named kernel's decision, or every one.
    redo_.clear();
    for (size_t k = 0; k < n && opts_.replay; ++k)
      if (opts_.only_kernel.empty() || kp_.kernels[k].name == opts_.only_kernel) redo_.insert(keys_[k]);
    if (opts_.replay && opts_.only_kernel.empty()) redo_.insert(step_key);
    auto selected = [&](size_t k) {
      return opts_.only_kernel.empty() || kp_.kernels[k].name == opts_.only_kernel;
    };

    if (opts_.budget_seconds <= 0) {  // apply what the database knows, at the cost of hashing each kernel
      for (size_t k = 0; k < n; ++k) {
        if (!searched[k]) continue;
        if (Known(keys_[k])) {
          FromDatabase(bucket, k, {});
        } else {
          nlohmann::json r = KernelReceipt(bucket, k);
          r.update({{"chosen", "default"},
                    {"reason", "not in the tuning database, no search budget: default kept"}});
          receipts_.push_back(r);
        }
      }
      if (!inherits) StepFromDatabase(bucket, step_key, 0);
      return;
    }
    // What is timed: only those need buffers of random values (a recompile of a 1B model whose decisions
    // are all known spent most of its time making them), and none once the budget is spent (a bucket
    // reached after it still made them: a 1B model's compile spent twice its budget).
    const bool spent = Left() <= 0;
    std::vector<bool> timed(n, false);
    for (size_t k = 0; k < n; ++k) timed[k] = !spent && searched[k] && selected(k) && !Known(keys_[k]);
    const bool step_search = !spent && !inherits && opts_.only_kernel.empty() && !Known(step_key) &&
                             !sp_.StepVariants(bucket).empty();
    SearchBuffers bufs = sp_.Prepare(sizes, timed, step_search, opts_.seed + started_.size());
    written_.clear();
    std::vector<double> floors_us(n, 0);
    for (size_t k = 0; k < n; ++k) {
      if (!searched[k]) continue;
      if (!selected(k)) {  // not searched: as decided before
        if (Known(keys_[k])) sp_.Apply(bucket, k, *db_.Find(keys_[k]));
        continue;
      }
      if (opts_.progress) opts_.progress(bucket, k, n, Left());
      floors_us[k] = SearchKernel(bucket, k, bufs);
    }
    // The step's floor: the kernels that run under the choices made.
    double step_floor_us = 0;
    for (size_t k = 0; k < n; ++k)
      if (sp_.Runs(bucket, k)) step_floor_us += floors_us[k];
    if (!inherits) {
      if (step_search && Left() > 0)
        Step(bucket, step_key, step_floor_us);
      else
        StepFromDatabase(bucket, step_key, step_floor_us);
    }
    const double others = busy.OthersFraction();
    const bool saved = written_.empty() || others <= opts_.busy_limit;
    // Decisions measured while other processes kept the cores busy are used for this compile but not
    // saved: the next search, on a quieter machine, makes them again.
    if (!saved) unsaved_.insert(written_.begin(), written_.end());
    if (!written_.empty())
      receipts_.push_back({{"kernel", "(search)"},
                           {"scope", "search"},
                           {"bucket", bucket},
                           {"device", device_},
                           {"chosen", ""},
                           {"reason", "how busy the machine was while candidates were timed"},
                           {"decisions", written_.size()},
                           {"others_cpu_fraction", others},
                           {"saved", saved}});
  }

  nlohmann::json KernelReceipt(const std::string& bucket, size_t k) const {
    const Kernel& kn = kp_.kernels[k];
    return {{"kernel", kn.name}, {"op", ModelOpName(kp_, kn)}, {"kind", KernelKind(kn)}, {"bucket", bucket},
            {"key", keys_[k]},   {"device", device_}};
  }

  // A kernel faster than its roofline floor says the floor is wrong, not that the kernel beat the machine:
  // the receipt says so beside the fraction.
  static void SetFraction(nlohmann::json& r, double floor_us, double us) {
    r["fraction_of_roofline"] = floor_us / us;
    if (floor_us > us)
      r["roofline_flag"] =
          "above 1: faster than its floor allows, so the floor is wrong (its data stayed in "
          "cache between timed runs, or the probe under-measured this machine)";
  }

  void FromDatabase(const std::string& bucket, size_t k, nlohmann::json r) {
    const nlohmann::json& e = *db_.Find(keys_[k]);
    sp_.Apply(bucket, k, e);
    if (r.is_null()) r = KernelReceipt(bucket, k);
    r["chosen"] = e.value("candidate", "");
    r["median_us"] = e.value("median_us", 0.0);
    r["reason"] = "tuning database";
    if (r.contains("floor_us") && e.value("median_us", 0.0) > 0)
      SetFraction(r, r["floor_us"].get<double>(), e.value("median_us", 0.0));
    receipts_.push_back(r);
  }

  // Searches kernel k of a bucket; returns its roofline floor in microseconds (0: unknown).
  double SearchKernel(const std::string& bucket, size_t k, const SearchBuffers& bufs) {
    const Kernel& kn = kp_.kernels[k];
    nlohmann::json r = KernelReceipt(bucket, k);
    // Roofline floor: the kernel's flops and bytes at these sizes against the device's ceilings.
    double floor_us = 0;
    const DeviceCeilings ceil = sp_.Ceilings(k);
    if (ceil.peak_gflops > 0 && ceil.read_gbps > 0) {
      const KernelWork w = WorkOf(kp_, kn, bufs.sizes);
      floor_us = 1e6 * std::max(w.flops / (ceil.peak_gflops * 1e9 + 1), w.bytes / (ceil.read_gbps * 1e9 + 1));
      r.update({{"flops", w.flops},
                {"bytes", w.bytes},
                {"floor_us", floor_us},
                {"peak_gflops", ceil.peak_gflops},
                {"peak_basis", ceil.peak_basis},
                {"read_gbps", ceil.read_gbps}});
    }
    if (Known(keys_[k])) {  // decided before on this device: no search
      FromDatabase(bucket, k, r);
      return floor_us;
    }
    if (Left() <= 0) {
      r.update({{"chosen", "default"}, {"reason", "search budget exhausted: default kept"}});
      receipts_.push_back(r);
      return floor_us;
    }
    nlohmann::json notes = nlohmann::json::object();
    std::vector<ScheduleCandidate> cands = sp_.Candidates(k, notes);
    r.update(notes);
    int64_t total = 1;
    for (const Expr& e : kn.extents) total *= e.Eval(bufs.sizes);
    if (total <= 0 || cands.empty()) {
      r.update(
          {{"chosen", "default"},
           {"reason", total <= 0 ? "no output elements at these sizes: default kept" : "no candidates"}});
      receipts_.push_back(r);
      return floor_us;
    }
    // Reference values of sampled outputs (every output when there are few), from the value tree
    // evaluated in double over this step's inputs.
    sp_.BeforeReference(k);
    std::mt19937 rng((uint32_t)(opts_.seed + k));
    const int64_t samples = std::min<int64_t>(total, std::max(opts_.samples, 1));
    std::vector<int64_t> at;
    std::vector<KernelElement> ref;
    double scale = 1e-6;
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t flat = samples == total ? s : (int64_t)(rng() % (uint64_t)total);
      ref.push_back(EvalKernelElement(kp_, kn, flat, bufs.host.data(), bufs.sizes));
      at.push_back(ref.back().out_index);
      scale = std::max(scale, std::fabs(ref.back().value));
    }
    const DType out_t = kp_.buffers[kn.out_buffer].dtype;
    // Every candidate is checked first: within 2e-3 of the output scale and a unit of the output's
    // rounding, plus, for candidates that round on the way, each output's own bound (from its inputs).
    nlohmann::json tried = nlohmann::json::array();
    std::vector<size_t> passed;
    for (size_t ci = 0; ci < cands.size(); ++ci) {
      const ScheduleCandidate& c = cands[ci];
      nlohmann::json t{{"candidate", c.name}};
      if (c.detail.is_object()) t.update(c.detail);
      double max_err = 0, max_bound = 0;
      bool ok = c.broken.empty();
      if (!ok) t["error"] = c.broken;
      try {
        std::vector<double> got = ok ? sp_.RunAndRead(k, c, at) : std::vector<double>{};
        for (size_t i = 0; i < got.size(); ++i) {
          const double want = RoundToDType(ref[i].value, out_t);
          if (std::isnan(got[i]) != std::isnan(want)) ok = false;
          if (std::isnan(got[i]) || std::isnan(want) || (std::isinf(got[i]) && got[i] == want)) continue;
          double bound = 0;
          if (c.bounded) {
            bound = ref[i].product_factor * sp_.ErrorBound(k, c, at[i]);
            max_bound = std::max(max_bound, bound / scale);
          }
          const double err = std::fabs(got[i] - want);
          ok = ok && err <= 2e-3 * scale + RelativeUlp(out_t) * std::fabs(want) + bound * 1.01;
          max_err = std::max(max_err, err / scale);
        }
      } catch (const Error& e) {
        ok = false;
        t["error"] = e.what();
      }
      t.update({{"passed", ok}, {"max_rel_error", max_err}});
      if (c.bounded) t["rel_error_bound"] = max_bound;  // beyond the exact tolerance
      tried.push_back(t);
      if (ok) passed.push_back(ci);
    }
    // Then the passing ones are timed in rounds, one run of each per round (round 0 warms up), so that a
    // burst of load elsewhere slows all of them rather than whichever was being timed.
    // Candidates far slower than the fastest after the first timed round leave the race: at a prompt's
    // sizes a loop nest can take 10x a GEMM template, and its further runs were most of a 1B model's search.
    std::vector<std::vector<double>> times(cands.size());
    std::vector<size_t> racing = passed;
    const auto t_all = Clock::now();
    for (int round = 0;
         round <= std::max(opts_.min_runs, opts_.max_runs) &&
         (round <= opts_.min_runs || Since(t_all) < opts_.seconds_per_candidate * racing.size());
         ++round) {
      for (size_t ci : racing) {
        const double us = sp_.TimeUs(k, cands[ci]);
        if (round > 0) times[ci].push_back(us);
      }
      if (round != 1 || racing.size() < 2) continue;
      double fastest = times[racing[0]][0];
      for (size_t ci : racing) fastest = std::min(fastest, times[ci][0]);
      std::erase_if(racing, [&](size_t ci) {
        if (times[ci][0] <= opts_.race_factor * fastest) return false;
        tried[ci]["raced_out"] = true;
        return true;
      });
    }
    size_t best = cands.size();
    for (size_t ci : passed) {
      tried[ci].update(TimingSummary(times[ci]));
      if (best == cands.size() || tried[ci]["median_us"] < tried[best]["median_us"]) best = ci;
    }
    r["candidates"] = tried;
    if (best == cands.size()) {
      r.update({{"chosen", ""}, {"reason", "no candidate passed the correctness check: default kept"}});
      receipts_.push_back(r);
      return floor_us;
    }
    const double best_us = tried[best]["median_us"];
    sp_.Apply(bucket, k, cands[best].choice);
    nlohmann::json entry = cands[best].choice.is_object() ? cands[best].choice : nlohmann::json::object();
    entry.update({{"candidate", cands[best].name}, {"median_us", best_us}});
    db_.Put(keys_[k], entry);
    written_.push_back(keys_[k]);
    r.update({{"chosen", cands[best].name},
              {"median_us", best_us},
              {"reason", "fastest of the " + std::to_string(passed.size()) + " of " +
                             std::to_string(cands.size()) + " candidates that passed the check"}});
    if (floor_us > 0) SetFraction(r, floor_us, best_us);
    receipts_.push_back(r);
    return floor_us;
  }

  nlohmann::json StepReceipt(const std::string& bucket, const std::string& key, const std::string& chosen) {
    return {{"kernel", "(whole step)"}, {"scope", "step"}, {"bucket", bucket},
            {"device", device_},        {"key", key},      {"chosen", chosen}};
  }

  void StepFromDatabase(const std::string& bucket, const std::string& key, double floor_us) {
    const nlohmann::json* e = db_.Find(key);
    if (!e) return;
    const std::string name = e->value("candidate", "");
    sp_.ApplyStep(bucket, name);
    nlohmann::json r = StepReceipt(bucket, key, name);
    r["reason"] = "tuning database";
    if (floor_us > 0) r["floor_us"] = floor_us;
    receipts_.push_back(r);
  }

  // The whole step under each of the device's variants, taking turns as the kernels' candidates do.
  void Step(const std::string& bucket, const std::string& key, double floor_us) {
    const std::vector<std::string> names = sp_.StepVariants(bucket);
    std::vector<std::vector<double>> times(names.size());
    const auto t0 = Clock::now();
    for (int round = 0; round < 9 && (round < 4 || Since(t0) < 4.0); ++round)  // round 0 warms up
      for (size_t v = 0; v < names.size(); ++v) {
        const double us = sp_.TimeStepUs(bucket, names[v]);
        if (round > 0) times[v].push_back(us);
      }
    nlohmann::json tried = nlohmann::json::array();
    size_t best = 0;
    for (size_t v = 0; v < names.size(); ++v) {
      nlohmann::json t{{"candidate", names[v]}, {"passed", true}, {"max_rel_error", 0.0}};
      t.update(TimingSummary(times[v]));
      tried.push_back(t);
      if (t["median_us"] < tried[best]["median_us"]) best = v;
    }
    sp_.ApplyStep(bucket, names[best]);
    std::string all;
    for (const std::string& name : names) all += (all.empty() ? "" : ", ") + name;
    nlohmann::json r = StepReceipt(bucket, key, names[best]);
    r.update({{"candidates", tried},
              {"median_us", tried[best]["median_us"]},
              {"reason", "fastest over the whole step of: " + all}});
    if (floor_us > 0) r["floor_us"] = floor_us;
    receipts_.push_back(r);
    db_.Put(key, {{"candidate", names[best]}});
    written_.push_back(key);
  }

  ScheduleSpace& sp_;
  const KernelProgram& kp_;
  const SearchOptions& opts_;
  TuningDb db_;
  const std::string device_;
  const Clock::time_point start_ = Clock::now();
  std::set<std::string> started_;     // buckets begun, in order
  std::vector<std::string> keys_;     // this bucket's kernel keys
  std::set<std::string> redo_;        // keys a replay searches again
  std::vector<std::string> written_;  // keys decided in this bucket
  std::set<std::string> unsaved_;     // decisions timed on a busy machine
  nlohmann::json receipts_ = nlohmann::json::array();
};

}  // namespace

nlohmann::json SearchSchedules(ScheduleSpace& space, const SearchOptions& opts) {
  return Search(space, opts).Run();
}

nlohmann::json SearchSchedules(Executable& exe, const SearchOptions& opts) {
  std::unique_ptr<ScheduleSpace> space = exe.OpenSearch();
  if (space) return SearchSchedules(*space, opts);
  // Nothing to choose: every kernel has the one schedule the device runs it with.
  nlohmann::json receipts = nlohmann::json::array();
  for (const auto& [bucket, sizes] : opts.buckets)
    receipts.push_back({{"kernel", "(whole step)"},
                        {"scope", "step"},
                        {"bucket", bucket},
                        {"device", exe.device()},
                        {"kernels", exe.kernel_count()},
                        {"chosen", "only"},
                        {"reason", "one schedule per kernel on this device"}});
  return receipts;
}

}  // namespace prism
