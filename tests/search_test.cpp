// Schedule search, tuning database and compiled artifacts: choices are checked, timed, reused, replayed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_forms.h"
#include "backends/cpu/machine_probe.h"
#include "backends/cpu/program.h"
#include "backends/schedule_space.h"
#include "compiler/kernel_hash.h"
#include "frontend/nn.h"
#include "graph_check.h"
#include "ir/error.h"
#include "runtime/language_model.h"
#include "search/program_search.h"
#include "search/schedule_search.h"
#include "test_util.h"

namespace prism {
namespace {

const std::string kStories = std::string(PRISM_SOURCE_DIR) + "/models/stories260K/stories260K.bin";

}  // namespace

// The tuning database's kernel key is structural: two layers' copies of a product share it (other names,
// other buffer numbers), and a different weight dtype, shape or activation changes it.
TEST(Search, KernelKeysAreStructural) {
  auto key_of = [](DType wt, int64_t n, bool second_layer_gelu) {
    Graph g;
    Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(32)})};
    Tensor h = Silu(Linear(Silu(x), Tensor{&g, g.Weight("w0", DType::F32, {Expr(32), Expr(32)})}));
    Tensor w1{&g, g.Weight("layer1.w", wt, {Expr(n), Expr(32)})};
    Tensor y = Linear(h, w1);
    g.MarkOutput((second_layer_gelu ? GeluTanh(y) : Silu(y)).id(), "out");
    KernelProgram p = BuildKernelProgram(g);
    std::vector<std::string> keys;
    for (const Kernel& k : p.kernels)
      if (k.gemm) keys.push_back(KernelStructuralHash(p, k));
    return keys;
  };
  const std::vector<std::string> a = key_of(DType::F32, 32, false);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0], a[1]);  // w0's product and layer1.w's (other names, other buffers): the same structure
  EXPECT_EQ(a[0].size(), 32u);
  EXPECT_NE(key_of(DType::BF16, 32, false)[1], a[1]);
  EXPECT_NE(key_of(DType::F32, 48, false)[1], a[1]);
  EXPECT_EQ(key_of(DType::F32, 32, true)[1], a[1]);  // another consumer: the product itself is unchanged
  EXPECT_EQ(key_of(DType::F32, 32, false), a);       // deterministic
}

// The receipts' read-bandwidth probe: every variant measured in each pass, each pass's best recorded,
// the best of all kept and named (below AVX2 there is no probe: 0).
TEST(Search, ReadBandwidthProbeKeepsTheBestVariantOfEachPass) {
  const ReadBandwidth r = MeasureReadBandwidth(1, (size_t)64 << 20, 2);
  if (!__builtin_cpu_supports("avx2")) {
    EXPECT_EQ(r.gbps, 0);
    return;
  }
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_GT(r.gbps, 0.1);
  EXPECT_EQ(r.gbps, *std::max_element(r.samples.begin(), r.samples.end()));
  EXPECT_NE(r.variant.find("per thread"), std::string::npos) << r.variant;
}

