// The one search over programs: the rewritten candidates of a graph compiled, checked against the graph as
// written on the same random inputs, timed a whole step at a time per bucket, the fastest kept and
// remembered.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backends/device.h"
#include "compiler/egraph/rewrite.h"

namespace prism {

struct ProgramSearchOptions {
  std::vector<std::pair<std::string, SymbolBindings>> buckets;  // each timed a whole step at a time
  // The request a program is chosen for: how many steps of each bucket it takes (a bucket not named: one).
  // The fastest program is the one whose request takes least time (RequestUs).
  std::map<std::string, double> steps;
  std::string db_path;      // tuning database; "" = none
  bool measure = true;      // false: the database's decision, else the graph as written (nothing timed)
  double busy_limit = 0.2;  // a decision timed while others used more of the CPU is not saved
  double seconds_per_bucket = 1.0;
  std::string force;  // a candidate's name: that one, nothing timed (an unknown name is an error)
};

struct ProgramDecision {
  size_t chosen = 0;                // index into the candidates
  std::unique_ptr<Executable> exe;  // the chosen candidate, compiled (and tuned) by `build`
  nlohmann::json receipt;           // scope "program": what was timed, the rewrites of the choice
};

// Whether the program search times candidates on this device: where the wall clock is its clock and it
// searches schedules (cpu, opencl, cuda). Elsewhere (the reference interpreter; a simulated device, whose
// clock is a model) a program is the database's choice or the graph as written.
bool TimesPrograms(const std::string& device);

// A request's time: the sum over buckets of a candidate's median step (median_us: bucket -> microseconds)
// times that bucket's steps in the request (ProgramSearchOptions::steps; one where not named).
double RequestUs(const nlohmann::json& median_us, const std::map<std::string, double>& steps);

// A candidate's outputs against the graph as written's on the same inputs: "" where they agree up to its
// kernels' roundings, else why not. An output fails where its error's RMS exceeds kProgramRmsTolerance of its
// values' RMS, one element is off by more than kProgramElementTolerance of its largest magnitude, or NaN or
// inf appears, or differs, where the other has it.
constexpr double kProgramRmsTolerance = 0.25, kProgramElementTolerance = 0.25;
std::string CompareProgramOutputs(const std::vector<HostTensor>& want, const std::vector<HostTensor>& got);

// `build` compiles a candidate with its weights bound; `tune` searches its schedules within `share` of the
// search budget and returns its receipts: share 1 where one candidate is built, 1/n each where n are timed
// against each other (the budget is the whole search's, not each candidate's). Where every decision was saved
// to the database, every candidate but the last is then tuned again with share 0, applying what the later
// ones' searches decided, so that the kernels they share are timed under the same schedules. Candidates whose
// outputs differ from the graph as written (CompareProgramOutputs) are dropped with the reason.
ProgramDecision ChooseProgram(const RewriteResult& rr, const std::string& device_identity,
                              const std::function<std::unique_ptr<Executable>(const Graph&)>& build,
                              const std::function<nlohmann::json(Executable&, double share)>& tune,
                              const ProgramSearchOptions& opts);

}  // namespace prism
