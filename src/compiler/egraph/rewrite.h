// A graph's equivalent programs: saturated under the rules, extracted by the cost model into a few candidates
// (the graph as written first) for the one search to compile, check and time.
#pragma once

#include <string>
#include <vector>

#include "compiler/egraph/extract.h"
#include "compiler/egraph/saturate.h"

namespace prism {

struct RewriteOptions {
  SaturationBudget budget;
  CostModel cost;
  const std::vector<Rule>* rules = nullptr;  // null: DefaultRules()
  size_t max_candidates = 4;
};

struct ProgramCandidate {
  std::string
      name;  // "as written", "rewritten", "rewritten, every merge", "rewritten, only 3 GEMMs -> 1 (...)"
  Graph graph;
  double predicted_seconds = 0;       // the cost model's, at RewriteOptions::cost.sizes
  std::vector<std::string> rewrites;  // what changed: "merge-linears: 3 GEMMs -> 1 (q_proj, k_proj, v_proj)"
};

struct RewriteResult {
  std::vector<ProgramCandidate>
      candidates;  // [0] is the graph as written; the rest differ from it and each other
  SaturationReport saturation;
  double extract_seconds = 0;
  std::vector<std::string> joints;  // every multi-class rewrite found, taken or not
  bool reused = false;  // kept from an earlier identical rewrite in this process (its seconds are that one's)
};

RewriteResult RewriteProgram(const Graph& g, const RewriteOptions& opts = {});
// RewriteProgram, its result kept for the process's later calls on the same graph and options (a model
// loaded again, as a server's after --idle-unload): the last few, by the graph's text; `reused` when kept.
RewriteResult RewriteProgramKept(const Graph& g, const RewriteOptions& opts = {});
// The graph as written alone, saturation not run (`why` in its receipt): a program asked for as written.
RewriteResult AsWritten(const Graph& g, const std::string& why);

// A short fingerprint of the rules (their names and text), for keys of decisions that depend on them.
std::string RulesFingerprint(const std::vector<Rule>& rules);

}  // namespace prism