TEST(Search, EveryCandidateIsCheckedAndTimedThenTheDatabaseIsReused) {
  testing::FreshCache cache("search");
  LoadOptions lo{"", 64, 2};
  lo.search_busy_limit = 1;  // ctest runs other tests beside this one: save whatever was timed
  auto lm = LanguageModel::Load(kStories, lo);
  std::vector<int32_t> ids = lm->tokenizer().Encode("Once upon a time", true);
  std::vector<float> before = lm->Forward(ids);
  nlohmann::json receipts = lm->Tune(30);
  int searched = 0, multi = 0, shared = 0;
  int search_receipts = 0;
  for (const auto& r : receipts) {
    ASSERT_TRUE(r.contains("chosen")) << r.dump();
    if (r.value("scope", "") == "search") {  // one per bucket: the machine's load while timing
      search_receipts++;
      EXPECT_TRUE(r["saved"].get<bool>());
      // A fraction of the machine's CPU time: a counter read wrong gives NaN, a negative or over 1.
      const double others = r["others_cpu_fraction"].get<double>();
      EXPECT_TRUE(others >= 0 && others <= 1) << r.dump();
      continue;
    }
    shared += r["reason"] == "tuning database";
    if (!r.contains("candidates")) continue;
    searched++;
    multi += r["candidates"].size() > 1;
    bool chosen_passed = false;
    for (const auto& c : r["candidates"]) {
      EXPECT_GT(c["median_us"].get<double>(), 0);
      EXPECT_LE(c["min_us"].get<double>(), c["max_us"].get<double>());
      if (c["candidate"] == r["chosen"]) chosen_passed = c["passed"].get<bool>();
    }
    EXPECT_TRUE(chosen_passed) << r.dump();
    EXPECT_GT(r["floor_us"].get<double>(), 0);
    // A fraction above 1 never goes out unflagged.
    EXPECT_EQ(r.value("fraction_of_roofline", 0.0) > 1, r.contains("roofline_flag")) << r.dump();
  }
  EXPECT_GT(searched, 50);
  EXPECT_GT(multi, 40);
  // Each layer's copy of a kernel has the same canonical key: the first layer's search decides all.
  EXPECT_GT(shared, 100);
  // The chosen schedules compute the same logits (AMX's split products, where chosen, are within 2^-14
  // of each product).
  lm->Reset();
  std::vector<float> after = lm->Forward(ids);
  for (size_t i = 0; i < before.size(); ++i) ASSERT_NEAR(before[i], after[i], 1e-3) << i;
  // A second load finds every decision in the database and searches nothing.
  EXPECT_EQ(search_receipts, 2);
  auto again = LanguageModel::Load(kStories, {"", 64, 2});
  nlohmann::json second = again->Tune(30);
  for (const auto& r : second) EXPECT_EQ(r["reason"], "tuning database") << r.dump();
  EXPECT_EQ(second.size() + search_receipts, receipts.size());
  // A replay (prism compile --replay KERNEL) really searches that kernel again, in every bucket, though
  // the database holds its decision; every other kernel keeps the database's.
  const std::string replayed = receipts[0]["kernel"];
  nlohmann::json third = again->Tune(30, replayed, /*replay=*/true);
  int replay_searched = 0;
  for (const auto& r : third) {
    if (r.value("scope", "") == "search") continue;
    if (r["kernel"] == replayed) {
      EXPECT_TRUE(r.contains("candidates")) << r.dump();
      EXPECT_NE(r["reason"], "tuning database") << r.dump();
      replay_searched++;
    } else {
      EXPECT_EQ(r["reason"], "tuning database") << r.dump();
    }
  }
  EXPECT_EQ(replay_searched, 2);  // decode and prefill
  // The kernels not replayed keep the database's choices (the step still computes the same logits).
  again->Reset();
  std::vector<float> replayed_logits = again->Forward(ids);
  for (size_t i = 0; i < before.size(); ++i) ASSERT_NEAR(before[i], replayed_logits[i], 1e-3) << i;
}

// The search on the micro-kernel tier at hand, and on lower ones (ctest runs this test again under
// PRISM_GEMM_ISA=avx2, as a CPU without AVX-512 would): every chosen schedule of a float and a K-quant
// model passed its check, only forms this tier offers were candidates, the decisions are keyed by the
// tier, and the tuned model computes the logits it computed before.
TEST(Search, ChosenSchedulesPassTheirChecksOnThisTier) {
  testing::FreshCache cache("tier");
  std::set<std::string> offered = {"template", "template-attention"};
  for (const GemmForm& f : GemmForms()) {
    if (!f.offered) continue;
    for (DType wt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K})
      if (f.offered(wt, 256)) offered.insert(f.label(wt));
  }
  const std::string kquant = std::string(PRISM_TEST_DATA_DIR) + "/kquants/tiny-Q4_K_M.gguf";
  for (const std::string& path : {kStories, kquant}) {
    SCOPED_TRACE(path);
    LoadOptions lo{"", 64, 2};
    lo.search_busy_limit = 1;
    lo.program = "as written";  // the schedules are searched here, not inside the program search
    auto lm = LanguageModel::Load(path, lo);
    const std::vector<int32_t> ids = {1, 7, 42, 99, 3, 250};
    const std::vector<float> before = lm->Forward(ids);
    int templates = 0;
    for (const auto& r : lm->Tune(20)) {
      if (r.contains("device")) {
        EXPECT_NE(r["device"].get<std::string>().find(std::string("|") + GemmIsa() + "|"), std::string::npos)
            << r.dump();
      }
      if (!r.contains("candidates") || r.value("scope", "") == "step") continue;
      for (const auto& c : r["candidates"]) {
        const std::string name = c["candidate"];
        const std::string tier = name.substr(0, name.find('/'));
        if (tier.rfind("template", 0) == 0) {
          EXPECT_TRUE(offered.count(tier)) << GemmIsa() << ": " << name;
        }
        if (c["candidate"] == r["chosen"]) {
          EXPECT_TRUE(c["passed"].get<bool>()) << r.dump();
          templates += tier.rfind("template", 0) == 0;
        }
      }
    }
    EXPECT_GT(templates, 0);  // the tier's templates won somewhere (the products of these models)
    lm->Reset();
    const std::vector<float> after = lm->Forward(ids);
    ASSERT_EQ(before.size(), after.size());
    // Within what rounding the activation allows: K-quant forms round it to 8 bits where the unsearched
    // choice may not (1.6% of max |logit| seen on this random model; a wrong kernel is off by its size).
    float top = 0, diff = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      ASSERT_TRUE(std::isfinite(after[i])) << i;
      top = std::max(top, std::abs(before[i]));
      diff = std::max(diff, std::abs(before[i] - after[i]));
    }
    EXPECT_LE(diff, 5e-2f * top) << "max |logit| " << top;
    std::printf("%s: max |logit| %.3f, largest change %.5f\n", path.c_str(), top, diff);
  }
}

