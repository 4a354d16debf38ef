// Prism's rewrite rules: the table (algebra, exp2/log2 and recip/sqrt identities, views through elementwise
// ops), then the rules whose right side is computed (reductions joined or split, products merged).
#include "compiler/egraph/rules.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "ir/error.h"

namespace prism {

namespace {

// What stays a matcher, and why: the template GEMM (compiler/fusion.cpp, MatchLinear, and its epilogue) and
// fused attention (compiler/attention_match.cpp) choose how a value is computed, not which value: the IR has
// no Gemm or Attention op for a rule's right side to build, so they run on the extracted program at lowering.
// A rule for them needs those ops (or template annotations as e-nodes) in the IR first.
//
// Every rule is checked for soundness on random inputs of random shapes (tests/egraph_test.cpp). Left out,
// and why: x * 0 => 0 (inf * 0 is NaN), log2(a * b) => log2 a + log2 b (NaN for two negative factors
// whose product is positive), x + -x => 0 (inf - inf). Constant folding is the e-graph's class data and
// common subexpressions its hash-consing: neither needs a rule.
//
// Families: a line with {V} repeats for every view (Reshape, Permute, Expand), {B} for every binary op
// that views commute with (Add, Mul, Max), {U} for every unary op (Exp2, Log2, Sin, Sqrt, Recip).
const char* kTable = R"(
add-commute:        (Add ?a ?b) => (Add ?b ?a)
mul-commute:        (Mul ?a ?b) => (Mul ?b ?a)
max-commute:        (Max ?a ?b) => (Max ?b ?a)
add-assoc:          (Add (Add ?a ?b) ?c) => (Add ?a (Add ?b ?c))
mul-assoc:          (Mul (Mul ?a ?b) ?c) => (Mul ?a (Mul ?b ?c))
max-assoc:          (Max (Max ?a ?b) ?c) => (Max ?a (Max ?b ?c))
mul-factor:         (Add (Mul ?a ?c) (Mul ?b ?c)) => (Mul (Add ?a ?b) ?c)
mul-distribute:     (Mul (Add ?a ?b) ?c) => (Add (Mul ?a ?c) (Mul ?b ?c))
add-zero:           (Add ?a 0) => ?a
mul-one:            (Mul ?a 1) => ?a
max-self:           (Max ?a ?a) => ?a
exp2-log2:          (Exp2 (Log2 ?a)) => ?a
log2-exp2:          (Log2 (Exp2 ?a)) => ?a
exp2-of-sum:        (Exp2 (Add ?a ?b)) => (Mul (Exp2 ?a) (Exp2 ?b))
exp2-product:       (Mul (Exp2 ?a) (Exp2 ?b)) => (Exp2 (Add ?a ?b))
recip-recip:        (Recip (Recip ?a)) => ?a
recip-sqrt:         (Recip (Sqrt ?a)) => (Sqrt (Recip ?a))
sqrt-recip:         (Sqrt (Recip ?a)) => (Recip (Sqrt ?a))
recip-product:      (Recip (Mul ?a ?b)) => (Mul (Recip ?a) (Recip ?b))
sqrt-squared:       (Mul (Sqrt ?a) (Sqrt ?a)) => ?a
sum-of-scaled:      (SumReduce:r (Mul ?a (Expand:e ?c))) => (Mul (SumReduce:r ?a) ?c)
view-sink-{V}-{B}:  ({V}:v ({B} ?a ?b)) => ({B} ({V}:v ?a) ({V}:v ?b))
view-hoist-{V}-{B}: ({B} ({V}:v ?a) ({V}:v ?b)) => ({V}:v ({B} ?a ?b)) if same-shape ?a ?b
view-sink-{V}-{U}:  ({V}:v ({U} ?a)) => ({U} ({V}:v ?a))
view-hoist-{V}-{U}: ({U} ({V}:v ?a)) => ({V}:v ({U} ?a))
)";

const std::vector<std::string> kViews = {"Reshape", "Permute", "Expand"};
const std::vector<std::string> kBinary = {"Add", "Mul", "Max"};
const std::vector<std::string> kUnary = {"Exp2", "Log2", "Sin", "Sqrt", "Recip"};

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// One table line per member of its families.
std::vector<std::string> Expand(const std::string& line) {
  std::vector<std::string> out{line};
  for (auto& [key, values] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"{V}", kViews}, {"{B}", kBinary}, {"{U}", kUnary}}) {
    if (line.find(key) == std::string::npos) continue;
    std::vector<std::string> next;
    for (const std::string& l : out)
      for (const std::string& v : values) next.push_back(ReplaceAll(l, key, v));
    out = std::move(next);
  }
  return out;
}

