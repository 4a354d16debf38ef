// The saturation loop: search all rules, apply all matches, rebuild; stop at a fixed point or the budget.
#include "compiler/egraph/saturate.h"

#include <chrono>

namespace prism {

SaturationReport Saturate(EGraph& eg, const std::vector<Rule>& rules, const SaturationBudget& budget,
                          std::vector<Joint>* joints) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  SaturationReport rep;
  rep.budget = budget;
  eg.Rebuild();
  rep.nodes_start = eg.node_count();
  rep.classes_start = eg.class_count();
  const size_t max_nodes = budget.max_nodes ? budget.max_nodes : 4 * rep.nodes_start + 10000;
  rep.budget.max_nodes = max_nodes;
  rep.stopped = "iteration limit";
  bool full = false;
  for (int it = 0; it < budget.max_iterations && !full; ++it) {
    rep.iterations = it + 1;
    // Search every pattern rule first, so one iteration's matches do not depend on the order rules apply in.
    std::vector<std::vector<Match>> found(rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
      if (rules[r].code) continue;
      for (ClassId c : eg.Classes()) MatchIn(eg, rules[r].lhs, c, &found[r]);
    }
    size_t unions = 0;
    for (size_t r = 0; r < rules.size() && !full; ++r) {
      const Rule& rule = rules[r];
      eg.set_current_rule(rule.name);
      size_t made = 0;
      if (rule.code) {
        made = rule.code(eg, joints);
      } else {
        for (const Match& m : found[r]) {
          if (eg.node_count() >= max_nodes || elapsed() > budget.max_seconds) {
            rep.stopped = eg.node_count() >= max_nodes ? "node limit" : "time limit";
            full = true;
            break;
          }
          if (!ConditionsHold(eg, rule, m)) continue;
          if (auto rhs = Instantiate(eg, rule.rhs, m)) made += eg.Union(m.root, *rhs);
        }
      }
      eg.set_current_rule("");
      if (made) rep.fired[rule.name] += made;
      unions += made;
    }
    eg.Rebuild();
    if (!full && unions == 0) {
      rep.stopped = "saturated";
      break;
    }
  }
  rep.nodes_end = eg.node_count();
  rep.classes_end = eg.class_count();
  rep.seconds = elapsed();
  return rep;
}

}  // namespace prism
