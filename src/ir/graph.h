// The primitive IR: a DAG of primitive ops over tensors with symbolic shapes, plus persistent state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/dtype.h"
#include "ir/expr.h"

namespace prism {

enum class Op : uint8_t {
  // Leaves
  Input,     // a tensor supplied per run (activations, token ids, positions)
  Weight,    // a tensor bound once (parameters); may be block-quantized
  Constant,  // a scalar broadcast to a shape
  Iota,      // the index along one axis, as a value
  State,     // a persistent buffer that lives across runs (KV cache)
  // Unary
  Exp2, Log2, Sin, Sqrt, Recip, Cast,
  // Binary
  Add, Mul, Mod, LessThan, Max,
  // Ternary select (cond ? a : b); kept primitive because cond*a + (1-cond)*b breaks on inf/NaN
  Where,
  // Reductions over a list of axes (kept with size 1)
  SumReduce, MaxReduce,
  // Data-dependent indexing (torch.gather semantics along one axis)
  Gather,
  // Movement: views, pure index arithmetic, never a copy by themselves
  Reshape, Permute, Expand, Slice, Pad,
  // Writes a value into a state buffer in place at a symbolic offset along one axis
  StateWrite,
  // Writes row i of a value to row index[i] of a state buffer (axis 0): a paged KV cache's slots
  StateScatter,
};

std::string_view OpName(Op op);
bool IsUnary(Op op);
bool IsBinary(Op op);
bool IsReduce(Op op);
bool IsMovement(Op op);
bool IsElementwise(Op op);  // unary, binary, where, cast
bool WritesState(Op op);    // StateWrite, StateScatter: the node is its state buffer after the write

using NodeId = int32_t;

// An op's value on scalars, in double: the interpreter's semantics, and the constant folder's.
double ApplyUnary(Op op, double x);
double ApplyBinary(Op op, double a, double b);

struct Node {
  Op op;
  DType dtype;
  std::vector<Expr> shape;
  std::vector<NodeId> inputs;
  std::string name;            // Input/Weight/State name, or a label for printing
  double scalar = 0;           // Constant value
  std::vector<int64_t> axes;   // reduce axes, permutation, Iota/Gather/StateWrite axis (axes[0])
  std::vector<Expr> args;      // Slice: starts then steps; Pad: before then after; StateWrite: offset
};

// A graph owns its nodes; builder methods infer shape and dtype and throw prism::Error with a
// one-line message naming the op and the shapes on any mismatch. Building is also where the graph is
// simplified: a node equal to an existing one is that node (common subexpressions), ops on constants
// fold to constants (rounded as the interpreter rounds), and x * 1, x + 0 are x.
class Graph {
 public:
  NodeId Input(const std::string& name, DType dtype, std::vector<Expr> shape);
  NodeId Weight(const std::string& name, DType dtype, std::vector<Expr> shape);
  NodeId State(const std::string& name, DType dtype, std::vector<Expr> shape);
  NodeId Constant(double value, DType dtype, std::vector<Expr> shape = {});
  NodeId Iota(std::vector<Expr> shape, int64_t axis, DType dtype = DType::I32);
  NodeId Unary(Op op, NodeId x);
  NodeId Cast(NodeId x, DType dtype);
  // Binary ops require equal shapes (broadcasting is done with Expand by the frontend).
  NodeId Binary(Op op, NodeId a, NodeId b);
  NodeId Where(NodeId cond, NodeId a, NodeId b);
  NodeId Reduce(Op op, NodeId x, std::vector<int64_t> axes);
  NodeId Gather(NodeId src, NodeId index, int64_t axis);
  NodeId Reshape(NodeId x, std::vector<Expr> shape);
  NodeId Permute(NodeId x, std::vector<int64_t> perm);
  NodeId Expand(NodeId x, std::vector<Expr> shape);
  // Elements [start, start + step * size) along each axis; steps must be positive constants.
  NodeId Slice(NodeId x, std::vector<Expr> starts, std::vector<Expr> sizes, std::vector<Expr> steps = {});
  NodeId Pad(NodeId x, std::vector<Expr> before, std::vector<Expr> after);  // zero padding
  NodeId StateWrite(NodeId state, NodeId value, int64_t axis, Expr offset);
  // state[index[i], ...] = value[i, ...] for every row i of value; index is an integer [rows of value].
  // Indices outside the state clamp to its first or last row (as Gather's do): callers validate them.
  NodeId StateScatter(NodeId state, NodeId value, NodeId index);
  void MarkOutput(NodeId id, const std::string& name);
  // A node like `like` (its op, dtype, attributes) over other inputs, through the builder above (so inferred,
  // checked, folded and shared as any other): how a rewritten program is written back into a graph.
  NodeId Rebuild(const Node& like, const std::vector<NodeId>& inputs);

  const Node& node(NodeId id) const { return nodes_.at(id); }
  int32_t size() const { return (int32_t)nodes_.size(); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<NodeId>& outputs() const { return outputs_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  // Symbols used by any shape or argument, in first-use order.
  std::vector<std::string> Symbols() const;
  // A short description for messages: "Add#12 [2, seq, 64] f32".
  std::string Describe(NodeId id) const;
  // Human-readable listing, one node per line.
  std::string ToText() const;
  std::string ToDot() const;
  // True when x is a constant whose value (in its type) is `value`.
  bool IsConstant(NodeId x, double value) const;

 private:
  NodeId Add(Node n);
  void Check(NodeId id, const char* what) const;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, NodeId> interned_;  // NodeKey -> node, for common subexpressions
  std::vector<NodeId> outputs_;
  std::vector<std::string> output_names_;
};

// A weight made at bind time from stored ones: their rows one after another (every part [N_i, K] of one
// dtype, the whole [sum N_i, K]; quantized rows are whole blocks, so bytes concatenate). Rewrites that merge
// products over one input name such weights "cat(a,b,...)"; ConcatParts gives the parts back (empty for
// a stored weight's name).
std::string ConcatWeightName(const std::vector<std::string>& parts);
std::vector<std::string> ConcatParts(const std::string& name);

// Result dtype of arithmetic between a and b (float wins, wider wins).
DType PromoteTypes(DType a, DType b);

}  // namespace prism