// The one node of `op` in a class, if it has one (the first in the class's fixed order).
const ENode* NodeOf(const EGraph& eg, ClassId c, Op op) {
  for (const ENode& n : eg.eclass(c).nodes)
    if (n.op == op) return &n;
  return nullptr;
}

// SumReduce(SumReduce(x, b), a) is SumReduce(x, a ∪ b), and the same for MaxReduce: axes are kept with
// size 1, so the union is the whole reduction. A code rule: the right side's axes are computed.
size_t ReduceJoin(EGraph& eg, std::vector<Joint>*) {
  std::vector<std::pair<ClassId, Node>> todo;
  for (ClassId c : eg.Classes())
    for (const ENode& n : eg.eclass(c).nodes) {
      if (!IsReduce(n.op)) continue;
      for (const ENode& inner : eg.eclass(n.inputs[0]).nodes) {
        if (inner.op != n.op) continue;
        Node joined = n;
        joined.inputs = inner.inputs;
        joined.axes.insert(joined.axes.end(), inner.axes.begin(), inner.axes.end());
        std::sort(joined.axes.begin(), joined.axes.end());
        joined.axes.erase(std::unique(joined.axes.begin(), joined.axes.end()), joined.axes.end());
        todo.push_back({c, joined});
      }
    }
  size_t unions = 0;
  for (auto& [c, n] : todo)
    if (auto r = eg.Make(n, n.inputs)) unions += eg.Union(c, *r);
  return unions;
}

// A reduction over several axes as one over its first axis, then one over the rest (a split another
// device or schedule may prefer). A code rule: the two reductions' axes are computed.
size_t ReduceSplit(EGraph& eg, std::vector<Joint>*) {
  std::vector<std::pair<ClassId, Node>> todo;
  for (ClassId c : eg.Classes())
    for (const ENode& n : eg.eclass(c).nodes)
      if (IsReduce(n.op) && n.axes.size() >= 2) todo.push_back({c, n});
  size_t unions = 0;
  for (auto& [c, n] : todo) {
    Node first = n, rest = n;
    first.axes = {n.axes[0]};
    rest.axes.erase(rest.axes.begin());
    auto inner = eg.Make(first, n.inputs);
    if (!inner) continue;
    if (auto r = eg.Make(rest, {*inner})) unions += eg.Union(c, *r);
  }
  return unions;
}

// One product x · Wᵀ: SumReduce over the last axis of Mul(Expand(Reshape(x)), Expand(Reshape(W))), with W a
// stored weight [N, K] (either operand order).
struct LinearSite {
  ClassId cls, x_view;  // the product's class; Reshape(x) to [..., 1, K]
  int side;             // which Mul operand is the weight
  ENode weight;
  std::optional<ENode> cast;  // between the weight and its view
  ENode weight_view, mul, reduce;
  int64_t n, k;
};

std::optional<LinearSite> AsLinear(const EGraph& eg, ClassId c, const ENode& r) {
  if (r.op != Op::SumReduce || r.dtype != DType::F32 || r.axes.size() != 1 ||
      r.axes[0] != (int64_t)r.shape.size() - 1 || r.shape.size() < 2)
    return std::nullopt;
  const ENode* mul = NodeOf(eg, r.inputs[0], Op::Mul);
  if (!mul) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const ENode* we = NodeOf(eg, mul->inputs[side], Op::Expand);
    const ENode* wr = we ? NodeOf(eg, we->inputs[0], Op::Reshape) : nullptr;
    const ENode* cast = wr ? NodeOf(eg, wr->inputs[0], Op::Cast) : nullptr;  // a bf16 weight read as f32
    const ENode* w = wr ? NodeOf(eg, cast ? cast->inputs[0] : wr->inputs[0], Op::Weight) : nullptr;
    const ENode* xe = NodeOf(eg, mul->inputs[1 - side], Op::Expand);
    const ENode* xr = xe ? NodeOf(eg, xe->inputs[0], Op::Reshape) : nullptr;
    if (!w || !xr || w->shape.size() != 2 || !w->shape[0].IsConst() || !w->shape[1].IsConst()) continue;
    if (!ConcatParts(w->name).empty() || w->name.find_first_of("(),") != std::string::npos) continue;
    if (xr->shape.size() != mul->shape.size() || !xr->shape[xr->shape.size() - 2].IsConst(1)) continue;
    return LinearSite{eg.Find(c),
                      eg.Find(xe->inputs[0]),
                      side,
                      *w,
                      cast ? std::optional<ENode>(*cast) : std::nullopt,
                      *wr,
                      *mul,
                      r,
                      w->shape[0].value(),
                      w->shape[1].value()};
  }
  return std::nullopt;
}

