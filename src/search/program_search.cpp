// Program search: compile each candidate, check it against the written graph's outputs, time whole steps.
#include "search/program_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "ir/error.h"
#include "search/busy_meter.h"
#include "search/tuning_db.h"

namespace prism {

namespace {

std::map<std::string, HostTensor> RandomInputs(const Graph& g, const SymbolBindings& sizes, uint64_t seed) {
  std::mt19937 rng((uint32_t)seed);
  std::map<std::string, HostTensor> in;
  for (const Node* n : InputNodes(g)) {
    HostTensor t = HostTensor::Zeros(n->dtype, EvalShape(n->shape, sizes));
    FillRandomNonZero(t.data, n->dtype, t.numel(), rng);
    in[n->name] = std::move(t);
  }
  return in;
}

// One step's wall time in microseconds (its state reset after).
double RunUs(Executable& exe, const std::map<std::string, HostTensor>& in, const SymbolBindings& sizes) {
  const auto t0 = std::chrono::steady_clock::now();
  exe.Run(in, sizes);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  exe.ResetState();
  return us;
}

double StepsOf(const std::map<std::string, double>& steps, const std::string& bucket) {
  auto it = steps.find(bucket);
  return it == steps.end() ? 1.0 : it->second;
}

}  // namespace

// Each kernel was checked against the kernel IR within its own rounding bounds by the schedule search, and
// every rule against the interpreter; this check is for a wrong program (a weight concatenated or sliced
// wrongly), whose error is the size of the values themselves. Two right programs differ by their kernels'
// roundings, which a deep model with random weights and state amplifies: the 1B shape's decode logits (16
// layers, a random KV cache) moved by 5% of their RMS, and by 5% of their largest magnitude, where a merged
// product computed in f32 and the two it replaced rounded their activation to int8 per 32 values (each
// schedule chose its fastest form). A wrong slice or concatenation moves an output by about its own RMS.
std::string CompareProgramOutputs(const std::vector<HostTensor>& want, const std::vector<HostTensor>& got) {
  if (want.size() != got.size()) return "a different number of outputs";
  for (size_t o = 0; o < want.size(); ++o) {
    if (want[o].shape != got[o].shape) return "output " + std::to_string(o) + " has another shape";
    double big = 0, want_sq = 0, err_sq = 0, worst = -1;
    int64_t at = 0;
    for (int64_t i = 0; i < want[o].numel(); ++i) {
      const double w = want[o].At(i), x = got[o].At(i);
      if (std::isfinite(w) != std::isfinite(x) || (!std::isfinite(w) && !(w == x || (w != w && x != x)))) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "output %zu element %lld: %g where the graph as written gives %g", o,
                      (long long)i, x, w);
        return buf;
      }
      if (!std::isfinite(w)) continue;
      big = std::max(big, std::fabs(w));
      want_sq += w * w;
      err_sq += (w - x) * (w - x);
      if (std::fabs(w - x) > worst) worst = std::fabs(w - x), at = i;
    }
    const double rms_ratio = want_sq > 0 ? std::sqrt(err_sq / want_sq) : (err_sq > 0 ? INFINITY : 0);
    if (rms_ratio > kProgramRmsTolerance || worst > kProgramElementTolerance * big + 1e-6) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "output %zu: error %.3g of its RMS, element %lld: %g where the graph as written gives %g",
                    o, rms_ratio, (long long)at, got[o].At(at), want[o].At(at));
      return buf;
    }
  }
  return "";
}

double RequestUs(const nlohmann::json& median_us, const std::map<std::string, double>& steps) {
  double us = 0;
  for (const auto& [bucket, t] : median_us.items()) us += StepsOf(steps, bucket) * t.get<double>();
  return us;
}

bool TimesPrograms(const std::string& device) {
  return device == "cpu" || device == "opencl" || device == "cuda";
}

