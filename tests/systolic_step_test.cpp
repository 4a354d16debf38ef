// The simulated systolic system's step: the timeline's transfers (gathers, partial sums, pieces read in
// place), its weight stream against the SRAM, which kernels work on pieces where they lie, and the row-split
// product's numerics within the rigorous bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/systolic/piece_layout.h"
#include "backends/systolic/simulator.h"
#include "backends/systolic/step_timeline.h"
#include "backends/systolic/systolic_device.h"
#include "models/transformer.h"
#include "runtime/language_model.h"
#include "stories_reference.h"

namespace prism {
namespace {

using testing::kStoriesDir;
constexpr double kUs = 1e-6;

TimedKernel OnDevices(TimedKernel::Where where, std::vector<int> devices, std::vector<int> reads, int write,
                      double seconds) {
  TimedKernel t;
  t.where = where;
  t.devices = std::move(devices);
  t.reads = std::move(reads);
  t.write = write;
  t.seconds = seconds;
  t.time.device_s = t.time.compute_s = seconds;
  return t;
}

// Buffers: 0 the step's input (on the host), 1 a weight (everywhere), 2 and 3 activations of `bytes`.
std::vector<TimedBuffer> Buffers(double bytes) {
  std::vector<TimedBuffer> b(4);
  b[0] = {TimedBuffer::Start::Host, 1024};
  b[1] = {TimedBuffer::Start::Everywhere, 0};
  b[2] = {TimedBuffer::Start::Nowhere, bytes};
  b[3] = {TimedBuffer::Start::Nowhere, bytes};
  return b;
}

// A column-split product's pieces: an elementwise kernel reading them in place starts as the product ends;
// one that needs them whole waits for a gather through the host (each device's piece up, the whole down).
TEST(SystolicTimeline, PiecesReadInPlaceOrGatheredThroughTheHost) {
  const SystolicDescription d = LoadSystolicDescription("quad");
  const double bytes = 4096, link = d.link_gbps * 1e9, lat = d.link_latency_us * kUs;
  auto run = [&](bool in_place) {
    std::vector<TimedKernel> ks = {OnDevices(TimedKernel::Where::Array, {0, 1, 2, 3}, {0, 1}, 2, 1 * kUs),
                                   OnDevices(TimedKernel::Where::Vector, {0, 1, 2, 3}, {2}, 3, 0.1 * kUs)};
    ks[0].out = TimedKernel::Out::Pieces;
    if (in_place) ks[1].in_place = {2};
    return RunStep(d, ks, Buffers(bytes), {3}, 10);
  };
  const StepTime here = run(true), gathered = run(false);
  EXPECT_NEAR(here.start[1], here.end[0], 1e-12);
  EXPECT_NEAR(gathered.start[1] - gathered.end[0], lat + bytes / 4 / link + lat + bytes / link, 1e-12);
  EXPECT_EQ(gathered.transfers - here.transfers, 8);  // four pieces up, four whole copies down
  // The launches come first: one program per device, in turn.
  EXPECT_NEAR(here.launch_s, d.devices * d.launch_us * kUs, 1e-12);
  EXPECT_GE(here.start[0], here.launch_s - 1e-12);
  // The output ends on the host: one copy up from a device that holds it whole.
  EXPECT_NEAR(here.seconds - here.end[1], lat + bytes / link, 1e-12);
}

// A row-split product leaves partial sums on every device: each goes up whole and the host adds them.
TEST(SystolicTimeline, PartialSumsGoUpWholeAndTheHostAddsThem) {
  const SystolicDescription d = LoadSystolicDescription("quad");
  const double bytes = 4096, link = d.link_gbps * 1e9, lat = d.link_latency_us * kUs, add_gbps = 16;
  std::vector<TimedKernel> ks = {OnDevices(TimedKernel::Where::Array, {0, 1, 2, 3}, {0, 1}, 2, 1 * kUs),
                                 OnDevices(TimedKernel::Where::Host, {}, {2}, 3, 0.5 * kUs)};
  ks[0].out = TimedKernel::Out::Partial;
  const StepTime t = RunStep(d, ks, Buffers(bytes), {3}, add_gbps);
  EXPECT_NEAR(t.start[1] - t.end[0], lat + bytes / link + 4 * bytes / (add_gbps * 1e9), 1e-12);
  EXPECT_NEAR(t.seconds, t.end[1], 1e-12);
}

// A device that waits for its input streams the product's weights meanwhile, as far as its weight SRAM holds
// them: with room for all of them the product takes its arrays' time alone, with little room its loads'.
TEST(SystolicTimeline, WeightsStreamAheadAsFarAsTheSramHolds) {
  SystolicDescription d = LoadSystolicDescription("quad");
  const double load = 3 * kUs, compute = 1 * kUs, weight_bytes = load * d.hbm_gbps * 1e9;
  auto run = [&](int64_t sram) {
    d.sram_weights = sram;
    d.weight_staging = 0;
    std::vector<TimedKernel> ks = {OnDevices(TimedKernel::Where::Vector, {0}, {0}, 2, 0.1 * kUs),
                                   OnDevices(TimedKernel::Where::Array, {0}, {1, 2}, 3, compute)};
    ks[1].time.hbm_s = load;
    ks[1].time.device_s = load + compute;
    std::vector<TimedBuffer> b = Buffers(4096);
    b[0].bytes = 256 * 1024;  // the input arrives long after the device's launch
    return RunStep(d, ks, b, {3}, 10);
  };
  const StepTime roomy = run((int64_t)(2 * weight_bytes)), tight = run(1024);
  EXPECT_NEAR(roomy.end[1] - roomy.start[1], compute, 1e-12);
  EXPECT_NEAR(tight.end[1] - tight.start[1], load - 1024 / (d.hbm_gbps * 1e9), 1e-12);
  EXPECT_GT(roomy.hidden_load_s, tight.hidden_load_s);
}

// stories260K's step: with the MLP's gate and up products split by column, the SiLU-times-up kernel works on
// their pieces where they lie (and its output lies like them); RMSNorm, a sum over the whole row, cannot.
TEST(SystolicLayouts, ElementwiseKernelsWorkOnPiecesWhereTheyLie) {
  ModelFiles mf = OpenModelFiles(kStoriesDir + "stories260K.bin");
  LmGraphOptions go;
  go.max_context = 32;
  const Graph g = BuildCausalLM(mf.config, mf.Lookup(), go);
  auto exe = CompileModelGraph(*OpenDevice("systolic"), g, *mf.weights, {});
  const KernelProgram& kp = dynamic_cast<SystolicProgram&>(*exe).kernels();
  const SymbolBindings b = {{"seq", 3}, {"past", 4}};
  const int64_t hidden = mf.config.intermediate_size, dim = mf.config.hidden_size;
  std::map<int, PieceLayout> pieces;
  for (const Kernel& kn : kp.kernels)
    if (kn.gemm && kn.gemm->n == hidden) pieces[kn.out_buffer] = SplitLayout(1, hidden, 4);
  ASSERT_EQ(pieces.size(), 2u * mf.config.num_layers);  // gate and up in every layer
  int local = 0;
  for (const Kernel& kn : kp.kernels) {
    if (kn.gemm || kn.attention) continue;
    std::map<int, PieceLayout> read;
    for (int r : KernelReads(kn))
      if (pieces.count(r)) read[r] = pieces.at(r);
    if (read.size() != 2) continue;
    const auto out = LocalLayout(kp, kn, read, b);
    ASSERT_TRUE(out.has_value()) << kn.name;
    EXPECT_EQ(*out, SplitLayout(1, hidden, 4)) << kn.name;
    local++;
  }
  EXPECT_EQ(local, mf.config.num_layers);
  // The down product's output split by column: the residual add works on its pieces (the residual stream
  // lies whole on every device), and the next RMSNorm, a sum over the whole row, cannot.
  pieces.clear();
  for (const Kernel& kn : kp.kernels)
    if (kn.gemm && kn.gemm->k == hidden) pieces[kn.out_buffer] = SplitLayout(1, dim, 4);
  int adds = 0, reductions = 0;
  for (const Kernel& kn : kp.kernels) {
    if (kn.gemm || kn.attention) continue;
    std::map<int, PieceLayout> read;
    for (int r : KernelReads(kn))
      if (pieces.count(r)) read[r] = pieces.at(r);
    if (read.empty()) continue;
    const auto out = LocalLayout(kp, kn, read, b);
    if (HasReduce(kn.value)) {
      EXPECT_FALSE(out.has_value()) << kn.name;
      reductions++;
    } else if (out) {
      pieces[kn.out_buffer] = *out;
      adds++;
    }
  }
  EXPECT_GE(adds, mf.config.num_layers);
  EXPECT_GE(reductions, mf.config.num_layers);
}

// A row-split product (k cut into one run per device, the runs' sums added on the host) within the rigorous
// bound of the exact sum, on random operands; a NaN operand gives NaN.
TEST(SystolicSimulator, RowSplitProductWithinItsBound) {
  const SystolicDescription d = LoadSystolicDescription("quad");
  std::mt19937 rng(2611);
  std::normal_distribution<float> nd(0, 1);
  const int64_t m = 3, n = 5, k = 333;
  std::vector<float> a(m * k), w(n * k), y(m * n), y1(m * n);
  for (float& x : a) x = nd(rng);
  for (float& x : w) x = nd(rng);
  const DeviceWeight dw = ToDeviceWeight(d, w.data(), DType::F32, n, k);
  const Tiling t{m, n, 128};
  SimulateGemm(d, a.data(), m, dw, t, y.data(), 4);
  SimulateGemm(d, a.data(), m, dw, t, y1.data(), 1);
  int differ = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0;
      for (int64_t c = 0; c < k; ++c) exact += (double)a[i * k + c] * w[j * k + c];
      EXPECT_LE(std::fabs(y[i * n + j] - exact), GemmErrorBound(d, a.data() + i * k, dw, j)) << i << "," << j;
      differ += y[i * n + j] != y1[i * n + j];
    }
  EXPECT_GT(differ, 0) << "the pieces' sums meet in another order than one device's";
  a[k + 7] = NAN;
  SimulateGemm(d, a.data(), m, dw, t, y.data(), 4);
  for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[n + j]));
}

}  // namespace
}  // namespace prism