// Products that read the same input merged into one over their weights' rows concatenated (q/k/v,
// gate/up): each product is then a slice of the merged one. A code rule: it rewrites several classes at
// once (a joint: extraction takes every slice or none) and names a weight made at bind time.
size_t MergeLinears(EGraph& eg, std::vector<Joint>* joints) {
  std::map<std::tuple<ClassId, int, int64_t>, std::vector<LinearSite>> groups;
  for (ClassId c : eg.Classes())
    for (const ENode& n : eg.eclass(c).nodes)
      if (auto s = AsLinear(eg, c, n)) {
        auto& g = groups[{s->x_view, (int)s->weight.dtype, s->k}];
        const bool dup = std::any_of(g.begin(), g.end(), [&](const LinearSite& o) {
          return o.cls == s->cls || o.weight.name == s->weight.name;
        });
        if (!dup) g.push_back(*s);
        break;
      }
  size_t unions = 0;
  for (auto& [key, sites] : groups) {
    if (sites.size() < 2) continue;
    std::sort(sites.begin(), sites.end(), [&](const LinearSite& a, const LinearSite& b) {
      return eg.eclass(a.cls).origin < eg.eclass(b.cls).origin;
    });
    int64_t total = 0;
    std::vector<std::string> names;
    for (const LinearSite& s : sites) total += s.n, names.push_back(s.weight.name);
    const LinearSite& first = sites[0];
    const size_t rank = first.mul.shape.size();
    ENode w = first.weight;
    w.name = ConcatWeightName(names);
    w.shape[0] = total;
    const ClassId wc = eg.Add(w);
    Node wr = first.weight_view, expand{}, mul = first.mul, reduce = first.reduce;
    wr.shape[wr.shape.size() - 2] = total;
    expand.op = Op::Expand;
    expand.shape = first.mul.shape;
    expand.shape[rank - 2] = total;
    std::optional<ClassId> wcast = wc;
    if (first.cast) wcast = eg.Make(*first.cast, {wc});
    if (!wcast) continue;
    std::optional<ClassId> wv = eg.Make(wr, {*wcast}), we, xe = eg.Make(expand, {first.x_view}), m, p;
    if (wv) we = eg.Make(expand, {*wv});
    if (!we || !xe) continue;
    m = eg.Make(mul, first.side == 1 ? std::vector<ClassId>{*xe, *we} : std::vector<ClassId>{*we, *xe});
    if (m) p = eg.Make(reduce, {*m});
    if (!p) continue;
    Joint joint{"merge-linears", "", {}};
    int64_t offset = 0;
    bool changed = false;
    for (const LinearSite& s : sites) {
      Node slice{};
      slice.op = Op::Slice;
      slice.shape = s.reduce.shape;
      std::vector<Expr> starts(rank, Expr(0)), steps(rank, Expr(1));
      starts[rank - 2] = offset;
      slice.args = starts;
      slice.args.insert(slice.args.end(), steps.begin(), steps.end());
      offset += s.n;
      auto sc = eg.Make(slice, {*p});
      if (!sc) break;
      ENode made = *NodeOf(eg, *sc, Op::Slice);
      changed |= eg.Union(s.cls, *sc);
      joint.members.push_back({s.cls, made});
    }
    if (joint.members.size() != sites.size() || !changed) continue;
    std::string parts;
    for (const std::string& n : names) {
      const size_t dot = n.rfind(".weight");
      std::string shortname = dot == std::string::npos ? n : n.substr(0, dot);
      shortname = shortname.substr(shortname.rfind('.') == std::string::npos ? 0 : shortname.rfind('.') + 1);
      parts += (parts.empty() ? "" : ", ") + shortname;
    }
    joint.what = std::to_string(sites.size()) + " GEMMs -> 1 (" + parts + ")";
    joints->push_back(std::move(joint));
    ++unions;
  }
  return unions;
}

}  // namespace

