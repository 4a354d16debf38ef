// The rewrite driver: graph -> e-graph -> saturation -> extraction of the written, best and all-merged
// programs.
#include "compiler/egraph/rewrite.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "ir/error.h"
#include "ir/fnv.h"

namespace prism {

namespace {

// What a choice changed from the graph: the joints it takes, and nodes per rule for the rest.
std::vector<std::string> Describe(const EGraph& eg, const Choice& choice, const std::vector<ClassId>& roots,
                                  const std::vector<Joint>& taken) {
  std::vector<std::string> out;
  std::set<std::string> joint_keys;
  std::vector<std::pair<std::string, int>> merges;  // each distinct merge, and how many times it was taken
  for (const Joint& j : taken) {
    const std::string what = j.rule + ": " + j.what;
    auto it = std::find_if(merges.begin(), merges.end(), [&](const auto& m) { return m.first == what; });
    if (it == merges.end())
      merges.push_back({what, 1});
    else
      ++it->second;
    for (auto& [c, n] : j.members) joint_keys.insert(eg.Key(n));
  }
  for (auto& [what, times] : merges)
    out.push_back(what + (times > 1 ? " (x" + std::to_string(times) + ")" : ""));
  std::map<std::string, int> per_rule;
  for (ClassId c : Reached(eg, choice, roots)) {
    const ENode& n = choice.at(c);
    const std::string& rule = eg.Origin(n);
    if (!rule.empty() && !joint_keys.count(eg.Key(n)) && rule != "merge-linears") per_rule[rule]++;
  }
  for (auto& [rule, count] : per_rule)
    out.push_back(rule + ": " + std::to_string(count) + " node" + (count > 1 ? "s" : ""));
  return out;
}

}  // namespace

std::string RulesFingerprint(const std::vector<Rule>& rules) {
  uint64_t h = kFnvOffset;  // over every rule's name and text
  for (const Rule& r : rules) h = Fnv1a(r.name + "=" + r.text + ";", h);
  return FnvHex(h);
}

static RewriteResult Rewrite(const Graph& g, const RewriteOptions& opts) {
  const std::vector<Rule>& rules = opts.rules ? *opts.rules : DefaultRules();
  RewriteResult res;
  std::vector<ClassId> of_node;
  EGraph eg = EGraph::FromGraph(g, &of_node);
  std::vector<Joint> joints;
  res.saturation = Saturate(eg, rules, opts.budget, &joints);
  const auto t0 = std::chrono::steady_clock::now();
  // One joint per set of classes (a later iteration may find the same merge through a commuted product).
  {
    std::set<std::vector<ClassId>> seen;
    std::vector<Joint> distinct;
    for (Joint& j : joints) {
      std::vector<ClassId> members;
      for (auto& [c, n] : j.members) members.push_back(eg.Find(c));
      std::sort(members.begin(), members.end());
      if (seen.insert(members).second) distinct.push_back(std::move(j));
    }
    joints = std::move(distinct);
  }
  for (const Joint& j : joints) res.joints.push_back(j.rule + ": " + j.what);

  const NodeCost cost = [&](const ENode& n) { return opts.cost.NodeSeconds(eg, n); };
  const std::vector<ClassId> roots = RootsOf(eg, g, of_node);
  const Choice best_tree = ExtractBest(eg, cost);
  Choice written = best_tree;  // the graph's own nodes over the best (which covers the classes rewrites made)
  for (auto& [c, n] : WrittenChoice(eg, g, of_node)) written[c] = n;
  const double written_cost = DagCost(eg, written, roots, cost);
  res.candidates.push_back({"as written", g, written_cost, {}});

  // The best: the tree-cost choice where it beats the graph as written over the whole program (sharing
  // counted once), then each joint where it lowers that cost.
  Choice best = DagCost(eg, best_tree, roots, cost) < written_cost ? best_tree : written;
  double best_cost = DagCost(eg, best, roots, cost);
  const Choice base = best;  // before any joint
  std::vector<Joint> taken, all;
  auto with = [&](Choice c, const Joint& j) {
    for (auto& [cls, n] : j.members) c[eg.Find(cls)] = n;
    return c;
  };
  for (const Joint& j : joints) {
    Choice trial = with(best, j);
    double c;
    try {
      c = DagCost(eg, trial, roots, cost);
    } catch (const Error&) {
      continue;  // the joint closes a cycle with this choice
    }
    if (c < best_cost) best = std::move(trial), best_cost = c, taken.push_back(j);
  }
  Choice merged = best;
  for (const Joint& j : joints) {
    Choice trial = with(merged, j);
    try {
      DagCost(eg, trial, roots, cost);
    } catch (const Error&) {
      continue;
    }
    merged = std::move(trial);
    all.push_back(j);
  }
  // Distinct candidates only: the same program twice would be timed twice.
  std::set<std::string> seen{g.ToText()};
  auto add = [&](const std::string& name, const Choice& c, const std::vector<Joint>& js) {
    if (res.candidates.size() >= opts.max_candidates) return;
    Graph out = ToGraph(eg, c, g, of_node);
    if (!seen.insert(out.ToText()).second) return;
    res.candidates.push_back({name, std::move(out), DagCost(eg, c, roots, cost), Describe(eg, c, roots, js)});
  };
  add("rewritten", best, taken);
  if (all.size() > taken.size()) add("rewritten, every merge", merged, all);
  // One kind of merge at a time (q/k/v alone, gate/up alone), where the best takes several kinds: a merge can
  // cost what it saves elsewhere (the product's epilogue it no longer has), and only timing tells.
  std::vector<std::string> kinds;
  for (const Joint& j : taken)
    if (std::find(kinds.begin(), kinds.end(), j.what) == kinds.end()) kinds.push_back(j.what);
  for (size_t k = 0; kinds.size() > 1 && k < kinds.size(); ++k) {
    Choice c = base;
    std::vector<Joint> js;
    for (const Joint& j : taken)
      if (j.what == kinds[k]) c = with(std::move(c), j), js.push_back(j);
    add("rewritten, only " + kinds[k], c, js);
  }
  res.extract_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

RewriteResult RewriteProgram(const Graph& g, const RewriteOptions& opts) {
  try {
    return Rewrite(g, opts);
  } catch (const Error& e) {  // a rewrite's failure never keeps a model from running as written
    return AsWritten(g, std::string("failed: ") + e.what());
  }
}

RewriteResult RewriteProgramKept(const Graph& g, const RewriteOptions& opts) {
  if (opts.rules) return RewriteProgram(g, opts);  // rules of the caller's own: not kept
  static std::mutex mu;
  static std::deque<std::pair<std::string, RewriteResult>> kept;
  std::ostringstream key;
  key << g.ToText() << "\nbudget " << opts.budget.max_nodes << " " << opts.budget.max_iterations << " "
      << opts.budget.max_seconds << "\ncost " << opts.cost.launch_seconds << " "
      << opts.cost.read_bytes_per_second << " " << opts.cost.flops_per_second << " "
      << opts.cost.element_seconds << "\ncandidates " << opts.max_candidates;
  for (const auto& [name, value] : opts.cost.sizes) key << "\n" << name << "=" << value;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, rr] : kept)
      if (k == key.str()) {
        RewriteResult again = rr;
        again.reused = true;
        return again;
      }
  }
  RewriteResult rr = RewriteProgram(g, opts);
  std::lock_guard<std::mutex> lock(mu);
  kept.emplace_back(key.str(), rr);
  if (kept.size() > 8) kept.pop_front();
  return rr;
}

RewriteResult AsWritten(const Graph& g, const std::string& why) {
  RewriteResult res;
  res.candidates.push_back({"as written", g, 0, {}});
  res.saturation.stopped = why;
  return res;
}

}  // namespace prism
