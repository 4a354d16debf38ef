// Extraction: tree-cost fixed point, DAG cost, and writing a choice back into a Graph in the graph's order.
#include "compiler/egraph/extract.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "ir/error.h"

namespace prism {

namespace {

double Elements(const std::vector<Expr>& shape, const SymbolBindings& sizes) {
  double n = 1;
  for (const Expr& d : shape) {
    std::vector<std::string> syms;
    d.CollectSymbols(&syms);
    SymbolBindings b = sizes;
    for (const std::string& s : syms) b.emplace(s, 64);
    n *= (double)std::max<int64_t>(1, d.Eval(b));
  }
  return n;
}

// The bytes of a stored weight (of rank 2 or more) that class c is a view of; 0 if none.
double WeightBytes(const EGraph& eg, ClassId c, const SymbolBindings& sizes) {
  for (bool viewed = true; viewed;) {
    viewed = false;
    for (const ENode& v : eg.eclass(c).nodes)
      if (v.op == Op::Expand || v.op == Op::Reshape || v.op == Op::Cast) {
        c = v.inputs[0];
        viewed = true;
        break;
      }
  }
  for (const ENode& w : eg.eclass(c).nodes)
    if (w.op == Op::Weight && w.shape.size() >= 2)
      return (double)StorageBytes(w.dtype, (int64_t)Elements(w.shape, sizes));
  return 0;
}

}  // namespace

double CostModel::NodeSeconds(const EGraph& eg, const ENode& n) const {
  if (n.op == Op::Input || n.op == Op::Weight || n.op == Op::State || n.op == Op::Constant ||
      IsMovement(n.op))
    return 0;
  if (WritesState(n.op))
    return launch_seconds + element_seconds * Elements(eg.eclass(n.inputs[1]).shape, sizes);
  if (IsReduce(n.op)) {
    // A product over a stored weight streams it; any other reduction reads its operand's elements.
    double weight_bytes = 0;
    for (const ENode& m : eg.eclass(n.inputs[0]).nodes)
      if (m.op == Op::Mul)
        for (ClassId side : m.inputs) weight_bytes = std::max(weight_bytes, WeightBytes(eg, side, sizes));
    const double in_elems = Elements(eg.eclass(n.inputs[0]).shape, sizes);
    return launch_seconds + std::max(weight_bytes / read_bytes_per_second, 2 * in_elems / flops_per_second);
  }
  // A product's multiply by a weight, and a weight's cast, are its reduction's work (counted there).
  if ((n.op == Op::Mul || n.op == Op::Cast) &&
      std::any_of(n.inputs.begin(), n.inputs.end(), [&](ClassId k) { return WeightBytes(eg, k, sizes) > 0; }))
    return 0;
  return element_seconds * Elements(n.shape, sizes) * (IsUnary(n.op) && n.op != Op::Cast ? 4 : 1);
}

Choice ExtractBest(const EGraph& eg, const NodeCost& cost) {
  struct Best {
    double cost = std::numeric_limits<double>::infinity();
    bool rewritten = true;
    const ENode* node = nullptr;
  };
  std::unordered_map<ClassId, Best> best;
  const std::vector<ClassId> classes = eg.Classes();
  for (bool changed = true; changed;) {
    changed = false;
    for (ClassId c : classes) {
      Best& b = best[c];
      for (const ENode& n : eg.eclass(c).nodes) {
        double total = cost(n) + 1e-12;  // every node costs something: a cycle never beats its way out
        for (ClassId k : n.inputs) {
          auto it = best.find(eg.Find(k));
          total += it == best.end() ? std::numeric_limits<double>::infinity() : it->second.cost;
        }
        if (!std::isfinite(total)) continue;
        const bool rewritten = !eg.Origin(n).empty();
        if (b.node == &n) {  // its operands got cheaper
          if (total < b.cost * (1 - 1e-9)) b.cost = total, changed = true;
          continue;
        }
        // Cheaper, or as cheap and written in the graph where the best so far came from a rewrite.
        const bool better = !b.node || total < b.cost * (1 - 1e-9) ||
                            (total <= b.cost * (1 + 1e-9) && !rewritten && b.rewritten);
        if (better) b = {total, rewritten, &n}, changed = true;
      }
    }
  }
  Choice out;
  for (auto& [c, b] : best)
    if (b.node) out.emplace(c, *b.node);
  return out;
}

Choice WrittenChoice(const EGraph& eg, const Graph& g, const std::vector<ClassId>& of_node) {
  Choice out;
  for (NodeId i = 0; i < g.size(); ++i) {
    const ClassId c = eg.Find(of_node[i]);
    if (out.count(c)) continue;  // the lowest node: its operands are lower nodes' classes, so no cycle
    ENode n = g.node(i);
    for (NodeId& x : n.inputs) x = eg.Find(of_node[x]);
    out.emplace(c, std::move(n));
  }
  return out;
}

std::vector<ClassId> Reached(const EGraph& eg, const Choice& choice, const std::vector<ClassId>& roots) {
  std::unordered_map<ClassId, int> state;  // 1: on the path, 2: done
  std::vector<ClassId> order;
  std::function<void(ClassId)> visit = [&](ClassId c) {
    c = eg.Find(c);
    int& s = state[c];
    if (s == 2) return;
    if (s == 1) throw Error("extraction: the chosen program has a cycle through class " + std::to_string(c));
    s = 1;
    auto it = choice.find(c);
    if (it == choice.end()) throw Error("extraction: class " + std::to_string(c) + " has no chosen node");
    for (ClassId k : it->second.inputs) visit(k);
    state[c] = 2;
    order.push_back(c);
  };
  for (ClassId r : roots) visit(r);
  return order;
}

double DagCost(const EGraph& eg, const Choice& choice, const std::vector<ClassId>& roots,
               const NodeCost& cost) {
  double total = 0;
  for (ClassId c : Reached(eg, choice, roots)) total += cost(choice.at(c));
  return total;
}

std::vector<ClassId> RootsOf(const EGraph& eg, const Graph& g, const std::vector<ClassId>& of_node) {
  std::vector<ClassId> roots;
  for (NodeId o : g.outputs()) roots.push_back(eg.Find(of_node[o]));
  for (NodeId i = 0; i < g.size(); ++i)
    if (WritesState(g.node(i).op)) roots.push_back(eg.Find(of_node[i]));
  return roots;
}

Graph ToGraph(const EGraph& eg, const Choice& choice, const Graph& g, const std::vector<ClassId>& of_node) {
  const std::vector<ClassId> roots = RootsOf(eg, g, of_node);
  std::vector<ClassId> reached = Reached(eg, choice, roots);
  std::unordered_map<ClassId, bool> needed;
  for (ClassId c : reached) needed[c] = true;
  Graph out;
  std::unordered_map<ClassId, NodeId> made;
  std::function<NodeId(ClassId)> emit = [&](ClassId c) -> NodeId {
    c = eg.Find(c);
    if (auto it = made.find(c); it != made.end()) return it->second;
    const ENode& n = choice.at(c);
    std::vector<NodeId> in;
    for (ClassId k : n.inputs) in.push_back(emit(k));
    const NodeId id = out.Rebuild(n, in);
    made.emplace(c, id);
    return id;
  };
  for (NodeId i = 0; i < g.size(); ++i)  // the graph's own order first, so kernels keep their order
    if (needed.count(eg.Find(of_node[i]))) emit(of_node[i]);
  for (ClassId c : reached) emit(c);
  for (size_t k = 0; k < g.outputs().size(); ++k)
    out.MarkOutput(emit(of_node[g.outputs()[k]]), g.output_names()[k]);
  return out;
}

}  // namespace prism
