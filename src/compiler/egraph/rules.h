// Rewrite rules as data: a table of patterns (left => right, with conditions) and the few rules whose right
// side must be computed, each a named function beside the table.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/egraph/pattern.h"

namespace prism {

// A rewrite over several classes at once (products over one input merged into one): extraction takes all
// of its members' nodes or none, since any one alone only adds work.
struct Joint {
  std::string rule, what;                          // what: "3 GEMMs -> 1 (q_proj, k_proj, v_proj)"
  std::vector<std::pair<ClassId, ENode>> members;  // each class with the node the rewrite made for it
};

struct Rule {
  std::string name;
  std::string text;  // as the table spells it (code rules: what they do)
  Pattern lhs, rhs;  // pattern rules
  // Conditions on the match: a predicate's name and its variables ("same-shape", {"a", "b"}).
  std::vector<std::pair<std::string, std::vector<std::string>>> conditions;
  // Code rules: apply every match in the e-graph (its state at the call), adding joints; return unions made.
  std::function<size_t(EGraph&, std::vector<Joint>*)> code;
};

// Parses a table: one rule per line, "name: LEFT => RIGHT [if PRED ?x ?y [, PRED ...]]"; '#' starts a
// comment. Throws prism::Error naming the line of a malformed rule (or one whose right side uses a variable
// or label the left side does not bind).
std::vector<Rule> ParseRules(const std::string& table);
// Prism's rules: the code rules, then the table in rules.cpp with its families expanded.
const std::vector<Rule>& DefaultRules();
// Whether a match satisfies a rule's conditions.
bool ConditionsHold(const EGraph& eg, const Rule& r, const Match& m);

}  // namespace prism