std::vector<Rule> ParseRules(const std::string& table) {
  std::vector<Rule> rules;
  std::istringstream in(table);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    if (const size_t hash = raw.find('#'); hash != std::string::npos) raw.resize(hash);
    if (raw.find_first_not_of(" \t") == std::string::npos) continue;
    for (const std::string& line : Expand(raw)) {
      auto fail = [&](const std::string& why) {
        throw Error("rule table line " + std::to_string(line_no) + " '" + line + "': " + why);
      };
      const size_t colon = line.find(':'), arrow = line.find("=>");
      if (colon == std::string::npos || arrow == std::string::npos || arrow < colon)
        fail("expected 'name: LEFT => RIGHT'");
      Rule r;
      r.name = line.substr(line.find_first_not_of(" \t"), colon - line.find_first_not_of(" \t"));
      r.text = line.substr(colon + 1);
      r.text = r.text.substr(r.text.find_first_not_of(" \t"));
      std::string right = line.substr(arrow + 2), cond;
      if (const size_t at = right.find(" if "); at != std::string::npos)
        cond = right.substr(at + 4), right.resize(at);
      try {
        r.lhs = Pattern::Parse(line.substr(colon + 1, arrow - colon - 1));
        r.rhs = Pattern::Parse(right);
      } catch (const Error& e) {
        fail(e.what());
      }
      std::vector<std::string> lv, ll, rv, rl;
      r.lhs.Names(&lv, &ll);
      r.rhs.Names(&rv, &rl);
      for (const std::string& v : rv)
        if (std::find(lv.begin(), lv.end(), v) == lv.end()) fail("?" + v + " is not bound on the left");
      for (const std::string& l : rl)
        if (std::find(ll.begin(), ll.end(), l) == ll.end()) fail("label :" + l + " is not bound on the left");
      std::istringstream cs(cond);
      for (std::string part; std::getline(cs, part, ',');) {
        std::istringstream ws(part);
        std::string pred, v;
        if (!(ws >> pred)) continue;
        if (pred != "same-shape" && pred != "float") fail("unknown condition '" + pred + "'");
        std::vector<std::string> vars;
        while (ws >> v) {
          if (v[0] != '?' || std::find(lv.begin(), lv.end(), v.substr(1)) == lv.end())
            fail("condition " + pred + ": " + v + " is not a variable of the left side");
          vars.push_back(v.substr(1));
        }
        r.conditions.push_back({pred, vars});
      }
      rules.push_back(std::move(r));
    }
  }
  return rules;
}

bool ConditionsHold(const EGraph& eg, const Rule& r, const Match& m) {
  for (const auto& [pred, vars] : r.conditions) {
    if (pred == "same-shape") {
      for (size_t i = 1; i < vars.size(); ++i)
        if (eg.eclass(m.vars.at(vars[0])).shape != eg.eclass(m.vars.at(vars[i])).shape) return false;
    } else if (pred == "float") {
      for (const std::string& v : vars)
        if (!IsFloat(eg.eclass(m.vars.at(v)).dtype)) return false;
    }
  }
  return true;
}

const std::vector<Rule>& DefaultRules() {
  static const std::vector<Rule> rules = [] {
    // The code rules first: each iteration applies them before the table's rules can spend the node budget.
    std::vector<Rule> r;
    r.push_back({"reduce-join",
                 "(Reduce:a (Reduce:b ?x)) => (Reduce ?x) over the union of a's and b's axes",
                 {},
                 {},
                 {},
                 ReduceJoin});
    r.push_back({"reduce-split",
                 "(Reduce ?x) over axes (a, b...) => (Reduce (Reduce ?x) over a) over (b...)",
                 {},
                 {},
                 {},
                 ReduceSplit});
    r.push_back({"merge-linears",
                 "x · W1ᵀ, x · W2ᵀ, ... => slices of x · cat(W1, W2, ...)ᵀ",
                 {},
                 {},
                 {},
                 MergeLinears});
    for (Rule& t : ParseRules(kTable)) r.push_back(std::move(t));
    return r;
  }();
  return rules;
}

}  // namespace prism