// Long prompts get their own attention choices (its cost grows as the square of the prompt's length):
// the "prefill-long" bucket searches only the kernels whose loops span the KV cache and takes every
// other choice from "prefill".
TEST(Search, LongPromptsSearchOnlyTheKernelsSpanningTheContext) {
  testing::FreshCache cache("long");
  LoadOptions lo{"", 320, 2};
  lo.search_busy_limit = 1;
  auto lm = LanguageModel::Load(kStories, lo);
  std::vector<int32_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(1 + (i * 37) % 500);
  const std::vector<float> before = lm->Forward(ids);
  const nlohmann::json receipts = lm->Tune(60);
  const Program& p = lm->step_as<Program>();
  const auto& kernels = p.kernels().kernels;
  int long_searched = 0;
  for (const auto& r : receipts) {
    if (r.value("bucket", "") != "prefill-long" || !r.contains("candidates")) continue;
    long_searched++;
    auto k = std::find_if(kernels.begin(), kernels.end(),
                          [&](const Kernel& kn) { return kn.name == r["kernel"]; });
    ASSERT_NE(k, kernels.end());
    EXPECT_TRUE(LoopsSpan(*k, "past")) << r.dump();
  }
  EXPECT_GE(long_searched, 1);  // the attention kernel (each layer's copy shares its decision)
  const auto& prefill = p.choices().at("prefill");
  const auto& long_prefill = p.choices().at("prefill-long");
  ASSERT_EQ(prefill.size(), kernels.size());
  ASSERT_EQ(long_prefill.size(), kernels.size());
  int spanning = 0;
  for (size_t k = 0; k < kernels.size(); ++k) {
    if (LoopsSpan(kernels[k], "past")) {
      spanning++;
      continue;
    }
    EXPECT_EQ(prefill[k], long_prefill[k]) << kernels[k].name;
  }
  EXPECT_GE(spanning, 5);  // at least each layer's attention
  EXPECT_LT(spanning, (int)kernels.size() / 2);
  ASSERT_TRUE(p.choices().count("prefill-long"));
  const std::set<std::string> all = {"decode", "batch", "batch-wide", "prefill", "prefill-long"},
                              few = {"decode", "prefill"};
  EXPECT_EQ(BucketOf({{"seq", 1}, {"past", 0}}, all), "decode");
  EXPECT_EQ(BucketOf({{"seq", kBatchWideMin - 1}, {"past", 0}}, all), "batch");
  EXPECT_EQ(BucketOf({{"seq", kBatchWideMin}, {"past", 0}}, all), "batch-wide");
  EXPECT_EQ(BucketOf({{"seq", kBatchSeqMax - 1}, {"past", 0}}, all), "batch-wide");
  EXPECT_EQ(BucketOf({{"seq", kBatchWideMin}, {"past", 0}}, std::set<std::string>{"batch"}), "batch");
  EXPECT_EQ(BucketOf({{"seq", kBatchSeqMax}, {"past", 0}}, all), "prefill");
  EXPECT_EQ(BucketOf({{"seq", kLongPrefillSeq - 1}, {"past", 0}}, all), "prefill");
  EXPECT_EQ(BucketOf({{"seq", kLongPrefillSeq}, {"past", 0}}, all), "prefill-long");
  EXPECT_EQ(BucketOf({{"seq", kLongPrefillSeq}, {"past", 0}}, few), "prefill");
  EXPECT_EQ(BucketOf({{"seq", 5}, {"past", 0}}, few), "prefill");
  // The long prompt, now on the long bucket's choices, computes the same logits.
  lm->Reset();
  const std::vector<float> after = lm->Forward(ids);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) ASSERT_NEAR(before[i], after[i], 1e-4) << i;
}

