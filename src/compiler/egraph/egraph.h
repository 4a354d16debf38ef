// An e-graph over the primitive IR: hash-consed e-nodes in e-classes joined by union-find, congruence
// restored by rebuilding after merges, each class's dtype, shape and constant value kept as its data.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace prism {

using ClassId = int32_t;

// A node of the primitive IR whose operands are e-classes (Node::inputs hold class ids).
using ENode = Node;

struct EClass {
  std::vector<ENode> nodes;                        // canonical after Rebuild
  std::vector<std::pair<ENode, ClassId>> parents;  // nodes reading this class, as inserted, and their class
  DType dtype = DType::F32;
  std::vector<Expr> shape;
  std::optional<double> constant;  // a Constant's value (rounded to dtype) when the class holds one
  NodeId origin = -1;              // the lowest graph node in the class (-1: made by rewrites only)
};

class EGraph {
 public:
  // Every node of g as a class; of_node[i] is node i's class.
  static EGraph FromGraph(const Graph& g, std::vector<ClassId>* of_node);

  // The class of a node over canonical classes (hash-consed: an equal node is found, not added). dtype and
  // shape must be the node's own (see Make). Elementwise nodes over constant classes fold: their class also
  // holds the Constant the interpreter's rounding gives (the Graph builder's folding, as the class's data).
  ClassId Add(ENode n);
  // A node like `like` over classes `kids`, its dtype and shape inferred by the Graph builder's own checks;
  // nullopt where the builder rejects it (shapes or dtypes that do not allow the op).
  std::optional<ClassId> Make(const Node& like, const std::vector<ClassId>& kids);
  // A Constant of this value, dtype and shape.
  ClassId Constant(double value, DType dtype, const std::vector<Expr>& shape);

  ClassId Find(ClassId c) const;
  // Joins two classes (equal dtype and shape required); returns false when they were one already.
  bool Union(ClassId a, ClassId b);
  // Restores the invariants after unions: every node canonical, congruent nodes in one class.
  void Rebuild();

  const EClass& eclass(ClassId c) const { return classes_.at(Find(c)); }
  // Canonical class ids, ascending.
  std::vector<ClassId> Classes() const;
  size_t node_count() const { return memo_.size(); }
  size_t class_count() const { return live_; }
  // The rule that first put a node (by its canonical key) in the graph ("" for the graph's own nodes).
  const std::string& Origin(const ENode& n) const;
  void set_current_rule(const std::string& rule) { rule_ = rule; }
  std::string Key(const ENode& n) const;  // of the node with canonical operands

 private:
  ENode Canonical(ENode n) const;
  std::vector<EClass> classes_;
  mutable std::vector<ClassId> parent_;  // union-find
  std::unordered_map<std::string, ClassId> memo_;
  std::unordered_map<std::string, std::string> origin_rule_;
  std::vector<ClassId> pending_;
  size_t live_ = 0;
  std::string rule_;
};

}  // namespace prism
