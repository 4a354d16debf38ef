// Graph construction with shape and dtype inference and one-line errors for bad arguments.
#include "ir/graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ir/error.h"
#include "ir/text_stream.h"

namespace prism {

std::string_view OpName(Op op) {
  static const char* names[] = {"Input", "Weight", "Constant", "Iota", "State", "Exp2", "Log2", "Sin",
                                "Sqrt", "Recip", "Cast", "Add", "Mul", "Mod", "LessThan", "Max", "Where",
                                "SumReduce", "MaxReduce", "Gather", "Reshape", "Permute", "Expand",
                                "Slice", "Pad", "StateWrite", "StateScatter"};
  return names[(int)op];
}

bool IsUnary(Op op) { return op >= Op::Exp2 && op <= Op::Cast; }
bool IsBinary(Op op) { return op >= Op::Add && op <= Op::Max; }
bool IsReduce(Op op) { return op == Op::SumReduce || op == Op::MaxReduce; }
bool IsMovement(Op op) { return op >= Op::Reshape && op <= Op::Pad; }
bool IsElementwise(Op op) { return IsUnary(op) || IsBinary(op) || op == Op::Where; }
bool WritesState(Op op) { return op == Op::StateWrite || op == Op::StateScatter; }

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool: return 0;
      case DType::U8: return 1;
      case DType::I8: return 2;
      case DType::I32: return 3;
      case DType::BF16: return 4;
      case DType::F16: return 5;
      default: return 6;  // f32 and quantized (which compute as f32)
    }
  };
  if ((a == DType::BF16 && b == DType::F16) || (a == DType::F16 && b == DType::BF16)) return DType::F32;
  DType r = rank(a) >= rank(b) ? a : b;
  return IsQuantized(r) ? DType::F32 : r;
}

double ApplyUnary(Op op, double x) {
  switch (op) {
    case Op::Exp2: return std::exp2(x);
    case Op::Log2: return std::log2(x);
    case Op::Sin: return std::sin(x);
    case Op::Sqrt: return std::sqrt(x);
    case Op::Recip: return 1.0 / x;
    default: return x;
  }
}

double ApplyBinary(Op op, double a, double b) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Mul: return a * b;
    case Op::Mod: return std::fmod(a, b);  // C semantics (sign of a), as the generated code
    case Op::LessThan: return a < b ? 1.0 : 0.0;
    case Op::Max: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    default: return 0;
  }
}

// Everything that makes a node what it is: equal keys, equal values (every op is a pure function of
// its operands, and two equal state writes write the same values).
static std::string NodeKey(const Node& n) {
  std::string key = std::to_string((int)n.op) + "|" + std::to_string((int)n.dtype) + "|" + ShapeStr(n.shape) + "|";
  for (NodeId i : n.inputs) key += std::to_string(i) + ",";
  char scalar[32];
  std::snprintf(scalar, sizeof scalar, "%a", n.scalar);  // exact, and NaN/inf spelled out
  key += std::string("|") + scalar + "|" + n.name + "|";
  for (int64_t a : n.axes) key += std::to_string(a) + ",";
  key += "|";
  for (const Expr& e : n.args) key += e.str() + ",";
  return key;
}

NodeId Graph::Add(Node n) {
  // Common subexpressions: a node equal to one already built is that node.
  std::string key = NodeKey(n);
  if (auto it = interned_.find(key); it != interned_.end()) return it->second;
  nodes_.push_back(std::move(n));
  const NodeId id = (NodeId)nodes_.size() - 1;
  interned_.emplace(std::move(key), id);
  return id;
}

bool Graph::IsConstant(NodeId x, double value) const {
  const Node& n = nodes_[x];
  return n.op == Op::Constant && RoundToDType(n.scalar, n.dtype) == value;
}

void Graph::Check(NodeId id, const char* what) const {
  if (id < 0 || id >= size()) throw Error(std::string(what) + ": no node #" + std::to_string(id));
}