// A batched step (a server's) searches every kernel once: its scatters into the KV pool pass their checks
// (the search gives them distinct rows, as a step's slots are), so every decision is saved and loading the
// model again times nothing. Random rows made two rows write one, every candidate failed, and each load of a
// served model searched those kernels again.
void ExpectBatchedDecisionsSaved(const std::string& device) {
  testing::FreshCache cache("batched-" + device);
  LoadOptions lo{"", 64, 2};
  lo.device = device;
  lo.search_busy_limit = 1;
  lo.kv_block = 4;
  lo.kv_blocks = 40;
  lo.program = "as written";
  auto lm = LanguageModel::Load(kStories, lo);
  int scatters = 0;
  // A budget no search of this model reaches: one that ran out (on a loaded CI machine, OpenCL's compiles
  // took 59 s where 11 s was usual) keeps defaults unsaved, and the load below would rightly time them.
  for (const auto& r : lm->Tune(testing::kUnreachedSearchBudget)) {
    EXPECT_NE(r.value("reason", "").rfind("no candidate passed", 0), 0u) << r.dump();
    scatters += r.value("kernel", "").find("StateScatter") != std::string::npos && r.contains("candidates");
  }
  EXPECT_GT(scatters, 0);
  for (const auto& r : LanguageModel::Load(kStories, lo)->Tune(30))
    EXPECT_FALSE(r.contains("candidates")) << "timed again: " << r.dump();
}

TEST(Search, BatchedStepsSaveEveryDecisionSoALoadAgainTimesNothing) { ExpectBatchedDecisionsSaved("cpu"); }

TEST(Search, BatchedStepsSaveEveryDecisionOnOpenClToo) {
  try {
    OpenDevice("opencl");
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  ExpectBatchedDecisionsSaved("opencl");
}

TEST(Search, DecisionsTimedOnABusyMachineAreUsedButNotSaved) {
  testing::FreshCache cache("busy");
  LoadOptions lo{"", 64, 2};
  lo.search_busy_limit = 0.05;
  auto lm = LanguageModel::Load(kStories, lo);
  pid_t spinner = fork();  // another process keeping a core busy while candidates are timed
  ASSERT_GE(spinner, 0);
  if (spinner == 0)
    for (;;) asm volatile("" ::: "memory");
  nlohmann::json receipts = lm->Tune(5);
  kill(spinner, SIGKILL);
  waitpid(spinner, nullptr, 0);
  int searched = 0, busy = 0;
  for (const auto& r : receipts) {
    searched += r.contains("candidates");
    if (r.value("scope", "") != "search") continue;
    busy++;
    EXPECT_GT(r["others_cpu_fraction"].get<double>(), 0.05) << r.dump();
    EXPECT_FALSE(r["saved"].get<bool>());
  }
  EXPECT_GT(searched, 0);
  EXPECT_GT(busy, 0);
  // Nothing was saved: the next search (on a quiet machine) times the candidates again.
  std::ifstream db(cache.dir / "tuning.json");
  std::string text((std::istreambuf_iterator<char>(db)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("\"candidate\""), std::string::npos) << text.substr(0, 300);
}

// A search budget is the whole search's: the program search's candidates share it, 1/n each (each had had
// all of it, and a 1B model's compile at the default 60 s took 371 s); then, where every decision was saved,
// each candidate but the last is tuned again with none of it, applying what the later ones decided, so the
// kernels they share are timed under the same schedules. Where a decision was not saved nothing is tuned
// again: a search with no budget puts back the defaults of what the database lacks.
// Two products of one input (merge-linears gives a second program) with random f32 weights; `build` compiles
// a candidate on the CPU and binds its weights, a merged one's parts concatenated in the order its name gives
// or, with `reversed`, the other way round (a wrong program).
struct TwoProductsOfOneInput {
  Graph g;
  std::map<std::string, HostTensor> weights;
  RewriteResult rr;
  std::shared_ptr<Device> cpu = OpenDevice("cpu");
  bool reversed = false;

  TwoProductsOfOneInput() {
    Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), 48})};
    auto weight = [&](const std::string& name, std::vector<Expr> shape) {
      return Tensor{&g, g.Weight(name, DType::F32, shape)};
    };
    Tensor h = LayerNorm(x, weight("ln.weight", {48}), weight("ln.bias", {48}), 1e-5);
    g.MarkOutput(
        (Linear(GeluTanh(Linear(h, weight("up.weight", {80, 48}))), weight("down.weight", {48, 80})) +
         Linear(h, weight("skip.weight", {48, 48})))
            .id(),
        "y");
    std::mt19937 rng(3);
    for (const Node& n : g.nodes())
      if (n.op == Op::Weight) {
        weights[n.name] = HostTensor::Zeros(DType::F32, EvalShape(n.shape, {}));
        FillRandomNonZero(weights[n.name].data, DType::F32, weights[n.name].numel(), rng);
      }
    RewriteOptions ro;
    ro.cost.sizes = {{"seq", 4}};
    rr = RewriteProgram(g, ro);
  }

  std::unique_ptr<Executable> Build(const Graph& cg) {
    std::unique_ptr<Executable> exe = cpu->Compile(cg);
    for (const Node& w : cg.nodes()) {
      if (w.op != Op::Weight) continue;
      std::vector<std::string> names = ConcatParts(w.name);
      if (names.empty()) {
        exe->BindWeight(w.name, weights.at(w.name));
        continue;
      }
      if (reversed) std::reverse(names.begin(), names.end());
      std::vector<HostTensor> parts;
      for (const std::string& part : names) parts.push_back(weights.at(part));
      exe->BindWeight(w.name, ConcatRows(parts, w.name));
    }
    return exe;
  }
};

