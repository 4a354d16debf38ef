// The e-graph: hash-consing, union-find, congruence closure by deferred rebuilding, constant folding as data.
#include "compiler/egraph/egraph.h"

#include <algorithm>
#include <cstdio>

#include "ir/error.h"

namespace prism {

std::string EGraph::Key(const ENode& n) const {
  std::string key =
      std::to_string((int)n.op) + "|" + std::to_string((int)n.dtype) + "|" + ShapeStr(n.shape) + "|";
  for (ClassId c : n.inputs) key += std::to_string(Find(c)) + ",";
  char scalar[32];
  std::snprintf(scalar, sizeof scalar, "%a", n.scalar);
  key += std::string("|") + scalar + "|" + n.name + "|";
  for (int64_t a : n.axes) key += std::to_string(a) + ",";
  key += "|";
  for (const Expr& e : n.args) key += e.str() + ",";
  return key;
}

ClassId EGraph::Find(ClassId c) const {
  ClassId root = c;
  while (parent_[root] != root) root = parent_[root];
  while (parent_[c] != root) {  // path compression
    const ClassId next = parent_[c];
    parent_[c] = root;
    c = next;
  }
  return root;
}

ENode EGraph::Canonical(ENode n) const {
  for (ClassId& c : n.inputs) c = Find(c);
  return n;
}

const std::string& EGraph::Origin(const ENode& n) const {
  static const std::string none;
  auto it = origin_rule_.find(Key(n));
  return it == origin_rule_.end() ? none : it->second;
}

ClassId EGraph::Add(ENode n) {
  n = Canonical(std::move(n));
  std::string key = Key(n);
  if (auto it = memo_.find(key); it != memo_.end()) return Find(it->second);
  const ClassId id = (ClassId)classes_.size();
  EClass c;
  c.dtype = n.dtype;
  c.shape = n.shape;
  if (n.op == Op::Constant) c.constant = RoundToDType(n.scalar, n.dtype);
  for (ClassId k : n.inputs) classes_[k].parents.push_back({n, id});
  // Folding: an elementwise node over constants is also the constant the interpreter computes.
  std::optional<double> folded;
  auto kc = [&](size_t i) { return classes_[n.inputs[i]].constant; };
  bool all_const = !n.inputs.empty() && (IsElementwise(n.op) || n.op == Op::Cast);
  for (size_t i = 0; all_const && i < n.inputs.size(); ++i) all_const = kc(i).has_value();
  if (all_const) {
    if (n.op == Op::Cast)
      folded = RoundToDType(*kc(0), n.dtype);
    else if (n.op == Op::Where)
      folded = RoundToDType(*kc(0) != 0 ? *kc(1) : *kc(2), n.dtype);
    else if (IsUnary(n.op))
      folded = RoundToDType(ApplyUnary(n.op, *kc(0)), n.dtype);
    else
      folded = RoundToDType(ApplyBinary(n.op, *kc(0), *kc(1)), n.dtype);
  }
  c.nodes.push_back(n);
  classes_.push_back(std::move(c));
  parent_.push_back(id);
  ++live_;
  if (!rule_.empty()) origin_rule_.emplace(key, rule_);
  memo_.emplace(std::move(key), id);
  if (folded) {
    const ClassId k = Constant(*folded, n.dtype, n.shape);
    Union(id, k);
    return Find(id);
  }
  return id;
}

ClassId EGraph::Constant(double value, DType dtype, const std::vector<Expr>& shape) {
  ENode n{Op::Constant, dtype, shape, {}, "", value, {}, {}};
  return Add(std::move(n));
}

std::optional<ClassId> EGraph::Make(const Node& like, const std::vector<ClassId>& kids) {
  Graph scratch;
  std::vector<NodeId> in;
  for (size_t i = 0; i < kids.size(); ++i) {
    const EClass& k = eclass(kids[i]);
    // A state operand stays a state (StateWrite checks its target); everything else is an input.
    in.push_back(k.nodes.front().op == Op::State || WritesState(k.nodes.front().op)
                     ? scratch.State("s" + std::to_string(i), k.dtype, k.shape)
                     : scratch.Input("k" + std::to_string(i), k.dtype, k.shape));
  }
  NodeId id;
  try {
    id = scratch.Rebuild(like, in);
  } catch (const Error&) {
    return std::nullopt;
  }
  const Node& made = scratch.node(id);
  if (made.op != like.op) return std::nullopt;  // the builder simplified it (x * 1): not this node
  ENode n = made;
  n.inputs.clear();
  for (NodeId x : made.inputs)
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i] == x) {
        n.inputs.push_back(kids[i]);
        break;
      }
  if (n.inputs.size() != made.inputs.size()) return std::nullopt;
  return Add(std::move(n));
}