std::string Graph::Describe(NodeId id) const {
  const Node& n = nodes_.at(id);
  std::string s = std::string(OpName(n.op)) + "#" + std::to_string(id);
  if (!n.name.empty()) s += "(" + n.name + ")";
  return s + " " + ShapeStr(n.shape) + " " + std::string(DTypeName(n.dtype));
}

static void CheckShape(const std::vector<Expr>& shape, const std::string& what) {
  for (const Expr& d : shape)
    if (d.IsConst() && d.value() < 0) throw Error(what + ": negative dimension in " + ShapeStr(shape));
}

static Node Leaf(Op op, const std::string& name, DType dtype, std::vector<Expr> shape) {
  CheckShape(shape, std::string(OpName(op)) + " '" + name + "'");
  Node n{op, dtype, std::move(shape), {}, name, 0, {}, {}};
  return n;
}

NodeId Graph::Input(const std::string& name, DType dtype, std::vector<Expr> shape) {
  return Add(Leaf(Op::Input, name, dtype, std::move(shape)));
}

NodeId Graph::Weight(const std::string& name, DType dtype, std::vector<Expr> shape) {
  if (IsQuantized(dtype) &&
      (shape.empty() || !shape.back().IsConst() || shape.back().value() % BlockElems(dtype)))
    throw Error("Weight '" + name + "': " + std::string(DTypeName(dtype)) +
                " needs a constant last dimension that is a multiple of " + std::to_string(BlockElems(dtype)) +
                ", got " + ShapeStr(shape));
  return Add(Leaf(Op::Weight, name, dtype, std::move(shape)));
}

NodeId Graph::State(const std::string& name, DType dtype, std::vector<Expr> shape) {
  return Add(Leaf(Op::State, name, dtype, std::move(shape)));
}

NodeId Graph::Constant(double value, DType dtype, std::vector<Expr> shape) {
  Node n = Leaf(Op::Constant, "", dtype, std::move(shape));
  n.scalar = value;
  return Add(std::move(n));
}

NodeId Graph::Iota(std::vector<Expr> shape, int64_t axis, DType dtype) {
  if (axis < 0 || axis >= (int64_t)shape.size())
    throw Error("Iota: axis " + std::to_string(axis) + " out of range for shape " + ShapeStr(shape));
  Node n = Leaf(Op::Iota, "", dtype, std::move(shape));
  n.axes = {axis};
  return Add(std::move(n));
}

NodeId Graph::Unary(Op op, NodeId x) {
  Check(x, "unary op");
  if (!IsUnary(op) || op == Op::Cast) throw Error(std::string(OpName(op)) + " is not a unary op");
  const Node& in = nodes_[x];
  DType t = in.dtype;
  if (IsQuantized(t) || IsInteger(t)) t = DType::F32;  // transcendental math is float math
  if (in.op == Op::Constant)  // folded, with the interpreter's rounding of operand and result
    return Constant(RoundToDType(ApplyUnary(op, RoundToDType(in.scalar, in.dtype)), t), t, in.shape);
  return Add(Node{op, t, in.shape, {x}, "", 0, {}, {}});
}

NodeId Graph::Cast(NodeId x, DType dtype) {
  Check(x, "Cast");
  if (IsQuantized(dtype)) throw Error("Cast to " + std::string(DTypeName(dtype)) + " of " + Describe(x) +
                                      ": quantized types are storage only");
  const Node& in = nodes_[x];
  if (in.op == Op::Constant) return Constant(RoundToDType(RoundToDType(in.scalar, in.dtype), dtype), dtype, in.shape);
  return Add(Node{Op::Cast, dtype, in.shape, {x}, "", 0, {}, {}});
}