TEST(Search, TheProgramSearchCandidatesShareOneBudget) {
  testing::FreshCache cache("budget");
  TwoProductsOfOneInput m;
  const RewriteResult& rr = m.rr;
  const size_t n = rr.candidates.size();
  ASSERT_GE(n, 2u);
  auto build = [&](const Graph& cg) { return m.Build(cg); };
  for (const bool saved : {true, false}) {
    SCOPED_TRACE(saved ? "every decision saved" : "a decision not saved");
    std::vector<std::pair<const Executable*, double>> calls;
    auto tune = [&](Executable& exe, double share) {
      calls.push_back({&exe, share});
      return nlohmann::json::array({{{"scope", "search"}, {"saved", saved}}});
    };
    ProgramSearchOptions po;
    po.buckets = {{"rows", {{"seq", 4}}}};
    po.db_path = (cache.dir / (saved ? "saved.json" : "unsaved.json")).string();
    const ProgramDecision d = ChooseProgram(rr, "cpu|test", build, tune, po);
    ASSERT_EQ(calls.size(), saved ? 2 * n - 1 : n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += calls[i].second;
    EXPECT_DOUBLE_EQ(sum, 1.0);
    EXPECT_DOUBLE_EQ(calls[0].second, 1.0 / (double)n);
    for (size_t i = n; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].second, 0.0);
      EXPECT_EQ(calls[i].first, calls[i - n].first);  // the candidates built first, in order
    }
    EXPECT_DOUBLE_EQ(d.receipt["budget_share_each"].get<double>(), 1.0 / (double)n);
    for (const auto& t : d.receipt["timed"]) EXPECT_TRUE(t["passed"].get<bool>()) << t.dump();
  }
  // Through a language model: the seconds spent stay near the budget, and what the program search left is
  // the schedules' (TuneRest), whose decisions it saved come back from the database.
  LoadOptions lo{"", 64, 2};
  lo.search_busy_limit = 1;
  lo.search_budget = 2;
  auto lm = LanguageModel::Load(kStories, lo);
  // Its programs were chosen for a request of a 32-token prompt (the prefill bucket at a context of 64) and
  // as many decode steps.
  EXPECT_EQ(lm->program_receipt()["request_steps"], nlohmann::json({{"decode", 32}, {"prefill", 1}}))
      << lm->program_receipt().dump();
  const double at_load = lm->search_seconds();
  int from_db = 0;
  for (const auto& r : lm->TuneRest()) from_db += r.value("reason", "") == "tuning database";
  EXPECT_GT(from_db, 0);
  EXPECT_LE(lm->search_seconds(), std::max(lo.search_budget, at_load) + 2);
  std::printf("stories260K: %.2f s of search at load, %.2f s in all (budget %.0f s)\n", at_load,
              lm->search_seconds(), lo.search_budget);
}