bool EGraph::Union(ClassId a, ClassId b) {
  a = Find(a), b = Find(b);
  if (a == b) return false;
  EClass &ca = classes_[a], &cb = classes_[b];
  if (ca.dtype != cb.dtype || ca.shape != cb.shape)
    throw Error("e-graph: union of classes " + ShapeStr(ca.shape) + " " + std::string(DTypeName(ca.dtype)) +
                " and " + ShapeStr(cb.shape) + " " + std::string(DTypeName(cb.dtype)));
  if (ca.nodes.size() + ca.parents.size() < cb.nodes.size() + cb.parents.size()) std::swap(a, b);
  EClass &into = classes_[a], &from = classes_[b];
  parent_[b] = a;
  --live_;
  into.nodes.insert(into.nodes.end(), from.nodes.begin(), from.nodes.end());
  into.parents.insert(into.parents.end(), from.parents.begin(), from.parents.end());
  if (!into.constant) into.constant = from.constant;
  if (into.origin < 0 || (from.origin >= 0 && from.origin < into.origin)) into.origin = from.origin;
  from.nodes.clear();
  from.parents.clear();
  pending_.push_back(a);
  return true;
}

void EGraph::Rebuild() {
  while (!pending_.empty()) {
    std::vector<ClassId> todo;
    for (ClassId c : pending_) todo.push_back(Find(c));
    pending_.clear();
    std::sort(todo.begin(), todo.end());
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
    for (ClassId c : todo) {
      c = Find(c);
      // Re-key every parent under canonical operands; parents that became equal are one class.
      std::vector<std::pair<ENode, ClassId>> parents = std::move(classes_[c].parents);
      classes_[c].parents.clear();
      std::map<std::string, size_t> seen;
      std::vector<std::pair<ENode, ClassId>> kept;
      for (auto& [node, cls] : parents) {
        memo_.erase(Key(node));
        ENode canon = Canonical(node);
        std::string key = Key(canon);
        if (auto it = seen.find(key); it != seen.end()) {
          Union(kept[it->second].second, cls);
          continue;
        }
        memo_[key] = Find(cls);
        seen.emplace(key, kept.size());
        kept.push_back({std::move(canon), Find(cls)});
      }
      ClassId now = Find(c);
      auto& ps = classes_[now].parents;
      ps.insert(ps.end(), kept.begin(), kept.end());
    }
  }
  // Canonical, distinct nodes in every class.
  for (ClassId c = 0; c < (ClassId)classes_.size(); ++c) {
    if (Find(c) != c) continue;
    std::map<std::string, ENode> distinct;
    for (ENode& n : classes_[c].nodes) {
      ENode canon = Canonical(n);
      distinct.emplace(Key(canon), std::move(canon));
    }
    classes_[c].nodes.clear();
    for (auto& [k, n] : distinct) classes_[c].nodes.push_back(std::move(n));
  }
}

std::vector<ClassId> EGraph::Classes() const {
  std::vector<ClassId> out;
  for (ClassId c = 0; c < (ClassId)classes_.size(); ++c)
    if (Find(c) == c) out.push_back(c);
  return out;
}

EGraph EGraph::FromGraph(const Graph& g, std::vector<ClassId>* of_node) {
  EGraph eg;
  of_node->assign(g.size(), -1);
  for (NodeId i = 0; i < g.size(); ++i) {
    ENode n = g.node(i);
    for (NodeId& x : n.inputs) x = (*of_node)[x];
    const ClassId c = eg.Add(std::move(n));
    (*of_node)[i] = c;
    EClass& cls = eg.classes_[eg.Find(c)];
    if (cls.origin < 0) cls.origin = i;
  }
  return eg;
}

}  // namespace prism