static bool SameShape(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

NodeId Graph::Binary(Op op, NodeId a, NodeId b) {
  Check(a, "binary op");
  Check(b, "binary op");
  if (!IsBinary(op)) throw Error(std::string(OpName(op)) + " is not a binary op");
  if (!SameShape(nodes_[a].shape, nodes_[b].shape))
    throw Error(std::string(OpName(op)) + ": shape mismatch " + Describe(a) + " vs " + Describe(b));
  DType t = op == Op::LessThan ? DType::Bool : PromoteTypes(nodes_[a].dtype, nodes_[b].dtype);
  const Node &na = nodes_[a], &nb = nodes_[b];
  if (na.op == Op::Constant && nb.op == Op::Constant)  // folded, rounded as the interpreter rounds
    return Constant(
        RoundToDType(ApplyBinary(op, RoundToDType(na.scalar, na.dtype), RoundToDType(nb.scalar, nb.dtype)), t), t,
        na.shape);
  // x * 1 and x + 0 are x (when the result keeps x's type).
  const double identity = op == Op::Mul ? 1.0 : 0.0;
  if (op == Op::Mul || op == Op::Add) {
    if (IsConstant(b, identity) && na.dtype == t) return a;
    if (IsConstant(a, identity) && nb.dtype == t) return b;
  }
  return Add(Node{op, t, na.shape, {a, b}, "", 0, {}, {}});
}

NodeId Graph::Where(NodeId cond, NodeId a, NodeId b) {
  for (NodeId x : {cond, a, b}) Check(x, "Where");
  if (!SameShape(nodes_[cond].shape, nodes_[a].shape) || !SameShape(nodes_[a].shape, nodes_[b].shape))
    throw Error("Where: shape mismatch " + Describe(cond) + ", " + Describe(a) + ", " + Describe(b));
  return Add(Node{Op::Where, PromoteTypes(nodes_[a].dtype, nodes_[b].dtype), nodes_[a].shape, {cond, a, b},
                  "", 0, {}, {}});
}

NodeId Graph::Reduce(Op op, NodeId x, std::vector<int64_t> axes) {
  Check(x, "reduce");
  if (!IsReduce(op)) throw Error(std::string(OpName(op)) + " is not a reduction");
  std::vector<Expr> shape = nodes_[x].shape;
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= (int64_t)shape.size() || (i && axes[i] == axes[i - 1]))
      throw Error(std::string(OpName(op)) + ": bad axis " + std::to_string(axes[i]) + " for " + Describe(x));
    shape[axes[i]] = Expr(1);
  }
  DType t = nodes_[x].dtype;
  if (IsQuantized(t)) t = DType::F32;
  Node n{op, t, shape, {x}, "", 0, axes, {}};
  return Add(std::move(n));
}

NodeId Graph::Gather(NodeId src, NodeId index, int64_t axis) {
  Check(src, "Gather");
  Check(index, "Gather");
  const Node &s = nodes_[src], &ix = nodes_[index];
  if (!IsInteger(ix.dtype)) throw Error("Gather: index " + Describe(index) + " must have an integer dtype");
  if (s.shape.size() != ix.shape.size() || axis < 0 || axis >= (int64_t)s.shape.size())
    throw Error("Gather: rank or axis mismatch, source " + Describe(src) + ", index " + Describe(index) +
                ", axis " + std::to_string(axis));
  for (size_t i = 0; i < s.shape.size(); ++i)
    if ((int64_t)i != axis && s.shape[i] != ix.shape[i])
      throw Error("Gather: source " + Describe(src) + " and index " + Describe(index) +
                  " differ outside axis " + std::to_string(axis));
  DType t = IsQuantized(s.dtype) ? DType::F32 : s.dtype;
  return Add(Node{Op::Gather, t, ix.shape, {src, index}, "", 0, {axis}, {}});
}