// The program check passes what rounding moves (each kernel's own check bounds its rounding; a deep random
// model amplifies it: the 1B shape's decode logits moved by 5% of their RMS between a product rounding its
// activation to int8 and one in f32) and drops a wrong program, whose error is the size of its values.
TEST(Search, TheProgramCheckPassesRoundingAndDropsAWrongProgram) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  const int64_t count = 4000;
  HostTensor want = HostTensor::Zeros(DType::F32, {count}), got = HostTensor::Zeros(DType::F32, {count});
  std::vector<float> w(count);
  for (float& v : w) v = normal(rng);
  auto with = [&](const std::function<void(float*)>& change) {
    std::vector<float> g = w;
    change(g.data());
    std::memcpy(want.data, w.data(), count * sizeof(float));
    std::memcpy(got.data, g.data(), count * sizeof(float));
    return CompareProgramOutputs({want}, {got});
  };
  EXPECT_EQ(with([](float*) {}), "");
  // Rounding: 8% of the values' RMS, each element moved by at most 0.3 (an eighth of the largest magnitude).
  EXPECT_EQ(with([&](float* g) {
              for (int64_t i = 0; i < count; ++i) g[i] += 0.08f * std::clamp(normal(rng), -3.75f, 3.75f);
            }),
            "");
  // A wrong program: the halves swapped (a concatenation the wrong way round), or noise of 29% of the values'
  // RMS, no element moved by more than 0.75 (a fifth of the largest magnitude).
  EXPECT_NE(with([&](float* g) { std::rotate(g, g + count / 2, g + count); }).find("of its RMS"),
            std::string::npos);
  EXPECT_NE(with([&](float* g) {
              for (int64_t i = 0; i < count; ++i) g[i] += 0.3f * std::clamp(normal(rng), -2.5f, 2.5f);
            }),
            "");
  // One element wrong by a third of the largest magnitude, where nothing mixes it into the others.
  float big = 0;
  for (float v : w) big = std::max(big, std::fabs(v));
  EXPECT_NE(with([&](float* g) { g[17] += big / 3; }).find("element 17"), std::string::npos);
  // NaN or inf where the graph as written has none, or another one; the same ones pass.
  EXPECT_NE(with([](float* g) { g[3] = NAN; }), "");
  EXPECT_NE(with([](float* g) { g[3] = INFINITY; }), "");
  w[3] = INFINITY;
  EXPECT_NE(with([](float* g) { g[3] = -INFINITY; }), "");
  EXPECT_EQ(with([](float*) {}), "");
  w[3] = NAN;
  EXPECT_NE(with([](float* g) { g[3] = INFINITY; }), "");
  EXPECT_EQ(with([](float*) {}), "");
  EXPECT_NE(CompareProgramOutputs({want}, {want, want}), "");

  // Through the program search: the merged weight concatenated the wrong way round is dropped, with the
  // reason; the graph as written is chosen.
  testing::FreshCache cache("program-check");
  TwoProductsOfOneInput m;
  ASSERT_GE(m.rr.candidates.size(), 2u);
  for (const bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "parts reversed" : "parts in order");
    m.reversed = reversed;
    ProgramSearchOptions po;
    po.buckets = {{"rows", {{"seq", 4}}}};
    po.seconds_per_bucket = 0.05;
    const ProgramDecision d = ChooseProgram(
        m.rr, "cpu|test", [&](const Graph& cg) { return m.Build(cg); },
        [](Executable&, double) { return nlohmann::json::array(); }, po);
    int dropped = 0;
    for (size_t i = 0; i < m.rr.candidates.size(); ++i) {
      const nlohmann::json& t = d.receipt["timed"][i];
      const bool merged = t["rewrites"].dump().find("merge-linears") != std::string::npos;
      if (reversed && merged) {
        EXPECT_FALSE(t["passed"].get<bool>()) << t.dump();
        EXPECT_NE(t.value("error", "").find("where the graph as written gives"), std::string::npos);
        ++dropped;
      } else {
        EXPECT_TRUE(t["passed"].get<bool>()) << t.dump();
      }
    }
    EXPECT_EQ(dropped > 0, reversed);
    if (reversed) {
      EXPECT_EQ(d.receipt["chosen"], "as written");
    }
  }
}

