// The e-graph (hash-consing, congruence, folding), the rule table's parser, every rule's soundness on random
// inputs of random shapes, and the rewritten Llama program: fewer products, the same answers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/program.h"
#include "compiler/egraph/rewrite.h"
#include "frontend/nn.h"
#include "graph_check.h"
#include "ir/interpreter.h"
#include "runtime/language_model.h"
#include "runtime/text_encoder.h"
#include "stories_reference.h"

namespace prism {
namespace {

TEST(EGraph, HashConsesAndRestoresCongruenceAfterAUnion) {
  Graph g;
  NodeId x = g.Input("x", DType::F32, {4}), y = g.Input("y", DType::F32, {4});
  NodeId ex = g.Unary(Op::Exp2, x), ey = g.Unary(Op::Exp2, y);
  std::vector<ClassId> of;
  EGraph eg = EGraph::FromGraph(g, &of);
  EXPECT_EQ(eg.class_count(), 4u);
  ENode again = g.node(ex);
  again.inputs = {of[x]};
  EXPECT_EQ(eg.Add(again), eg.Find(of[ex]));  // an equal node is found, not added
  EXPECT_NE(eg.Find(of[ex]), eg.Find(of[ey]));
  eg.Union(of[x], of[y]);
  eg.Rebuild();
  EXPECT_EQ(eg.Find(of[ex]), eg.Find(of[ey]));  // exp2 x = exp2 y once x = y
  EXPECT_EQ(eg.class_count(), 2u);
  EXPECT_THROW(eg.Union(of[x], eg.Constant(1, DType::F32, {5})), Error);  // shapes differ
}

TEST(EGraph, ElementwiseNodesOverConstantsFoldAsTheInterpreterRounds) {
  EGraph eg;
  ClassId a = eg.Constant(1.0 / 3, DType::BF16, {2}), b = eg.Constant(2, DType::BF16, {2});
  auto sum = eg.Make(Node{Op::Add, DType::F32, {}, {}, "", 0, {}, {}}, {a, b});
  ASSERT_TRUE(sum);
  ASSERT_TRUE(eg.eclass(*sum).constant);
  EXPECT_EQ(*eg.eclass(*sum).constant, RoundToDType(RoundToDType(1.0 / 3, DType::BF16) + 2, DType::BF16));
  // The builder's checks decide what can be built: Add of [2] and [3] cannot.
  ClassId c = eg.Constant(1, DType::F32, {3});
  EXPECT_FALSE(eg.Make(Node{Op::Add, DType::F32, {}, {}, "", 0, {}, {}}, {a, c}));
}

TEST(Rules, TheTableParsesAndBadRulesAreOneLineErrors) {
  EXPECT_GT(DefaultRules().size(), 50u);  // families expanded
  auto r = ParseRules("swap: (Add ?a ?b) => (Add ?b ?a)\n# a comment\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].lhs.str(), "(Add ?a ?b)");
  for (const char* bad :
       {"x: (Frobnicate ?a) => ?a", "x: (Add ?a ?b) => ?c", "x: (Exp2 ?a) => (Reshape:r ?a)",
        "x: (Add ?a ?b) => ?a if shiny ?a", "x (Add ?a ?b) ?a", "x: (Add ?a => ?a"}) {
    try {
      ParseRules(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("rule table line 1"), std::string::npos) << e.what();
    }
  }
}

// A graph with a site for every rule, over inputs [n, m] (n symbolic) of dtype t; its outputs are the sites.
Graph SeedGraph(int64_t m, DType t, std::mt19937& rng) {
  Graph g;
  const Expr n = Expr::Sym("n");
  auto in = [&](const std::string& name, std::vector<Expr> shape) { return g.Input(name, t, shape); };
  NodeId a = in("a", {n, m}), b = in("b", {n, m}), c = in("c", {n, m}), p = in("p", {n, 1}),
         q = in("q", {n, 1});
  auto K = [&](double v) { return g.Constant(v, t, {n, m}); };
  auto U = [&](Op op, NodeId x) { return g.Unary(op, x); };
  auto B = [&](Op op, NodeId x, NodeId y) { return g.Binary(op, x, y); };
  std::vector<NodeId> outs;
  for (Op op : {Op::Add, Op::Mul, Op::Max}) outs.push_back(B(op, B(op, a, b), c));
  outs.push_back(B(Op::Add, B(Op::Mul, a, c), B(Op::Mul, b, c)));
  outs.push_back(B(Op::Mul, B(Op::Add, a, b), c));
  outs.push_back(B(Op::Add, B(Op::Add, a, K(0.5)), K(-0.5)));  // -> a + 0 under add-assoc
  outs.push_back(B(Op::Mul, B(Op::Mul, a, K(2)), K(0.5)));     // -> a * 1 under mul-assoc
  outs.push_back(B(Op::Max, a, a));
  outs.push_back(U(Op::Exp2, U(Op::Log2, a)));
  outs.push_back(U(Op::Log2, U(Op::Exp2, a)));
  outs.push_back(U(Op::Exp2, B(Op::Add, a, b)));
  outs.push_back(B(Op::Mul, U(Op::Exp2, a), U(Op::Exp2, b)));
  outs.push_back(U(Op::Recip, U(Op::Recip, a)));
  outs.push_back(U(Op::Recip, U(Op::Sqrt, a)));
  outs.push_back(U(Op::Sqrt, U(Op::Recip, b)));
  outs.push_back(U(Op::Recip, B(Op::Mul, a, b)));
  outs.push_back(B(Op::Mul, U(Op::Sqrt, a), U(Op::Sqrt, a)));
  outs.push_back(g.Reduce(Op::SumReduce, B(Op::Mul, a, g.Expand(p, {n, m})), {1}));
  // Views through elementwise ops, both ways: Reshape and Permute of [n, m], Expand of [n, 1].
  for (Op view : {Op::Reshape, Op::Permute, Op::Expand}) {
    auto V = [&](NodeId x) {
      if (view == Op::Reshape) return g.Reshape(x, {n * m});
      if (view == Op::Permute) return g.Permute(x, {1, 0});
      return g.Expand(x, {n, m});
    };
    const NodeId x = view == Op::Expand ? p : a, y = view == Op::Expand ? q : b;
    for (Op op : {Op::Add, Op::Mul, Op::Max}) {
      outs.push_back(V(B(op, x, y)));
      outs.push_back(B(op, V(x), V(y)));
    }
    for (Op op : {Op::Exp2, Op::Log2, Op::Sin, Op::Sqrt, Op::Recip}) {
      outs.push_back(V(U(op, x)));
      outs.push_back(U(op, V(x)));
    }
  }
  for (Op r : {Op::SumReduce, Op::MaxReduce}) {
    outs.push_back(g.Reduce(r, g.Reduce(r, a, {1}), {0}));
    outs.push_back(g.Reduce(r, a, {0, 1}));
  }
  // Two products over one input (x · W1ᵀ, x · W2ᵀ), weights of dtype t.
  std::uniform_int_distribution<int64_t> rows(1, 5);
  Tensor x{&g, t == DType::F32 ? a : g.Cast(a, DType::F32)};
  for (const char* w : {"w1", "w2"})
    outs.push_back(Linear(x, Tensor{&g, g.Weight(w, t, {rows(rng), m})}).id());
  for (size_t i = 0; i < outs.size(); ++i) g.MarkOutput(outs[i], "site" + std::to_string(i));
  return g;
}

// Rules that only fire on what another rule made (x + 0 and x * 1 never survive the Graph builder).
std::vector<std::string> Companions(const std::string& rule) {
  if (rule == "add-zero") return {"add-assoc"};
  if (rule == "mul-one") return {"mul-assoc"};
  return {};
}

// A rule (with its companions) alone on seed graphs of random shapes, in f32 and bf16: the program that takes
// the rule's nodes wherever it can must give the interpreter's answers for the graph as written (2e-3 of an
// output's largest magnitude plus two units of its dtype's rounding, as the schedule search's bounds), with
// no NaN or infinity where the written graph has none, and the rule must change the program on some seed. ""
// or what failed.
std::string CheckRule(const std::vector<Rule>& set, uint64_t seed) {
  const Rule& rule = set[0];
  std::mt19937 rng((uint32_t)seed);
  bool changed = false;
  for (int trial = 0; trial < 4; ++trial) {
    const DType t = trial % 2 ? DType::BF16 : DType::F32;
    const int64_t m = std::uniform_int_distribution<int64_t>(2, 7)(rng);
    const SymbolBindings syms{{"n", std::uniform_int_distribution<int64_t>(1, 6)(rng)}};
    Graph g = SeedGraph(m, t, rng);
    std::vector<ClassId> of;
    EGraph eg = EGraph::FromGraph(g, &of);
    std::vector<Joint> joints;
    SaturationBudget budget;
    budget.max_iterations = 2;
    const SaturationReport rep = Saturate(eg, set, budget, &joints);
    // The rule's nodes wherever they close no cycle, and every joint's members.
    Choice choice = ExtractBest(eg, [&](const ENode& n) { return eg.Origin(n) == rule.name ? 1e-3 : 1.0; });
    for (const Joint& j : joints)
      for (auto& [cls, node] : j.members) choice[eg.Find(cls)] = node;
    const std::vector<ClassId> roots = RootsOf(eg, g, of);
    for (ClassId c : eg.Classes())
      for (const ENode& n : eg.eclass(c).nodes) {
        if (eg.Origin(n) != rule.name) continue;
        Choice trial_choice = choice;
        trial_choice[c] = n;
        try {
          Reached(eg, trial_choice, roots);
          choice = std::move(trial_choice);
        } catch (const Error&) {
        }
        break;
      }
    Graph out = ToGraph(eg, choice, g, of);
    if (rep.fired.count(rule.name) && out.ToText() != g.ToText()) changed = true;
    auto inputs = testing::RandomTensors(g, Op::Input, syms, seed + trial);
    auto weights = testing::RandomTensors(g, Op::Weight, syms, seed + 100 + trial);
    Interpreter want_i(g), got_i(out);
    for (auto& [name, w] : weights) want_i.BindWeight(name, w);
    for (const Node& nd : out.nodes()) {
      if (nd.op != Op::Weight) continue;
      std::vector<HostTensor> parts;
      for (const std::string& p : ConcatParts(nd.name)) parts.push_back(weights.at(p));
      got_i.BindWeight(nd.name, parts.empty() ? weights.at(nd.name) : ConcatRows(parts, nd.name));
    }
    const auto want = want_i.Run(inputs, syms), got = got_i.Run(inputs, syms);
    if (want.size() != got.size()) return "a different number of outputs";
    const double unit = t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
    for (size_t o = 0; o < want.size(); ++o) {
      if (want[o].shape != got[o].shape) return "output " + std::to_string(o) + " changed shape";
      double big = 0;
      for (int64_t i = 0; i < want[o].numel(); ++i)
        if (std::isfinite(want[o].At(i))) big = std::max(big, std::fabs(want[o].At(i)));
      for (int64_t i = 0; i < want[o].numel(); ++i) {
        const double w = want[o].At(i), x = got[o].At(i);
        if (!std::isfinite(w)) continue;  // a rule may remove a NaN (exp2(log2 a) is a), never add one
        const std::string where = " at output " + std::to_string(o) + " element " + std::to_string(i) +
                                  " in " + std::string(DTypeName(t)) + ": " + std::to_string(x) + " for " +
                                  std::to_string(w);
        if (!std::isfinite(x)) return "not finite" + where;
        if (std::fabs(w - x) > 2e-3 * big + 2 * unit * std::fabs(w)) return "out of bounds" + where;
      }
    }
  }
  return changed ? "" : "never changed a seed graph (give it a site in SeedGraph)";
}

TEST(Rules, EveryRuleIsSoundOnRandomInputsOfRandomShapes) {
  uint64_t seed = 20261126;
  for (const Rule& rule : DefaultRules()) {
    std::vector<Rule> set{rule};
    for (const std::string& c : Companions(rule.name))
      for (const Rule& r : DefaultRules())
        if (r.name == c) set.push_back(r);
    EXPECT_EQ(CheckRule(set, seed += 1000), "") << rule.name;
  }
}

// The check can fail: a wrong rule and one that makes NaN where the graph had none are caught.
TEST(Rules, TheSoundnessCheckCatchesAWrongRuleAndOneThatMakesNaN) {
  for (const char* bad : {"wrong: (Add ?a ?b) => (Max ?a ?b)", "nan: (Exp2 ?a) => (Exp2 (Exp2 (Log2 ?a)))"}) {
    const std::string why = CheckRule(ParseRules(bad), 7);
    EXPECT_NE(why.find(std::string(bad).substr(0, 3) == "nan" ? "not finite" : "out of bounds"),
              std::string::npos)
        << bad << ": " << why;
  }
}

TEST(Rules, SaturationIsDeterministicAndKeepsToItsBudget) {
  ModelFiles mf = OpenModelFiles(testing::kStoriesDir + "stories260K.bin", "");
  Graph g = BuildCausalLM(mf.config, mf.Lookup(), {});
  RewriteOptions ro;
  ro.budget.max_nodes = 3000;
  RewriteResult a = RewriteProgram(g, ro), b = RewriteProgram(g, ro);
  EXPECT_EQ(a.saturation.stopped, "node limit");
  EXPECT_LE(a.saturation.nodes_end, 3000u + 64);  // the last rule's application may finish its node
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  for (size_t i = 0; i < a.candidates.size(); ++i)
    EXPECT_EQ(a.candidates[i].graph.ToText(), b.candidates[i].graph.ToText());
}

size_t Products(const Graph& g) {
  size_t n = 0;
  for (const Kernel& k : BuildKernelProgram(g, CompileOptions{}.fusion).kernels) n += k.gemm.has_value();
  return n;
}

// The merged projections come out of the search: q/k/v and gate/up each one product, 4 per layer.
TEST(Rewrites, EveryLlamaLayerOfStoriesHasFourProducts) {
  ModelFiles mf = OpenModelFiles(testing::kStoriesDir + "stories260K.bin", "");
  Graph g = BuildCausalLM(mf.config, mf.Lookup(), {});
  RewriteOptions ro;
  ro.cost.sizes = {{"seq", 1}, {"past", 64}};
  RewriteResult rr = RewriteProgram(g, ro);
  ASSERT_GE(rr.candidates.size(), 2u);
  EXPECT_EQ(rr.candidates[1].name, "rewritten");
  EXPECT_EQ(Products(g), 7u * mf.config.num_layers + 1);  // q, k, v, o, gate, up, down; the lm head
  EXPECT_EQ(Products(rr.candidates[1].graph), 4u * mf.config.num_layers + 1);
  EXPECT_LT(rr.candidates[1].predicted_seconds, rr.candidates[0].predicted_seconds);
  const auto& r = rr.candidates[1].rewrites;
  EXPECT_NE(std::find(r.begin(), r.end(), "merge-linears: 3 GEMMs -> 1 (q_proj, k_proj, v_proj) (x5)"),
            r.end());
}

// The rewritten program, compiled with its merged weights made at bind time, generates the reference's
// tokens.
TEST(Rewrites, TheRewrittenStoriesProgramGeneratesTheReferenceTokens) {
  LoadOptions lo;
  lo.program = "rewritten";
  auto lm = LanguageModel::Load(testing::kStoriesDir + "stories260K.bin", lo);
  EXPECT_EQ(lm->program_receipt().value("chosen", ""), "rewritten");
  testing::ExpectReferenceText(*lm, "the rewritten program");
}

// A model loaded again in the same process (a server's, after --idle-unload) takes the rewrites the first
// load made, and its program computes what the first one's does.
TEST(Rewrites, ALoadAgainInTheSameProcessReusesTheRewritesOfTheFirst) {
  LoadOptions lo;
  lo.max_context = 77;  // a step graph no other test in this process rewrites
  auto first = LanguageModel::Load(testing::kStoriesDir + "stories260K.bin", lo);
  auto again = LanguageModel::Load(testing::kStoriesDir + "stories260K.bin", lo);
  EXPECT_FALSE(first->program_receipt()["saturation"].value("reused", true));
  EXPECT_TRUE(again->program_receipt()["saturation"].value("reused", false));
  EXPECT_EQ(first->program_receipt().value("chosen", "?"), again->program_receipt().value("chosen", ""));
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  const std::vector<float> a = first->Forward(tokens), b = again->Forward(tokens);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
  lo.max_context = 78;  // another graph: rewritten afresh
  EXPECT_FALSE(LanguageModel::Load(testing::kStoriesDir + "stories260K.bin", lo)
                   ->program_receipt()["saturation"]
                   .value("reused", true));
}

// An encoder's program comes out of the same search: BERT's q/k/v merged, the embeddings unchanged.
TEST(Rewrites, TheRewrittenBertEncoderEmbedsAsTheGraphAsWritten) {
  const std::string model = std::string(PRISM_TEST_DATA_DIR) + "/bert/tiny-bert-f32.gguf";
  LoadOptions lo;
  lo.program = "as written";
  auto written = TextEncoder::Load(model, lo);
  lo.program = "rewritten";
  auto rewritten = TextEncoder::Load(model, lo);
  const nlohmann::json& r = rewritten->program_receipt();
  EXPECT_EQ(r.value("chosen", ""), "rewritten");
  const std::string rewrites = r.value("rewrites", nlohmann::json::array()).dump();
  EXPECT_NE(rewrites.find("3 GEMMs -> 1"), std::string::npos) << rewrites;
  for (const char* text : {"hello world", "a second, longer text to embed"}) {
    const std::vector<float> a = written->EmbedText(text), b = rewritten->EmbedText(text);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << text << " element " << i;
  }
}

}  // namespace
}  // namespace prism
