// Extraction: a program chosen out of the e-graph (one node per class reached from the outputs), costed by a
// roofline model at one bucket's sizes, and written back into a Graph.
#pragma once

#include <functional>
#include <unordered_map>
#include <vector>

#include "compiler/egraph/egraph.h"
#include "ir/host_tensor.h"

namespace prism {

// Seconds a node adds to a step, at `sizes`: a reduction or state write starts a kernel; a product streams
// its weight; elementwise work is per element; views are free. It ranks candidates for timing, never decides.
struct CostModel {
  SymbolBindings sizes;  // symbols not bound count as 64
  double launch_seconds = 2e-6;
  double read_bytes_per_second = 20e9;
  double flops_per_second = 100e9;  // a reduction's multiply-adds
  double element_seconds = 2e-10;   // an elementwise op's, per element (memory-bound, unvectorized)
  double NodeSeconds(const EGraph& eg, const ENode& n) const;
};

using NodeCost = std::function<double(const ENode&)>;
using Choice = std::unordered_map<ClassId, ENode>;  // canonical class -> its node

// Per class, the node of least tree cost (a node's own cost plus its operands'), found as a fixed point;
// ties go to the graph's own nodes over rewrites'. Every class with a finite cost gets a node.
Choice ExtractBest(const EGraph& eg, const NodeCost& cost);
// The graph as written: every class takes its lowest original node.
Choice WrittenChoice(const EGraph& eg, const Graph& g, const std::vector<ClassId>& of_node);
// The cost of the program a choice gives: each class reached from the roots counted once.
double DagCost(const EGraph& eg, const Choice& choice, const std::vector<ClassId>& roots,
               const NodeCost& cost);
// The classes reached from the roots under a choice; throws prism::Error on a cycle.
std::vector<ClassId> Reached(const EGraph& eg, const Choice& choice, const std::vector<ClassId>& roots);
// The roots of a graph's program: its outputs, then its state writes (kept even when nothing reads them).
std::vector<ClassId> RootsOf(const EGraph& eg, const Graph& g, const std::vector<ClassId>& of_node);
// The chosen program as a Graph with g's outputs: classes holding g's nodes are written in g's order, new
// ones where first needed.
Graph ToGraph(const EGraph& eg, const Choice& choice, const Graph& g, const std::vector<ClassId>& of_node);

}  // namespace prism