// The program search chooses for a request: each bucket's median step times its steps. With the 1B shape's
// Q8_0 figures (ms; q/k/v merged is faster at decode, gate/up at a 128-token prompt), one step of each would
// choose gate/up; a request that decodes 128 tokens after its prompt chooses q/k/v, as the bench did.
TEST(Search, TheProgramScoreIsARequestsTime) {
  const nlohmann::json qkv = {{"decode", 27.4}, {"prefill", 218.0}},
                       gate_up = {{"decode", 28.4}, {"prefill", 205.6}};
  EXPECT_LT(RequestUs(gate_up, {}), RequestUs(qkv, {}));
  EXPECT_LT(RequestUs(qkv, {{"decode", 128}}), RequestUs(gate_up, {{"decode", 128}}));
  EXPECT_DOUBLE_EQ(RequestUs(qkv, {{"decode", 128}}), 128 * 27.4 + 218.0);
  EXPECT_DOUBLE_EQ(RequestUs(qkv, {{"prefill", 0}}), 27.4);
}

TEST(Search, ArtifactRunsWithoutCompilingAndRejectsStaleKernels) {
  testing::FreshCache cache("artifact", "cache");
  const std::filesystem::path& dir = cache.dir;
  auto lm = LanguageModel::Load(kStories, {"", 64, 1});
  auto receipts = lm->Tune(10);
  std::string art = (dir / "stories.prism").string();
  lm->SaveArtifact(art, receipts);
  for (const char* f : {"manifest.json", "kernels.cpp", "kernels.so", "schedule.json", "receipts.json"})
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(art) / f)) << f;
  // Loading the artifact compiles nothing: with the kernel cache removed, it still loads.
  std::filesystem::remove_all(dir / "cache");
  auto loaded = LanguageModel::Load(art);
  EXPECT_EQ(loaded->step_as<Program>().stats().so_path, art + "/kernels.so");
  // The artifact's schedule is the searched one (a lost schedule still computes the same logits, slowly).
  EXPECT_EQ(loaded->step_as<Program>().choices(), lm->step_as<Program>().choices());
  EXPECT_FALSE(loaded->step_as<Program>().choices().empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "cache" / "tuning.json"));  // nothing was searched again
  std::vector<int32_t> ids = lm->tokenizer().Encode("Lily", true);
  lm->Reset();
  std::vector<float> want = lm->Forward(ids), got = loaded->Forward(ids);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(want[i], got[i], 1e-4);
  // Edited kernels no longer match what this Prism renders: a clear error, not wrong answers.
  std::ofstream(std::filesystem::path(art) / "kernels.cpp", std::ios::app) << "// edited\n";
  EXPECT_THROW(LanguageModel::Load(art), Error);
}

// Before any search a reduction takes the loop order its loads favour: P·V (V read across keys) the
// reduce-outer order, under a cast too; a row sum (contiguous along its reduction) the usual one. Both
// match the interpreter.
TEST(Search, UnsearchedReductionsTakeTheOrderTheirLoadsFavour) {
  const Expr s = Expr::Sym("s");
  Graph g;
  Tensor p{&g, g.Input("p", DType::F32, {Expr(3), s, s})};
  Tensor v{&g, g.Input("v", DType::F32, {s, Expr(24)})};
  g.MarkOutput(Matmul(p, v).cast(DType::BF16).id(), "pv");
  Tensor x{&g, g.Input("x", DType::F32, {s, Expr(37)})};
  g.MarkOutput((x * x).sum({1}).id(), "rows");
  auto prog = Program::Compile(g);
  int pv = 0, rows = 0;
  for (size_t k = 0; k < prog->kernels().kernels.size(); ++k) {
    const Kernel& kn = prog->kernels().kernels[k];
    const std::string out = prog->kernels().buffers[kn.out_buffer].name;
    if (out == "pv") {
      ++pv;
      EXPECT_NE(prog->source().find(kn.name + "_ro("), std::string::npos) << "no reduce-outer order rendered";
      EXPECT_TRUE(prog->DefaultChoice(k, {{"s", 7}}).reduce_outer) << kn.name;
    }
    if (out == "rows") {
      ++rows;
      EXPECT_FALSE(prog->DefaultChoice(k, {{"s", 7}}).reduce_outer) << kn.name;
    }
  }
  EXPECT_EQ(pv, 1);
  EXPECT_EQ(rows, 1);
  testing::CheckGraph(g, {{{"s", 1}}, {{"s", 7}}, {{"s", 33}}}, 1e-2, 1e-2, 3, "unsearched orders");
}