ProgramDecision ChooseProgram(const RewriteResult& rr, const std::string& device_identity,
                              const std::function<std::unique_ptr<Executable>(const Graph&)>& build,
                              const std::function<nlohmann::json(Executable&, double share)>& tune,
                              const ProgramSearchOptions& opts) {
  ProgramDecision d;
  bool all_saved = !opts.db_path.empty();  // every decision of the candidates' searches in the database
  auto made = [&](const Graph& g, double share) {
    std::unique_ptr<Executable> exe = build(g);
    for (const nlohmann::json& t : tune(*exe, share)) all_saved &= t.value("saved", true);
    return exe;
  };
  // The check's version and the request are in the key: a decision made under the first check, which
  // dropped right programs (an element off by 2e-2 of the largest magnitude failed), or for another request
  // (the first score summed each bucket's time ratio), is timed again.
  std::string request;  // "128 decode + 1 prefill"
  nlohmann::json request_steps = nlohmann::json::object();
  for (const auto& [bucket, sizes] : opts.buckets) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%g %s", request.empty() ? "" : " + ", StepsOf(opts.steps, bucket),
                  bucket.c_str());
    request += buf;
    request_steps[bucket] = StepsOf(opts.steps, bucket);
  }
  const std::string key =
      TuningDb::ProgramKey(rr.candidates[0].graph.ToText(),
                           RulesFingerprint(DefaultRules()) + "|check 2|request " + request, device_identity);
  nlohmann::json r{{"kernel", "(program)"}, {"scope", "program"}, {"key", key}};
  r["saturation"] = {{"iterations", rr.saturation.iterations},
                     {"nodes", {rr.saturation.nodes_start, rr.saturation.nodes_end}},
                     {"classes", {rr.saturation.classes_start, rr.saturation.classes_end}},
                     {"stopped", rr.saturation.stopped},
                     {"budget",
                      {{"nodes", rr.saturation.budget.max_nodes},
                       {"iterations", rr.saturation.budget.max_iterations},
                       {"seconds", rr.saturation.budget.max_seconds}}},
                     {"seconds", rr.saturation.seconds},
                     {"extract_seconds", rr.extract_seconds},
                     {"reused", rr.reused},
                     {"fired", rr.saturation.fired}};
  auto finish = [&](size_t chosen, const std::string& reason) {
    d.chosen = chosen;
    r["chosen"] = rr.candidates[chosen].name;
    r["rewrites"] = rr.candidates[chosen].rewrites;
    r["reason"] = reason;
    d.receipt = r;
  };
  if (!opts.force.empty()) {
    for (size_t i = 0; i < rr.candidates.size(); ++i)
      if (rr.candidates[i].name == opts.force) {
        d.exe = made(rr.candidates[i].graph, 1);
        finish(i, "asked for by name");
        return d;
      }
    std::string names;
    for (const ProgramCandidate& c : rr.candidates)
      names += (names.empty() ? "" : ", ") + ("'" + c.name + "'");
    throw Error("program '" + opts.force + "': the rewrites give " + names);
  }
  // Decided before: that candidate alone is built.
  const TuningDb known(opts.db_path);  // read now: building a candidate tunes it, which writes the database
  if (const nlohmann::json* e = known.Find(key)) {
    const std::string name = e->value("candidate", "");
    for (size_t i = 0; i < rr.candidates.size(); ++i)
      if (rr.candidates[i].name == name) {
        d.exe = made(rr.candidates[i].graph, 1);
        r["timed"] = e->value("timed", nlohmann::json::array());
        finish(i, "tuning database");
        return d;
      }
  }
  if (!opts.measure || rr.candidates.size() == 1) {
    d.exe = made(rr.candidates[0].graph, 1);
    finish(0, rr.candidates.size() == 1 ? "no rewrite the cost model prefers"
                                        : "nothing timed (no search budget): the graph as written");
    return d;
  }
  BusyMeter busy;
  std::vector<std::unique_ptr<Executable>> exes;
  std::vector<std::string> broken(rr.candidates.size());
  const double share = 1.0 / (double)rr.candidates.size();
  for (const ProgramCandidate& c : rr.candidates) exes.push_back(made(c.graph, share));
  for (size_t i = 0; i + 1 < exes.size() && all_saved; ++i) tune(*exes[i], 0);  // the later ones' decisions
  // The check: every candidate's outputs against the graph as written, same inputs, one step per bucket.
  for (const auto& [bucket, sizes] : opts.buckets) {
    const auto in = RandomInputs(exes[0]->graph(), sizes, 11);
    const auto want = exes[0]->Run(in, sizes);
    exes[0]->ResetState();
    for (size_t i = 1; i < exes.size(); ++i) {
      if (!broken[i].empty()) continue;
      const auto got = exes[i]->Run(in, sizes);
      exes[i]->ResetState();
      if (std::string why = CompareProgramOutputs(want, got); !why.empty()) broken[i] = bucket + ": " + why;
    }
  }
  // Whole steps, candidates taking turns, per bucket; the score is the request's time (RequestUs).
  std::vector<double> score(exes.size(), 0);
  nlohmann::json timed = nlohmann::json::array();
  std::vector<nlohmann::json> per(exes.size(), nlohmann::json::object());
  for (const auto& [bucket, sizes] : opts.buckets) {
    std::vector<std::vector<double>> us(exes.size());
    const auto in = RandomInputs(exes[0]->graph(), sizes, 13);
    const auto t0 = std::chrono::steady_clock::now();
    for (int round = 0; round < 26; ++round) {  // round 0 warms up
      for (size_t i = 0; i < exes.size(); ++i)
        if (broken[i].empty()) {
          const double t = RunUs(*exes[i], in, sizes);
          if (round > 0) us[i].push_back(t);
        }
      if (round >= 5 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
                            opts.seconds_per_bucket)
        break;
    }
    for (size_t i = 0; i < exes.size(); ++i) {
      if (!broken[i].empty()) continue;
      std::sort(us[i].begin(), us[i].end());
      const double med = us[i][us[i].size() / 2];
      per[i][bucket] = med;
    }
  }
  for (size_t i = 0; i < exes.size(); ++i)
    if (broken[i].empty()) score[i] = RequestUs(per[i], opts.steps);
  size_t best = 0;
  for (size_t i = 0; i < exes.size(); ++i) {
    nlohmann::json t{{"candidate", rr.candidates[i].name},
                     {"predicted_us", 1e6 * rr.candidates[i].predicted_seconds},
                     {"rewrites", rr.candidates[i].rewrites},
                     {"kernels", exes[i]->kernel_count()}};
    if (!broken[i].empty()) {
      t["passed"] = false;
      t["error"] = broken[i];
    } else {
      t["passed"] = true;
      t["median_us"] = per[i];
      if (score[i] < score[best]) best = i;
    }
    timed.push_back(t);
  }
  r["timed"] = timed;
  r["budget_share_each"] = share;
  const double others = busy.OthersFraction();
  r["others_cpu_fraction"] = others;
  if (others <= opts.busy_limit) {
    TuningDb db(opts.db_path);
    db.Put(key, {{"candidate", rr.candidates[best].name}, {"timed", timed}});
    db.Save();
  }
  d.exe = std::move(exes[best]);
  r["request_steps"] = request_steps;
  finish(best, "fastest request of " + request + " steps");
  return d;
}

}  // namespace prism
