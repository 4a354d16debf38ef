// The CPU's schedule search: per kernel and size bucket, candidates (tier x threading) are checked against
// the kernel's reference evaluation, timed on this machine, and the fastest kept, with receipts.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "backends/cpu/gemm.h"
#include "backends/cpu/jit.h"
#include "backends/cpu/machine_probe.h"
#include "backends/cpu/program.h"
#include "backends/timing.h"
#include "compiler/kernel_eval.h"
#include "compiler/kernel_hash.h"
#include "compiler/kernel_names.h"
#include "ir/error.h"

namespace prism {
namespace {

// The form of the database's keys: 2 = a kernel's structural hash (compiler/kernel_hash.h), its CPU,
// bucket, team size and template revision. Entries of another form are never matched.
constexpr int kTuningKeyVersion = 2;

std::string Fnv(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

// The whole step's identity (one bucket, one team size): its kernels' keys together.
std::string StepKey(const std::vector<std::string>& kernel_keys) {
  std::string all;
  for (const std::string& k : kernel_keys) all += k + ";";
  return "step:" + Fnv(all);
}

void FillRandom(void* data, DType t, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  if (IsQuantized(t)) return;  // only weights are quantized, and they are real
  for (int64_t i = 0; i < n; ++i) {
    double v = IsFloat(t) ? dist(rng) : (double)(rng() % 4);
    StoreFromDouble(data, t, i, v);
  }
}

}  // namespace

nlohmann::json Program::Search(const SearchOptions& opts) {
  auto start = Clock::now();
  nlohmann::json db = nlohmann::json::object();
  if (!opts.db_path.empty() && std::filesystem::exists(opts.db_path)) {
    std::ifstream f(opts.db_path);
    db = nlohmann::json::parse(f, nullptr, false);
    if (!db.is_object()) db = nlohmann::json::object();
  }
  const std::string cpu = CpuModelName();
  const int threads = pool_->size();
  nlohmann::json receipts = nlohmann::json::array();
  // Database keys: what is decided, then where (CPU, size bucket, team size) and against which
  // revision of the template kernels.
  auto where = [&](const std::string& bucket) {
    return "|" + cpu + "|" + bucket + "|t" + std::to_string(threads) + "|r" +
           std::to_string(kTemplateRevision) + "|k" + std::to_string(kTuningKeyVersion);
  };
  auto kernel_keys = [&](const std::string& bucket) {
    std::vector<std::string> keys;
    for (const Kernel& kn : kp_.kernels) keys.push_back(KernelStructuralHash(kp_, kn) + where(bucket));
    return keys;
  };
  auto step_key = [&](const std::string& bucket, const std::vector<std::string>& keys) {
    return StepKey(keys) + where(bucket);
  };
  // The whole-step decision (see below), by name: the kernels' own choices on the team; the same with
  // every template GEMM split across the team; or every kernel on thread 0 alone.
  auto step_variant = [&](const std::string& name, std::vector<KernelChoice> cs) {
    for (size_t k = 0; k < cs.size() && k < kp_.kernels.size(); ++k) {
      if (name == "one thread") cs[k].threading = Threading::OneThread;
      if (name == "team, every GEMM split" && kp_.kernels[k].gemm && cs[k].use_template)
        cs[k].threading = Threading::Team;
    }
    return cs;
  };
  auto decide_step = [&](const std::string& bucket, const std::string& key, const std::string& name,
                         std::vector<KernelChoice>& chosen, nlohmann::json receipt) {
    chosen = step_variant(name, chosen);
    receipt.update(
        {{"kernel", "(whole step)"}, {"scope", "step"}, {"bucket", bucket}, {"key", key}, {"chosen", name}});
    receipts.push_back(receipt);
  };
  auto apply_step_decision = [&](const std::string& bucket, const std::vector<std::string>& keys,
                                 std::vector<KernelChoice>& chosen) {
    std::string key = step_key(bucket, keys);
    if (db.contains(key))
      decide_step(bucket, key, db[key].value("candidate", "team"), chosen, {{"reason", "tuning database"}});
  };
  // A bucket's starting choices, and which of its kernels it searches: all, or (inheriting) the ones
  // whose loops span the context, the rest as decided in the bucket it inherits from.
  auto start_bucket = [&](const std::string& bucket, std::vector<bool>* searched) {
    std::vector<KernelChoice>& chosen = choices_[bucket];
    searched->assign(kp_.kernels.size(), true);
    auto in = opts.inherit.find(bucket);
    if (in == opts.inherit.end()) {
      chosen.assign(kp_.kernels.size(), KernelChoice{});
      return false;
    }
    auto from = choices_.find(in->second.from);
    if (from == choices_.end())
      throw Error("bucket " + bucket + " inherits from " + in->second.from + ", not searched before it");
    chosen = from->second;
    for (size_t k = 0; k < kp_.kernels.size(); ++k)
      (*searched)[k] = LoopsSpan(kp_.kernels[k], in->second.span_symbol);
    return true;
  };
  if (opts.budget_seconds <= 0) {
    // No search: apply what the database already knows, at the cost of hashing each kernel.
    for (const auto& [bucket, sizes] : opts.buckets) {
      std::vector<bool> searched;
      const bool inherits = start_bucket(bucket, &searched);
      std::vector<KernelChoice>& chosen = choices_[bucket];
      const std::vector<std::string> keys = kernel_keys(bucket);
      for (size_t k = 0; k < kp_.kernels.size(); ++k) {
        const std::string& key = keys[k];
        if (!searched[k] || !db.contains(key)) continue;
        chosen[k] = ChoiceFromJson(db[key]);
        receipts.push_back({{"kernel", kp_.kernels[k].name},
                            {"op", ModelOpName(kp_, kp_.kernels[k])},
                            {"kind", KernelKind(kp_.kernels[k])},
                            {"bucket", bucket},
                            {"key", key},
                            {"chosen", db[key].value("candidate", "")},
                            {"median_us", db[key].value("median_us", 0.0)},
                            {"reason", "tuning database"}});
      }
      if (!inherits) apply_step_decision(bucket, keys, chosen);
    }
    return receipts;
  }
  const MachinePeaks& peaks = ProbeMachine(threads);
  // Candidates run kernels alone and out of order: every intermediate gets its own bytes meanwhile.
  share_scratch_ = false;
  struct ShareAgain {
    bool& share;
    ~ShareAgain() { share = true; }
  } share_again{share_scratch_};
  std::mt19937 rng(20261122);
  bool db_changed = false;
  // Decisions measured while other processes kept the cores busy are used for this compile but not
  // saved: the next search, on a quieter machine, makes them again.
  std::set<std::string> unsaved;

  for (const auto& [bucket, sizes] : opts.buckets) {
    BusyMeter busy;
    std::vector<std::string> written;  // database keys decided in this bucket
    std::vector<bool> searched;
    const bool inherits = start_bucket(bucket, &searched);
    const std::vector<std::string> keys = kernel_keys(bucket);
    // A replay searches again what the database holds: the named kernel's decision, or every one.
    std::set<std::string> redo;
    for (size_t k = 0; k < kp_.kernels.size() && opts.replay; ++k)
      if (opts.only_kernel.empty() || kp_.kernels[k].name == opts.only_kernel) redo.insert(keys[k]);
    if (opts.replay && opts.only_kernel.empty()) redo.insert(step_key(bucket, keys));
    auto known = [&](const std::string& key) { return db.contains(key) && !redo.count(key); };
    std::set<int> touched;  // buffers the kernels to time use: only those need random values
    for (size_t k = 0; k < kp_.kernels.size(); ++k)
      if (searched[k] && !known(keys[k])) {
        for (int r : KernelReads(kp_.kernels[k])) touched.insert(r);
        touched.insert(kp_.kernels[k].out_buffer);
      }
    // Everything decided before: receipts from the database, and no buffers, random data or repacked
    // weights (a recompile of a 1B model spent most of its time on those).
    const bool time_nothing = touched.empty() && (inherits || threads < 2 || known(step_key(bucket, keys)));
    // Random inputs (never zeros) at this bucket's sizes; scratch and state filled with random data
    // too, so that a kernel timed alone reads realistic values.
    std::map<std::string, HostTensor> inputs;
    for (const Node* n : input_nodes_) {
      std::vector<int64_t> shape = EvalShape(n->shape, sizes);
      HostTensor t = HostTensor::Zeros(n->dtype, shape);
      FillRandom(t.data, n->dtype, t.numel(), rng);
      inputs[n->name] = t;
    }
    SymbolBindings b = BindSymbols(input_nodes_, kp_.symbols, inputs, sizes);
    std::vector<int64_t> sym_values;
    for (const std::string& s : kp_.symbols) sym_values.push_back(b.at(s));
    std::vector<void*> ptrs;
    if (time_nothing)
      for (size_t i = 0; i < kp_.buffers.size(); ++i) shapes_[i] = EvalShape(kp_.buffers[i].shape, b);
    else
      ptrs = PrepareBuffers(inputs, b);
    for (size_t i = 0; i < kp_.buffers.size() && !time_nothing; ++i) {
      BufferKind kind = kp_.buffers[i].kind;
      if ((kind == BufferKind::Intermediate || kind == BufferKind::Output || kind == BufferKind::State) &&
          touched.count((int)i)) {
        int64_t n = 1;
        for (int64_t d : shapes_[i]) n *= d;
        FillRandom(ptrs[i], kp_.buffers[i].dtype, n, rng);
      }
    }
    std::vector<KernelChoice>& chosen = choices_[bucket];
    PlanLaunches(b, !time_nothing);
    const std::vector<KernelLaunch> defaults = launches_;
    std::vector<double> floors_us(kp_.kernels.size(), 0);
    // Runs kernel j alone as the step would (its own choice if already made), even where a fused
    // attention kernel covers it.
    auto run_alone = [&](size_t j) {
      launches_[j] = defaults[j];
      launches_[j].skip = false;
      launches_[j].use_template = false;
      if (chosen[j].threading != Threading::ByWorkSize)
        launches_[j].parallel = threads > 1 && chosen[j].threading == Threading::Team;
      launches_[j].reduce_outer = chosen[j].reduce_outer && fns_ro_[j];
      if (launches_[j].parallel)
        pool_->ParallelFor(threads, [&](int t) { RunChunk(j, t, threads, ptrs.data(), sym_values.data()); });
      else
        RunChunk(j, 0, threads, ptrs.data(), sym_values.data());
      launches_[j] = defaults[j];
    };

    for (size_t k = 0; k < kp_.kernels.size(); ++k) {
      const Kernel& kn = kp_.kernels[k];
      if (!searched[k]) continue;
      if (!opts.only_kernel.empty() && kn.name != opts.only_kernel) {  // not searched: as decided before
        if (known(keys[k])) chosen[k] = ChoiceFromJson(db[keys[k]]);
        continue;
      }
      const std::string& key = keys[k];
      nlohmann::json r{{"kernel", kn.name},
                       {"op", ModelOpName(kp_, kn)},
                       {"kind", KernelKind(kn)},
                       {"bucket", bucket},
                       {"key", key}};
      if (opts.progress) opts.progress(bucket, k, kp_.kernels.size(), opts.budget_seconds - Since(start));
      // Roofline floor of the kernel: flops of its products and bytes of every buffer it touches.
      const KernelLaunch& st = defaults[k];
      double red = std::max<double>(1, (double)kn.reduce_size.Eval(b));
      double flops = 2.0 * st.total * red;
      // Bytes: each buffer once, but never more than the elements its loads can reach (a KV cache
      // is read only up to the current position).
      std::map<int, double> reach;
      std::function<void(const KValuePtr&, double)> collect = [&](const KValuePtr& v, double execs) {
        if (v->kind == KValue::Kind::Reduce) execs *= std::max<double>(1, (double)kn.reduce_size.Eval(b));
        if (v->kind == KValue::Kind::Load) reach[v->buffer] += execs;
        for (const auto& gb : v->gathers) collect(gb.value, execs);
        for (const auto& a : v->args) collect(a, execs);
      };
      collect(kn.value, (double)st.total);
      if (kn.gemm) reach[kn.gemm->w_buffer] = reach[kn.gemm->a_buffer] = INFINITY;
      std::vector<size_t> covered;  // an attention kernel's unfused form: these kernels, then its own
      if (const auto& at = kn.attention) {
        for (size_t j = 0; j < k; ++j)
          if (kp_.kernels[j].covered_by == (int)k) covered.push_back(j);
        // The fused form's floor: Q·Kᵀ and P·V over the visible (query, key) pairs only.
        const int64_t seq = at->seq.Eval(b), total = at->total.Eval(b), offset = at->offset.Eval(b);
        double pairs = 0;
        for (int64_t q = 0; q < seq; ++q) pairs += (double)std::clamp<int64_t>(q + offset, 0, total);
        flops = 4.0 * pairs * (double)(at->heads_kv * at->group * at->head_dim);
        reach.clear();
        reach[at->q_buffer] = INFINITY;
        reach[at->k_buffer] = reach[at->v_buffer] = (double)(total * at->heads_kv * at->head_dim);
        // The unfused form's kernels: skipped when the template is chosen, timed with it when not.
        r["unfused_kernels"] = nlohmann::json::array();
        for (size_t j : covered) r["unfused_kernels"].push_back(kp_.kernels[j].name);
      }
      reach[kn.out_buffer] += (double)st.total;
      double bytes = 0;
      for (const auto& [buf, execs] : reach) {
        int64_t n = 1;
        for (int64_t d : shapes_[buf]) n *= d;
        double whole = (double)StorageBytes(kp_.buffers[buf].dtype, n);
        bytes += std::min(whole, execs * std::max(1.0, whole / std::max<int64_t>(n, 1)));
      }
      // A GEMM's products may run on any instruction this CPU has for its weight type (bf16 on AMX
      // tiles, int8 dot products for quantized weights); everything else on f32 FMAs.
      const DType peak_type = kn.gemm ? kp_.buffers[kn.gemm->w_buffer].dtype : DType::F32;
      const double peak = kn.gemm ? peaks.GemmPeak(peak_type) : peaks.fp32_gflops;
      double floor_s = std::max(flops / (peak * 1e9 + 1), bytes / (peaks.read_gbps * 1e9 + 1));
      r["flops"] = flops;
      r["bytes"] = bytes;
      r["floor_us"] = floor_s * 1e6;
      floors_us[k] = floor_s * 1e6;
      r["peak_gflops"] = peak;
      r["peak_basis"] = kn.gemm ? peaks.GemmPeakBasis(peak_type) : "fp32_fma";
      r["read_gbps"] = peaks.read_gbps;

      if (known(key)) {  // decided before on this machine: no search
        const auto& e = db[key];
        chosen[k] = ChoiceFromJson(e);
        r["chosen"] = e.value("candidate", "");
        r["median_us"] = e.value("median_us", 0.0);
        r["reason"] = "tuning database";
        r["fraction_of_roofline"] =
            r["median_us"].get<double>() > 0 ? floor_s * 1e6 / r["median_us"].get<double>() : 0;
        receipts.push_back(r);
        continue;
      }
      if (Since(start) > opts.budget_seconds) {
        r["reason"] = "search budget exhausted: default schedule";
        r["chosen"] =
            std::string(st.use_template ? "template" : "generated") + (st.parallel ? "/parallel" : "/serial");
        receipts.push_back(r);
        continue;
      }
      // Reference values of sampled outputs, from the value tree evaluated in double (over the covered
      // kernels' outputs: they run first, so that those hold this step's values).
      for (size_t j : covered) run_alone(j);
      int64_t samples = std::min<int64_t>(st.total, 24);
      std::vector<KernelElement> ref;
      double scale = 1e-6;
      for (int64_t s = 0; s < samples; ++s) {
        int64_t flat = samples == st.total ? s : (int64_t)(rng() % (uint64_t)st.total);
        ref.push_back(EvalKernelElement(kp_, kn, flat, ptrs.data(), b));
        scale = std::max(scale, std::fabs(ref.back().value));
      }
      struct Candidate {
        std::string name;
        bool use_template;  // the template (GEMM form or fused attention), else generated code
        bool team;          // split across the team, else thread 0 alone
        bool reduce_outer;  // generated code's reduce-outer loop order
        int form;           // GemmForms() index
      };
      // The space: tier (the template in each GEMM form this CPU and weight type have, generated code) x
      // loop order (generated only) x threads. Some forms pay off only over many activation rows.
      const DType wt = kn.gemm ? kp_.buffers[kn.gemm->w_buffer].dtype : DType::F32;
      std::vector<Candidate> cands;
      auto add = [&](const std::string& name, bool use_template, bool reduce_outer, int form) {
        cands.push_back({name + "/serial", use_template, false, reduce_outer, form});
        if (threads > 1) cands.push_back({name + "/parallel", use_template, true, reduce_outer, form});
      };
      if (kn.attention && AttentionTemplateSupported()) add("template-attention", true, false, 0);
      for (size_t f = 0; f < GemmForms().size() && kn.gemm; ++f) {
        const GemmForm& form = GemmForms()[f];
        if (st.m >= form.min_rows && form.offered(wt, kn.gemm->k)) add(form.label(wt), true, false, (int)f);
      }
      add("generated", false, false, 0);
      if (fns_ro_[k]) add("generated-reduce-outer", false, true, 0);
      auto select = [&](const Candidate& c) {
        launches_[k] = defaults[k];
        launches_[k].skip = false;  // a kernel an attention template covers is searched for its unfused form
        launches_[k].use_template = c.use_template;
        launches_[k].parallel = c.team;
        launches_[k].reduce_outer = c.reduce_outer;
        launches_[k].form = c.form;
        launches_[k].team_slot = 0;
        if (c.use_template && kn.gemm) PrepareForm(*kn.gemm, c.form);
        FitTeamActivations();
      };
      auto run_once = [&](const Candidate& c) {
        if (!c.use_template)
          for (size_t j : covered) run_alone(j);
        if (c.team)
          pool_->ParallelFor(threads,
                             [&](int t) { RunChunk(k, t, threads, ptrs.data(), sym_values.data()); });
        else
          RunChunk(k, 0, threads, ptrs.data(), sym_values.data());
      };
      // Every candidate is checked first. Exact tiers must agree to 2e-3 of the output scale; the
      // rounded-activation tier may also differ by each output's own rounding bound (computed from
      // this output's actual inputs).
      nlohmann::json tried = nlohmann::json::array();
      std::vector<size_t> passed;
      for (size_t ci = 0; ci < cands.size(); ++ci) {
        const Candidate& c = cands[ci];
        // Forms that round the activation (int8 or bf16 dot products, AMX tiles) are held to each output's
        // rounding bound beyond the exact tiers' tolerance.
        const GemmForm& form = GemmForms()[c.form];
        const bool rounds = c.use_template && kn.gemm && form.rounds && form.rounds(wt);
        select(c);
        run_once(c);
        double max_err = 0, max_bound = 0;
        bool ok = true;
        for (const KernelElement& e : ref) {
          double got = LoadAsDouble(ptrs[kn.out_buffer], kp_.buffers[kn.out_buffer].dtype, e.out_index);
          double want = RoundToDType(e.value, kp_.buffers[kn.out_buffer].dtype);
          if (std::isnan(got) != std::isnan(want)) ok = false;
          if (!std::isnan(got) && !std::isnan(want) && !(std::isinf(got) && got == want)) {
            double bound = 0;
            if (rounds) {
              const GemmTemplate& gm = *kn.gemm;
              const float* a_row = static_cast<const float*>(ptrs[gm.a_buffer]) + e.out_index / gm.n * gm.k;
              const int64_t col = e.out_index % gm.n;
              bound = e.product_factor * form.error_bound(a_row, ptrs[gm.w_buffer], wt, gm.k, col);
              max_bound = std::max(max_bound, bound / scale);
            }
            double err = std::fabs(got - want);
            ok = ok && err <= 2e-3 * scale + bound * 1.01;
            max_err = std::max(max_err, err / scale);
          }
        }
        tried.push_back({{"candidate", c.name}, {"max_rel_error", max_err}, {"passed", ok}});
        if (rounds) tried.back()["rel_error_bound"] = max_bound;  // beyond the exact tiers' 2e-3
        if (ok) passed.push_back(ci);
      }
      // Then the candidates that passed are timed in rounds, one run of each per round, so that a burst
      // of load elsewhere on the machine slows all of them rather than whichever was being timed.
      std::vector<std::vector<double>> times(cands.size());
      auto t_all = Clock::now();
      for (int round = 0; round < 12 && (round < 4 || Since(t_all) < 0.05 * passed.size()); ++round)
        for (size_t ci : passed) {  // round 0 warms up
          select(cands[ci]);
          // A step reads each weight once, from memory: timing a GEMM with its weights left in cache
          // by the previous repeat favoured compute-light single-thread forms that lose in the step.
          if (kn.gemm) EvictWeights(*kn.gemm);
          auto t0 = Clock::now();
          run_once(cands[ci]);
          if (round > 0) times[ci].push_back(Since(t0) * 1e6);
        }
      double best = INFINITY;
      const Candidate* best_c = nullptr;
      for (size_t ci : passed) {
        tried[ci].update(TimingSummary(times[ci]));
        const double med = tried[ci]["median_us"];
        if (med < best) {
          best = med;
          best_c = &cands[ci];
        }
      }
      launches_[k] = defaults[k];
      r["candidates"] = tried;
      if (!best_c) {
        r["reason"] = "no candidate passed the correctness check: default kept";
        r["chosen"] = "";
        receipts.push_back(r);
        continue;
      }
      chosen[k] = {best_c->use_template, best_c->team ? Threading::Team : Threading::OneThread,
                   best_c->reduce_outer, best_c->form};
      r["chosen"] = best_c->name;
      r["median_us"] = best;
      r["fraction_of_roofline"] = floor_s * 1e6 / best;
      r["reason"] = "fastest of " + std::to_string(tried.size()) + " candidates that passed the check";
      written.push_back(key);
      db[key] = ChoiceToJson(chosen[k]);
      db[key]["candidate"] = best_c->name;
      db[key]["median_us"] = best;
      db_changed = true;
      receipts.push_back(r);
    }
    // The step's floor: the kernels that run under the choices made (a fused attention kernel's
    // unfused ones do not).
    double step_floor_us = 0;
    for (size_t k = 0; k < kp_.kernels.size(); ++k) {
      const int by = kp_.kernels[k].covered_by;
      if (by < 0 || !chosen[by].use_template || !AttentionTemplateSupported()) step_floor_us += floors_us[k];
    }
    if (threads > 1 && !opts.only_kernel.empty() && !inherits) apply_step_decision(bucket, keys, chosen);
    if (threads > 1 && opts.only_kernel.empty() && !inherits) {
      // The whole step on the team (with its barriers) against thread 0 alone: for a small model the
      // barriers can cost more than splitting gains, which timing kernels one at a time cannot see.
      std::string key = step_key(bucket, keys);
      if (known(key) || Since(start) > opts.budget_seconds) {
        apply_step_decision(bucket, keys, chosen);
        continue;
      }
      // The variants take turns, as the kernels' candidates do. Splitting every GEMM is tried too: a
      // GEMM timed alone wakes the team for each run, which favours keeping small ones on one thread.
      std::vector<std::string> names = {"team"};
      if (step_variant("team, every GEMM split", chosen) != chosen) names.push_back("team, every GEMM split");
      names.push_back("one thread");
      const std::vector<KernelChoice> own = chosen;
      std::vector<std::vector<double>> times(names.size());
      auto t_steps = Clock::now();
      for (int round = 0; round < 9 && (round < 4 || Since(t_steps) < 4.0); ++round)  // round 0 warms up
        for (size_t v = 0; v < names.size(); ++v) {
          chosen = step_variant(names[v], own);
          PlanLaunches(b);
          auto t0 = Clock::now();
          RunMegakernel(ptrs.data(), sym_values.data());
          if (round > 0) times[v].push_back(Since(t0) * 1e6);
        }
      chosen = own;
      nlohmann::json tried = nlohmann::json::array();
      size_t best_v = 0;
      std::vector<double> med(names.size());
      for (size_t v = 0; v < names.size(); ++v) {
        nlohmann::json t{{"candidate", names[v]}, {"passed", true}, {"max_rel_error", 0.0}};
        t.update(TimingSummary(times[v]));
        med[v] = t["median_us"];
        tried.push_back(t);
        if (med[v] < med[best_v]) best_v = v;
      }
      decide_step(bucket, key, names[best_v], chosen,
                  {{"candidates", tried},
                   {"median_us", med[best_v]},
                   {"floor_us", step_floor_us},
                   {"reason",
                    "fastest of the kernels' own choices on the team, every GEMM split, and one "
                    "thread, over the whole step"}});
      written.push_back(key);
      db[key] = {{"candidate", names[best_v]}};
      db_changed = true;
    }
    const double others = busy.OthersFraction();
    const bool saved = written.empty() || others <= opts.busy_limit;
    if (!saved) unsaved.insert(written.begin(), written.end());
    if (!written.empty())
      receipts.push_back({{"kernel", "(search)"},
                          {"scope", "search"},
                          {"bucket", bucket},
                          {"chosen", ""},
                          {"reason", "how busy the machine was while candidates were timed"},
                          {"decisions", written.size()},
                          {"others_cpu_fraction", others},
                          {"saved", saved}});
  }
  for (const std::string& key : unsaved) db.erase(key);
  // Repacked weights that no chosen form reads were made for candidates only: free them.
  std::set<std::pair<int, int>> used;
  for (const auto& [bucket, cs] : choices_)
    for (size_t k = 0; k < cs.size() && k < kp_.kernels.size(); ++k)
      if (kp_.kernels[k].gemm && cs[k].use_template) used.insert({cs[k].form, kp_.kernels[k].gemm->w_buffer});
  std::erase_if(packed_, [&](const auto& e) { return !used.count(e.first); });
  ResetState();  // tuning ran kernels on random data
  if (db_changed && !opts.db_path.empty()) {
    std::filesystem::create_directories(std::filesystem::path(opts.db_path).parent_path());
    std::string tmp = opts.db_path + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp) << db.dump(1);
    std::filesystem::rename(tmp, opts.db_path);
  }
  return receipts;
}

}  // namespace prism