NodeId Graph::Reshape(NodeId x, std::vector<Expr> shape) {
  Check(x, "Reshape");
  CheckShape(shape, "Reshape of " + Describe(x));
  Expr before = Product(nodes_[x].shape), after = Product(shape);
  Expr diff = before - after;
  if (diff.IsConst() && diff.value() != 0)
    throw Error("Reshape: " + Describe(x) + " has " + before.str() + " elements, target " + ShapeStr(shape) +
                " has " + after.str());
  if (!diff.IsConst()) {
    // Symbolic sizes that cannot be proven equal: require the same symbolic factors by division.
    Expr q = before / after;
    if (!(q.IsConst(1) && (before % after).IsConst(0)))
      throw Error("Reshape: cannot prove " + Describe(x) + " and " + ShapeStr(shape) + " have equal sizes");
  }
  Node n{Op::Reshape, nodes_[x].dtype, std::move(shape), {x}, "", 0, {}, {}};
  return Add(std::move(n));
}

NodeId Graph::Permute(NodeId x, std::vector<int64_t> perm) {
  Check(x, "Permute");
  const auto& in = nodes_[x].shape;
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = perm.size() == in.size();
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == (int64_t)i;
  if (!ok) {
    std::string p;
    for (auto v : perm) p += (p.empty() ? "" : ",") + std::to_string(v);
    throw Error("Permute: (" + p + ") is not a permutation of the axes of " + Describe(x));
  }
  std::vector<Expr> shape;
  for (int64_t a : perm) shape.push_back(in[a]);
  return Add(Node{Op::Permute, nodes_[x].dtype, shape, {x}, "", 0, perm, {}});
}

NodeId Graph::Expand(NodeId x, std::vector<Expr> shape) {
  Check(x, "Expand");
  const auto& in = nodes_[x].shape;
  if (in.size() != shape.size()) throw Error("Expand: " + Describe(x) + " to " + ShapeStr(shape) + ": rank differs");
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != shape[i] && !in[i].IsConst(1))
      throw Error("Expand: " + Describe(x) + " to " + ShapeStr(shape) + ": axis " + std::to_string(i) +
                  " is neither equal nor 1");
  return Add(Node{Op::Expand, nodes_[x].dtype, std::move(shape), {x}, "", 0, {}, {}});
}

NodeId Graph::Slice(NodeId x, std::vector<Expr> starts, std::vector<Expr> sizes, std::vector<Expr> steps) {
  Check(x, "Slice");
  const auto& in = nodes_[x].shape;
  if (steps.empty()) steps.assign(in.size(), Expr(1));
  if (starts.size() != in.size() || sizes.size() != in.size() || steps.size() != in.size())
    throw Error("Slice of " + Describe(x) + ": need one start, size and step per axis");
  for (size_t i = 0; i < in.size(); ++i) {
    if (!steps[i].IsConst() || steps[i].value() < 1)
      throw Error("Slice of " + Describe(x) + ": step on axis " + std::to_string(i) + " must be a positive constant");
    // The last element read, start + step*(size-1), must lie inside the axis when it can be checked.
    Expr last = starts[i] + steps[i] * (sizes[i] - Expr(1));
    Expr room = in[i] - Expr(1) - last;
    bool bad = (starts[i].IsConst() && starts[i].value() < 0) || (room.IsConst() && room.value() < 0 &&
                                                                  !(sizes[i].IsConst(0)));
    if (bad)
      throw Error("Slice of " + Describe(x) + ": axis " + std::to_string(i) + " range start " + starts[i].str() +
                  ", size " + sizes[i].str() + ", step " + steps[i].str() + " is out of bounds");
  }
  Node n{Op::Slice, nodes_[x].dtype, sizes, {x}, "", 0, {}, starts};
  n.args.insert(n.args.end(), steps.begin(), steps.end());
  return Add(std::move(n));
}

