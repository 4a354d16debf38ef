// Equality saturation under a budget: every rule searched over the e-graph, then every match applied, then
// the graph rebuilt, until nothing changes or the budget is spent; deterministic for a graph and rule set.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/egraph/rules.h"

namespace prism {

struct SaturationBudget {
  size_t max_nodes = 0;  // 0: four times the starting nodes plus 10000
  int max_iterations = 6;
  // A guard, not the usual stop (a stop on time alone would make the result depend on the machine's speed).
  double max_seconds = 30;
};

struct SaturationReport {
  int iterations = 0;
  size_t nodes_start = 0, nodes_end = 0, classes_start = 0, classes_end = 0;
  std::string stopped;                  // "saturated", "node limit", "iteration limit", "time limit"
  std::map<std::string, size_t> fired;  // rule -> unions it made
  double seconds = 0;
  SaturationBudget budget;
};

SaturationReport Saturate(EGraph& eg, const std::vector<Rule>& rules, const SaturationBudget& budget,
                          std::vector<Joint>* joints);

}  // namespace prism
