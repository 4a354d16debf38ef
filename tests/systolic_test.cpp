// The simulated systolic-array system: its descriptions, its timing model against hand counts and the
// roofline, its bf16 kernels checked against the reference within rigorous bounds by the one search, the
// search's choices moving with the description, and stories260K's greedy text through the simulator.
#include <gtest/gtest.h>

#include <fstream>

#include "backends/systolic/systolic_device.h"
#include "ir/error.h"
#include "models/transformer.h"
#include "runtime/language_model.h"
#include "search/schedule_search.h"
#include "stories_reference.h"
#include "test_util.h"

namespace prism {
namespace {

using testing::kStoriesDir;

std::string ErrorOf(const nlohmann::json& j) {
  try {
    ParseSystolicDescription(j, "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SystolicDescription, BuiltinsParseAndBadFieldsGiveOneLineErrors) {
  for (const std::string& name : BuiltinSystolicDescriptions()) {
    const SystolicDescription d = LoadSystolicDescription(name);
    EXPECT_EQ(d.name, name);
    EXPECT_GT(d.PeakFlops(), 0);
    EXPECT_FALSE(d.sources.empty()) << name << " says where its figures come from";
  }
  const SystolicDescription quad = LoadSystolicDescription("");
  EXPECT_EQ(quad.devices, 4);
  EXPECT_DOUBLE_EQ(quad.hbm_bytes, 32.0 * (1 << 30));
  EXPECT_NEAR(quad.PeakFlops(), 275e12, 1e12);  // the published TPU v4 chip's bf16 rate
  EXPECT_FALSE(LoadSystolicDescription("quad-f32").bf16_products);
  nlohmann::json j = nlohmann::json::parse(SystolicDescriptionTexts().front().second);
  j["array"].erase("rows");
  EXPECT_EQ(ErrorOf(j), "test.json: missing number 'array.rows'");
  j = nlohmann::json::parse(SystolicDescriptionTexts().front().second);
  j["array"]["dataflow"] = "row_stationary";
  EXPECT_NE(ErrorOf(j).find("array.dataflow 'row_stationary'"), std::string::npos);
  j["array"]["dataflow"] = "weight_stationary";
  j["hbm"]["gbps"] = -1;
  EXPECT_EQ(ErrorOf(j), "test.json: 'hbm.gbps' must be positive, got -1");
  EXPECT_NE(ErrorOf({{"extends", "tpu"}}).find("extends 'tpu'"), std::string::npos);
  EXPECT_THROW(LoadSystolicDescription("/nonexistent/system.json"), Error);
  EXPECT_THROW(OpenDevice("cpu:edge"), Error);
  EXPECT_EQ(OpenDevice("systolic:edge")->name(), "systolic:edge");
}

TEST(SystolicTiming, ArrayCyclesCountFoldsFillAndDrain) {
  // SCALE-Sim's count (no double buffering; bench/systolic_scalesim.py compares): per output-stationary
  // fold the stream plus R + C - 2, per weight-stationary one the weights' shift-in (R) besides.
  SystolicDescription edge = LoadSystolicDescription("edge");  // 32x32, output stationary
  EXPECT_EQ(ArrayCycles(edge, 64, 64, 100), 4 * (100 + 32 + 32 - 2));
  edge.dataflow = Dataflow::WeightStationary;
  EXPECT_EQ(ArrayCycles(edge, 10, 40, 70), 3 * 2 * (10 + 64 + 32 - 2));
  // Double-buffered folds pay the skew once per array; eight arrays share the folds.
  const SystolicDescription quad = LoadSystolicDescription("quad");
  EXPECT_EQ(ArrayCycles(quad, 1, 2048, 2048), 256 / 8 * 128 + 254);
  EXPECT_EQ(ArrayCycles(quad, 512, 2048, 2048), 256 / 8 * 512 + 254);
}

TEST(SystolicTiming, NeverBeatsTheRooflineAndDecodeIsBoundByHbm) {
  for (const std::string& name : BuiltinSystolicDescriptions()) {
    const SystolicDescription d = LoadSystolicDescription(name);
    for (int64_t m : {1, 7, 128, 512})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 2048}, {8192, 2048}, {64, 48}, {1000, 333}})
        for (const Tiling& t : TilingCandidates(d, m, (n + d.devices - 1) / d.devices, k, 2))
          for (Placement p : {Placement::Column, Placement::Layer, Placement::Row}) {
            const KernelTime kt = PredictGemm(d, m, n, k, 2, t, p);
            EXPECT_GE(kt.seconds * (1 + 1e-9),
                      RooflineSeconds(d, kt.flops, kt.hbm_bytes) * d.devices / kt.devices)
                << name << " m=" << m << " n=" << n << " k=" << k;
            EXPECT_GE(kt.device_s, std::max(kt.compute_s, kt.hbm_s) * (1 - 1e-9));
            EXPECT_GT(kt.utilization, 0);
            EXPECT_LE(kt.utilization, 1 + 1e-9);
          }
  }
  // A decode product on the quad system streams its weights: the arrays wait for HBM, not the reverse.
  const SystolicDescription quad = LoadSystolicDescription("quad");
  const Tiling best = TilingCandidates(quad, 1, 2048, 2048, 2).front();
  const KernelTime kt = PredictGemm(quad, 1, 8192, 2048, 2, best, Placement::Column);
  EXPECT_GT(kt.hbm_s, kt.compute_s);
  EXPECT_NEAR(kt.hbm_s, 2048.0 * 2048 * 2 / 1200e9, 0.05 * kt.hbm_s);
}

// The bf16 simulator's kernels against the kernel IR in double: the one search checks every candidate
// (each tile and placement) within the simulator's rigorous per-output bound, and fails any beyond it.
SearchOptions Buckets(const std::string& db = "") {
  SearchOptions so;
  so.buckets = {{"decode", {{"seq", 1}, {"past", 9}}}, {"prefill", {{"seq", 37}, {"past", 0}}}};
  so.budget_seconds = 30;
  so.db_path = db;
  so.samples = 16;
  return so;
}

// stories260K's step compiled on a device; the model's files stay open while it runs (weights are borrowed).
struct Compiled {
  ModelFiles files;
  std::unique_ptr<Executable> exe;
};
Compiled StoriesOn(const std::string& device) {
  Compiled c{OpenModelFiles(kStoriesDir + "stories260K.bin"), nullptr};
  LmGraphOptions go;
  go.max_context = 64;
  const Graph g = BuildCausalLM(c.files.config, c.files.Lookup(), go);
  c.exe = CompileModelGraph(*OpenDevice(device), g, *c.files.weights, {});
  return c;
}

// Bucket/kernel -> chosen candidate, for the kernels on the devices (products and attention).
bool OnDevices(const nlohmann::json& receipt) {
  const std::string chosen = receipt.value("chosen", "");
  return chosen.rfind("column", 0) == 0 || chosen.rfind("layer", 0) == 0 || chosen.rfind("row", 0) == 0;
}
std::map<std::string, std::string> DeviceChoices(const nlohmann::json& receipts) {
  std::map<std::string, std::string> chosen;
  for (const auto& r : receipts)
    if (OnDevices(r))
      chosen[r["bucket"].get<std::string>() + "/" + r["kernel"].get<std::string>()] = r["chosen"];
  return chosen;
}

// The device kernels whose placement differs between the decode and prefill buckets.
int PlacementsDiffering(const nlohmann::json& receipts) {
  const auto chosen = DeviceChoices(receipts);
  int differ = 0;
  for (const auto& [key, v] : chosen)
    if (key.rfind("prefill/", 0) == 0)
      differ += v.substr(0, v.find('/')) != chosen.at("decode/" + key.substr(8)).substr(0, v.find('/'));
  return differ;
}

TEST(SystolicSearch, EveryCandidatePassesItsBoundAndChoicesFollowTheDescription) {
  Compiled q = StoriesOn("systolic"), e = StoriesOn("systolic:edge");
  Executable *quad = q.exe.get(), *edge = e.exe.get();
  const nlohmann::json rq = SearchSchedules(*quad, Buckets()), re = SearchSchedules(*edge, Buckets());
  int device_kernels = 0, searched = 0;
  for (const auto& r : rq) {
    if (!OnDevices(r)) continue;
    device_kernels++;
    if (!r.contains("candidates")) continue;  // a kernel equal to one searched already takes its choice
    searched++;
    for (const auto& c : r["candidates"]) {
      EXPECT_TRUE(c.value("passed", false)) << r.dump();
      EXPECT_GT(c.value("rel_error_bound", 0.0), 0) << "bf16 products have a bound";
    }
  }
  EXPECT_EQ(device_kernels,
            2 * (5 * 8 + 1));  // two buckets x (five layers x (seven products, attention), lm head)
  EXPECT_GE(searched, 2 * 5);
  const auto cq = DeviceChoices(rq), ce = DeviceChoices(re);
  ASSERT_EQ(cq.size(), ce.size());
  int differ = 0;
  for (const auto& [k, v] : cq) differ += ce.at(k) != v;
  EXPECT_GT(differ, (int)cq.size() / 2) << "the quad and edge systems should not choose alike";
  // The whole step's prediction under the choices: never past the roofline, and the parts add up.
  std::map<std::string, HostTensor> in;
  HostTensor tokens = HostTensor::Zeros(DType::I32, {3});
  for (int i = 0; i < 3; ++i) static_cast<int32_t*>(tokens.data)[i] = 1 + i;
  in["tokens"] = tokens;
  const nlohmann::json p = quad->PredictStep(in, {{"past", 0}});
  ASSERT_FALSE(p.is_null());
  EXPECT_GT(p["predicted_us"].get<double>(), 0);
  EXPECT_LE(p["roofline_fraction"].get<double>(), 1.0);
  EXPECT_EQ(p["furthest_from_roofline"].size(), 5u);
}

// Where weight loads cost little (quad) stories260K's tiny products stay whole on one device each: splitting
// them saves less than the transfers it adds. On a system with slow HBM the step's timeline spreads the MLP's
// products (the largest) over the devices, by column or by row (partial sums the host adds), and the search
// checks those forms within their bounds like any other.
TEST(SystolicSearch, PlacementFollowsTheStepTimeline) {
  const std::string path = ::testing::TempDir() + "/slow_hbm.json";
  {
    std::ofstream f(path);
    f << R"({"extends": "quad", "name": "quad-slow-hbm", "hbm": {"gbps": 1}})";
  }
  Compiled fast = StoriesOn("systolic"), slow = StoriesOn("systolic:" + path);
  int fast_split = 0, mlp = 0, slow_mlp_split = 0, rows = 0;
  auto split = [](const std::string& chosen) { return chosen.rfind("layer", 0) != 0; };
  for (const auto& r : SearchSchedules(*fast.exe, Buckets()))
    if (OnDevices(r) && r["bucket"] == "decode") fast_split += split(r["chosen"]);
  const nlohmann::json slow_receipts = SearchSchedules(*slow.exe, Buckets());
  // Every device holds every weight here, so each bucket reads them as suits its step.
  EXPECT_GT(PlacementsDiffering(slow_receipts), 0);
  for (const auto& r : slow_receipts) {
    if (!OnDevices(r) || r["bucket"] != "decode") continue;
    const std::string op = r.value("op", ""), chosen = r["chosen"];
    rows += chosen.rfind("row", 0) == 0;
    if (op.find("gate_proj") == std::string::npos && op.find("up_proj") == std::string::npos &&
        op.find("down_proj") == std::string::npos)
      continue;
    mlp++;
    slow_mlp_split += split(chosen);
    for (const auto& c : r.value("candidates", nlohmann::json::array()))
      EXPECT_TRUE(c.value("passed", false)) << r.dump();
  }
  EXPECT_EQ(fast_split, 0);
  EXPECT_EQ(mlp, 15);
  EXPECT_EQ(slow_mlp_split, mlp);
  EXPECT_GT(rows, 0);
}

// Where the devices cannot each hold every weight, the weights stay where the first bucket searched placed
// them (the decode step's choice): prefill chooses tiles only.
TEST(SystolicSearch, PlacementsHeldWhereTheWeightsCannotBeCopied) {
  const std::string path = ::testing::TempDir() + "/small_hbm.json";
  std::ofstream(path)
      << R"({"extends": "quad", "name": "quad-small-hbm", "hbm": {"gib": 0.0003, "gbps": 1}})";
  Compiled c = StoriesOn("systolic:" + path);
  const nlohmann::json receipts = SearchSchedules(*c.exe, Buckets());
  EXPECT_EQ(PlacementsDiffering(receipts), 0);
  EXPECT_GT(DeviceChoices(receipts).size(), 40u);
}

// A searched step saved as an artifact: loaded on the same description it reads each bucket's weights from
// the same places with the same tiles, and gives the same text; on another description it is refused.
TEST(SystolicSearch, ArtifactKeepsPlacementsAndTiles) {
  testing::FreshCache cache("systolic-artifact", "cache");
  LoadOptions lo;
  lo.device = "systolic:quad-f32";
  lo.max_context = 256;
  lo.search_busy_limit = 1;  // ctest runs other tests beside this one: save whatever was timed
  auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", lo);
  const nlohmann::json receipts = lm->Tune(60);
  const std::string dir = (cache.dir / "stories.prism").string();
  lm->SaveArtifact(dir, receipts);
  auto loaded = LanguageModel::Load(dir, lo);
  auto& searched = const_cast<SystolicProgram&>(lm->step_as<SystolicProgram>());
  auto& again = const_cast<SystolicProgram&>(loaded->step_as<SystolicProgram>());
  for (const SymbolBindings& b :
       {SymbolBindings{{"seq", 1}, {"past", 9}}, SymbolBindings{{"seq", 37}, {"past", 0}}})
    for (size_t k = 0; k < searched.kernels().kernels.size(); ++k) {
      if (!searched.OnDevice(k)) continue;
      EXPECT_EQ(DeviceChoiceToJson(again.ChoiceFor(k, b)), DeviceChoiceToJson(searched.ChoiceFor(k, b)))
          << k << " at seq " << b.at("seq");
    }
  testing::ExpectReferenceText(*loaded, "stories260K.prism on systolic:quad-f32");
  lo.device = "systolic";
  try {
    LanguageModel::Load(dir, lo);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("holds systolic:quad-f32 kernels"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Weights that do not fit the devices' HBM are refused with a one-line error, not simulated.
TEST(SystolicDevice, WeightsBeyondHbmAreRefused) {
  const std::string path = ::testing::TempDir() + "/tiny_hbm.json";
  std::ofstream(path) << R"({"extends": "edge", "name": "tiny", "hbm": {"gib": 0.0001}})";
  LoadOptions lo;
  lo.device = "systolic:" + path;
  auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", lo);
  try {
    lm->Forward({1, 2, 3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device 0 need"), std::string::npos) << m;
    EXPECT_NE(m.find("its HBM holds"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
}

// Greedy text through the simulator: with f32 products the whole reference (as the CPU gives it); with
// bf16 products its first 200 characters on every prompt (stories260K's logits are close enough later on
// that bf16 rounding picks other tokens).
TEST(SystolicStories, GreedyTextThroughTheSimulator) {
  for (const std::string d : {"systolic:quad-f32", "systolic", "systolic:edge"}) {
    LoadOptions lo;
    lo.device = d;
    auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", lo);
    EXPECT_EQ(lm->device(), d);
    testing::ExpectReferenceText(*lm, "stories260K.bin on " + d,
                                 d == "systolic:quad-f32" ? std::string::npos : 200);
  }
}

// Prompts on one device and generation on another, the KV cache handed over after each prompt and back
// before the next: the same greedy text, and the same logits through a chat-like sequence of steps.
TEST(SplitDevices, PrefillOnOneDecodeOnAnother) {
  for (auto [prefill, decode] :
       {std::pair<std::string, std::string>{"cpu", "systolic:quad-f32"}, {"systolic:quad-f32", "cpu"}}) {
    LoadOptions lo;
    lo.device = decode;
    lo.prefill_device = prefill;
    auto lm = LanguageModel::Load(kStoriesDir + "stories260K.bin", lo);
    EXPECT_EQ(lm->prefill_device(), prefill);
    EXPECT_EQ(lm->device(), decode);
    testing::ExpectReferenceText(*lm, "stories260K.bin prefilled on " + prefill + ", decoded on " + decode);
    ASSERT_FALSE(lm->last_handover().is_null());
    // A KV cache row is 2 (K, V) x 5 layers x 4 KV heads x 8 dims of f32.
    const nlohmann::json& h = lm->last_handover();
    EXPECT_EQ(h["bytes"].get<double>(), h["rows"].get<double>() * 2 * 5 * 32 * 4) << h.dump();
    EXPECT_EQ(h["link_s"].get<double>() > 0, true) << "a simulated device's link has a cost";
    auto cpu = LanguageModel::Load(kStoriesDir + "stories260K.bin");
    lm->Reset();
    const std::vector<std::vector<int32_t>> steps = {
        {1, 403, 407, 261, 506}, {29}, {30}, {31, 32, 33, 34}, {35}};
    const int64_t before = lm->handovers();
    std::vector<float> want, got;
    for (const auto& s : steps) {
      want = cpu->Forward(s);
      got = lm->Forward(s);
    }
    EXPECT_EQ(lm->handovers() - before, 3);  // after each prompt, and back before the second
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(want[i], got[i], 1e-4) << i;
  }
  LoadOptions bad;
  bad.prefill_device = "systolic:nonexistent";
  EXPECT_THROW(LanguageModel::Load(kStoriesDir + "stories260K.bin", bad), Error);
}

// State rows read from one device write into another's state of the same graph; rows that do not fit are
// refused in one line, on every device that hands state over.
TEST(SplitDevices, StateRowsRoundTripAndMisfitsAreRefused) {
  for (const std::string device : {"cpu", "interp", "systolic:quad-f32"}) {
    Compiled c = StoriesOn(device);
    std::string state;
    for (const Node& n : c.exe->graph().nodes())
      if (n.op == Op::State) state = n.name;
    ASSERT_FALSE(state.empty());
    // A KV cache's rows are its positions: axis 1 of the head-major [heads, positions, head_dim].
    ASSERT_EQ(StateRowAxis(c.exe->graph(), state), 1);
    HostTensor rows = c.exe->ReadStateRows(state, 0, 3);
    ASSERT_EQ(rows.shape.size(), 3u) << device;
    EXPECT_EQ(rows.shape[1], 3);
    const int64_t heads = rows.shape[0], dim = rows.shape[2];
    for (int64_t i = 0; i < rows.numel(); ++i) static_cast<float*>(rows.data)[i] = 0.5f + (float)i;
    c.exe->WriteStateRows(state, 0, rows);
    c.exe->WriteStateRows(state, 5, rows);  // and again from row 5: rows 3 and 4 stay as they were
    const HostTensor back = c.exe->ReadStateRows(state, 0, 8);
    auto at = [&](int64_t h, int64_t r, int64_t e) {
      return static_cast<const float*>(back.data)[(h * 8 + r) * dim + e];
    };
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < 8; ++r)
        for (int64_t e = 0; e < dim; ++e) {
          const float want = r < 3    ? 0.5f + (float)((h * 3 + r) * dim + e)
                             : r >= 5 ? 0.5f + (float)((h * 3 + r - 5) * dim + e)
                                      : 0.0f;
          ASSERT_EQ(at(h, r, e), want) << device << " head " << h << " row " << r;
        }
    HostTensor wrong = HostTensor::Zeros(DType::F32, {rows.shape[0] + 1, 3, rows.shape[2]});
    for (int64_t first : {int64_t{0}, int64_t{1} << 20}) {
      try {
        c.exe->WriteStateRows(state, first, first == 0 ? wrong : rows);
        FAIL() << device << ": expected an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      }
    }
    EXPECT_THROW(c.exe->ReadStateRows(state, 0, 1 << 20), Error) << device;
    EXPECT_THROW(c.exe->ReadStateRows(state, -1, 2), Error) << device;
  }
}

}  // namespace
}  // namespace prism