NodeId Graph::Pad(NodeId x, std::vector<Expr> before, std::vector<Expr> after) {
  Check(x, "Pad");
  const auto& in = nodes_[x].shape;
  if (before.size() != in.size() || after.size() != in.size())
    throw Error("Pad of " + Describe(x) + ": need one before/after pair per axis");
  std::vector<Expr> shape;
  for (size_t i = 0; i < in.size(); ++i) {
    if ((before[i].IsConst() && before[i].value() < 0) || (after[i].IsConst() && after[i].value() < 0))
      throw Error("Pad of " + Describe(x) + ": negative padding on axis " + std::to_string(i));
    shape.push_back(before[i] + in[i] + after[i]);
  }
  Node n{Op::Pad, nodes_[x].dtype, shape, {x}, "", 0, {}, before};
  n.args.insert(n.args.end(), after.begin(), after.end());
  return Add(std::move(n));
}

NodeId Graph::StateWrite(NodeId state, NodeId value, int64_t axis, Expr offset) {
  Check(state, "StateWrite");
  Check(value, "StateWrite");
  const Node &s = nodes_[state], &v = nodes_[value];
  if (s.op != Op::State && !WritesState(s.op))
    throw Error("StateWrite: target " + Describe(state) + " is not a state buffer");
  if (s.shape.size() != v.shape.size() || axis < 0 || axis >= (int64_t)s.shape.size())
    throw Error("StateWrite: value " + Describe(value) + " does not fit state " + Describe(state));
  for (size_t i = 0; i < s.shape.size(); ++i)
    if ((int64_t)i != axis && s.shape[i] != v.shape[i])
      throw Error("StateWrite: value " + Describe(value) + " differs from state " + Describe(state) +
                  " on axis " + std::to_string(i));
  return Add(Node{Op::StateWrite, s.dtype, s.shape, {state, value}, s.name, 0, {axis}, {offset}});
}

NodeId Graph::StateScatter(NodeId state, NodeId value, NodeId index) {
  Check(state, "StateScatter");
  Check(value, "StateScatter");
  Check(index, "StateScatter");
  const Node &s = nodes_[state], &v = nodes_[value], &ix = nodes_[index];
  if (s.op != Op::State && !WritesState(s.op))
    throw Error("StateScatter: target " + Describe(state) + " is not a state buffer");
  if (!IsInteger(ix.dtype) || ix.shape.size() != 1 || v.shape.empty() || ix.shape[0] != v.shape[0])
    throw Error("StateScatter: index " + Describe(index) + " must be an integer vector of value " +
                Describe(value) + "'s rows");
  if (s.shape.size() != v.shape.size() || !std::equal(s.shape.begin() + 1, s.shape.end(), v.shape.begin() + 1))
    throw Error("StateScatter: rows of value " + Describe(value) + " differ from rows of state " +
                Describe(state));
  return Add(Node{Op::StateScatter, s.dtype, s.shape, {state, value, index}, s.name, 0, {0}, {}});
}

void Graph::MarkOutput(NodeId id, const std::string& name) {
  Check(id, "MarkOutput");
  outputs_.push_back(id);
  output_names_.push_back(name);
}

NodeId Graph::Rebuild(const Node& n, const std::vector<NodeId>& in) {
  const size_t rank = n.shape.size();
  auto half = [&](size_t k) {
    return std::vector<Expr>(n.args.begin() + (k ? n.args.size() / 2 : 0),
                             n.args.begin() + (k ? n.args.size() : n.args.size() / 2));
  };
  switch (n.op) {
    case Op::Input: return Input(n.name, n.dtype, n.shape);
    case Op::Weight: return Weight(n.name, n.dtype, n.shape);
    case Op::State: return State(n.name, n.dtype, n.shape);
    case Op::Constant: return Constant(n.scalar, n.dtype, n.shape);
    case Op::Iota: return Iota(n.shape, n.axes.at(0), n.dtype);
    case Op::Cast: return Cast(in.at(0), n.dtype);
    case Op::Where: return Where(in.at(0), in.at(1), in.at(2));
    case Op::SumReduce:
    case Op::MaxReduce: return Reduce(n.op, in.at(0), n.axes);
    case Op::Gather: return Gather(in.at(0), in.at(1), n.axes.at(0));
    case Op::Reshape: return Reshape(in.at(0), n.shape);
    case Op::Permute: return Permute(in.at(0), n.axes);
    case Op::Expand: return Expand(in.at(0), n.shape);
    case Op::Slice:
      if (n.args.size() != 2 * rank) throw Error("Rebuild: Slice needs starts and steps per axis");
      return Slice(in.at(0), half(0), n.shape, half(1));
    case Op::Pad: return Pad(in.at(0), half(0), half(1));
    case Op::StateWrite: return StateWrite(in.at(0), in.at(1), n.axes.at(0), n.args.at(0));
    case Op::StateScatter: return StateScatter(in.at(0), in.at(1), in.at(2));
    default:
      if (IsUnary(n.op)) return Unary(n.op, in.at(0));
      if (IsBinary(n.op)) return Binary(n.op, in.at(0), in.at(1));
  }
  throw Error("Rebuild: unknown op " + std::string(OpName(n.op)));
}