namespace {

// The CPU's schedule space with each kernel's first candidate 100 ms slower when timed. Its step variants are
// not passed on (the base class offers none): only the kernels' races are under test.
class FirstCandidateSlowed : public ScheduleSpace {
 public:
  explicit FirstCandidateSlowed(std::unique_ptr<ScheduleSpace> in) : in_(std::move(in)) {}
  std::set<std::string> slowed;  // "kernel/candidate"
  const KernelProgram& kernels() const override { return in_->kernels(); }
  std::string identity() const override { return in_->identity(); }
  DeviceCeilings Ceilings(size_t k) const override { return in_->Ceilings(k); }
  void StartBucket(const std::string& b, const std::string& from, const SymbolBindings& sizes) override {
    in_->StartBucket(b, from, sizes);
  }
  SearchBuffers Prepare(const SymbolBindings& sizes, const std::vector<bool>& timed, bool whole_step,
                        uint64_t seed) override {
    return in_->Prepare(sizes, timed, whole_step, seed);
  }
  std::vector<ScheduleCandidate> Candidates(size_t k, nlohmann::json& notes) override {
    std::vector<ScheduleCandidate> c = in_->Candidates(k, notes);
    if (!c.empty()) slowed.insert(kernels().kernels[k].name + "/" + c[0].name);
    return c;
  }
  void BeforeReference(size_t k) override { in_->BeforeReference(k); }
  std::vector<double> RunAndRead(size_t k, const ScheduleCandidate& c,
                                 const std::vector<int64_t>& at) override {
    return in_->RunAndRead(k, c, at);
  }
  double ErrorBound(size_t k, const ScheduleCandidate& c, int64_t i) override {
    return in_->ErrorBound(k, c, i);
  }
  double TimeUs(size_t k, const ScheduleCandidate& c) override {
    const double us = in_->TimeUs(k, c);
    return slowed.count(kernels().kernels[k].name + "/" + c.name) ? us + 1e5 : us;
  }
  void Apply(const std::string& b, size_t k, const nlohmann::json& choice) override {
    in_->Apply(b, k, choice);
  }
  bool Runs(const std::string& b, size_t k) const override { return in_->Runs(b, k); }
  void Finish() override { in_->Finish(); }

 private:
  std::unique_ptr<ScheduleSpace> in_;
};

}  // namespace

// A candidate far slower than the fastest in the first timed round is timed no more: its receipt shows
// one run and raced_out, and it is not chosen; without the race (a factor nothing reaches) every passing
// candidate is timed min_runs times.
TEST(Search, CandidatesFarSlowerAfterTheFirstRoundLeaveTheRace) {
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), Expr(96)})};
  Tensor w{&g, g.Weight("w", DType::F32, {Expr(80), Expr(96)})};
  g.MarkOutput(Linear(x, w).id(), "y");
  const SymbolBindings b{{"seq", 5}};
  const auto weights = testing::RandomTensors(g, Op::Weight, b, 3);
  for (const double factor : {3.0, 1e30}) {
    CompileOptions copts;
    copts.threads = 2;
    auto prog = Program::Compile(g, copts);
    for (auto& [name, t] : weights) prog->BindWeight(name, t);
    FirstCandidateSlowed space(prog->OpenSearch());
    SearchOptions opts;
    opts.buckets = {{"prefill", b}};
    opts.db_path = (testing::MakeTempDir("race") / "tuning.json").string();
    opts.budget_seconds = testing::kUnreachedSearchBudget;
    opts.busy_limit = 1;
    opts.race_factor = factor;
    int raced = 0, slowed_timed = 0;
    for (const auto& r : SearchSchedules(space, opts)) {
      if (!r.contains("candidates")) continue;
      for (const auto& c : r["candidates"]) {
        if (!c.value("passed", false) || !c.contains("runs")) continue;
        const bool slow =
            space.slowed.count(r["kernel"].get<std::string>() + "/" + c["candidate"].get<std::string>());
        const bool out = c.value("raced_out", false);
        raced += out;
        if (slow && r["candidates"].size() > 1) {
          ++slowed_timed;
          EXPECT_NE(r["chosen"], c["candidate"]) << r.dump();
          EXPECT_EQ(out, factor < 1e9) << c.dump();
        }
        if (out) {
          EXPECT_EQ(c["runs"].get<int>(), 1) << c.dump();
        } else {
          EXPECT_GE(c["runs"].get<int>(), opts.min_runs) << c.dump();
        }
      }
    }
    EXPECT_GT(slowed_timed, 0) << "no kernel had a slowed candidate beside others";
    if (factor > 1e9) {
      EXPECT_EQ(raced, 0);
    }
  }
}

}  // namespace prism