std::string ConcatWeightName(const std::vector<std::string>& parts) {
  std::string s = "cat(";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? "," : "") + parts[i];
  return s + ")";
}

std::vector<std::string> ConcatParts(const std::string& name) {
  if (name.size() < 5 || name.rfind("cat(", 0) != 0 || name.back() != ')') return {};
  std::vector<std::string> parts(1);
  for (size_t i = 4; i + 1 < name.size(); ++i) {
    if (name[i] == ',')
      parts.emplace_back();
    else
      parts.back() += name[i];
  }
  return parts;
}

std::vector<std::string> Graph::Symbols() const {
  std::vector<std::string> syms;
  for (const Node& n : nodes_) {
    for (const Expr& d : n.shape) d.CollectSymbols(&syms);
    for (const Expr& a : n.args) a.CollectSymbols(&syms);
  }
  return syms;
}

std::string Graph::ToText() const {
  TextStream os;
  for (NodeId i = 0; i < size(); ++i) {
    const Node& n = nodes_[i];
    os << "%" << i << " = " << OpName(n.op);
    if (!n.name.empty()) os << " '" << n.name << "'";
    if (n.op == Op::Constant) os << " " << n.scalar;
    for (NodeId x : n.inputs) os << " %" << x;
    if (!n.axes.empty()) {
      os << " axes=(";
      for (size_t k = 0; k < n.axes.size(); ++k) os << (k ? "," : "") << n.axes[k];
      os << ")";
    }
    if (!n.args.empty()) os << " args=" << ShapeStr(n.args);
    os << " : " << ShapeStr(n.shape) << " " << DTypeName(n.dtype) << "\n";
  }
  for (size_t k = 0; k < outputs_.size(); ++k) os << "output '" << output_names_[k] << "' = %" << outputs_[k] << "\n";
  return os.str();
}

std::string Graph::ToDot() const {
  TextStream os;
  os << "digraph prism {\n  node [shape=box, fontname=monospace];\n";
  for (NodeId i = 0; i < size(); ++i) {
    const Node& n = nodes_[i];
    const char* color = IsMovement(n.op) ? "lightgrey" : IsReduce(n.op) ? "lightblue"
                        : (n.op == Op::Input || n.op == Op::Weight || n.op == Op::State) ? "khaki" : "white";
    os << "  n" << i << " [label=\"%" << i << " " << OpName(n.op) << (n.name.empty() ? "" : " " + n.name) << "\\n"
       << ShapeStr(n.shape) << " " << DTypeName(n.dtype) << "\", style=filled, fillcolor=" << color << "];\n";
    for (NodeId x : n.inputs) os << "  n" << x << " -> n" << i << ";\n";
  }
  for (size_t k = 0; k < outputs_.size(); ++k)
    os << "  out" << k << " [label=\"" << output_names_[k] << "\", shape=oval];\n  n" << outputs_[k] << " -> out"
       << k << ";\n";
  os << "}\n";
  return os.str();
}

}  // namespace prism
