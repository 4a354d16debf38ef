// The program search on a graph that is not a language model: blocks of a parallel-residual MLP written with
// the frontend, x <- x + down(gelu(up(ln(x)))) + skip(ln(x)), saturated under the rewrite rules and the
// candidates compiled on the CPU, checked against the graph as written and timed a whole step at a time.
// Usage: prism_rewrite_mlp [dim hidden blocks rows [search seconds]]  (default 512 2048 4 16 10)
#include <cstdio>
#include <cstdlib>
#include <random>

#include "backends/device.h"
#include "frontend/nn.h"
#include "search/program_search.h"
#include "search/schedule_search.h"

using namespace prism;

int main(int argc, char** argv) {
  const int64_t dim = argc > 1 ? std::atoll(argv[1]) : 512, hidden = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int blocks = argc > 3 ? std::atoi(argv[3]) : 4;
  const int64_t rows = argc > 4 ? std::atoll(argv[4]) : 16;
  const double budget = argc > 5 ? std::atof(argv[5]) : 10;
  Graph g;
  Tensor x{&g, g.Input("x", DType::F32, {Expr::Sym("seq"), dim})};
  auto weight = [&](const std::string& name, std::vector<Expr> shape) {
    return Tensor{&g, g.Weight(name, DType::F32, shape)};
  };
  for (int b = 0; b < blocks; ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    Tensor h = LayerNorm(x, weight(p + "ln.weight", {dim}), weight(p + "ln.bias", {dim}), 1e-5);
    Tensor mlp = Linear(GeluTanh(Linear(h, weight(p + "up.weight", {hidden, dim}))),
                        weight(p + "down.weight", {dim, hidden}));
    x = x + mlp + Linear(h, weight(p + "skip.weight", {dim, dim}));
  }
  g.MarkOutput(x.id(), "y");

  // Random weights, and the rows of any weight a merge made.
  std::mt19937 rng(5);
  std::map<std::string, HostTensor> weights;
  for (const Node& n : g.nodes()) {
    if (n.op != Op::Weight) continue;
    HostTensor t = HostTensor::Zeros(DType::F32, EvalShape(n.shape, {}));
    FillRandomNonZero(t.data, DType::F32, t.numel(), rng);
    weights[n.name] = t;
  }
  const std::vector<std::pair<std::string, SymbolBindings>> buckets = {{"rows", {{"seq", rows}}},
                                                                       {"one", {{"seq", 1}}}};
  RewriteOptions ro;
  ro.cost.sizes = buckets[0].second;
  RewriteResult rr = RewriteProgram(g, ro);
  std::shared_ptr<Device> cpu = OpenDevice("cpu");
  auto build = [&](const Graph& cg) {
    std::unique_ptr<Executable> exe = cpu->Compile(cg);
    for (const Node& n : cg.nodes()) {
      if (n.op != Op::Weight) continue;
      if (!weights.count(n.name)) {
        std::vector<HostTensor> parts;
        for (const std::string& part : ConcatParts(n.name)) parts.push_back(weights.at(part));
        weights[n.name] = ConcatRows(parts, n.name);
      }
      exe->BindWeight(n.name, weights.at(n.name));
    }
    return exe;
  };
  auto tune = [&](Executable& exe, double share) {
    SearchOptions so;
    so.buckets = buckets;
    so.budget_seconds = budget * share;
    return SearchSchedules(exe, so);
  };
  ProgramSearchOptions po;
  po.buckets = buckets;
  po.seconds_per_bucket = 2;
  ProgramDecision d = ChooseProgram(rr, "cpu", build, tune, po);
  std::printf(
      "%d blocks, dim %lld, hidden %lld; saturation: %d iterations, %zu -> %zu e-nodes (%s), %.2f s\n",
      blocks, (long long)dim, (long long)hidden, rr.saturation.iterations, rr.saturation.nodes_start,
      rr.saturation.nodes_end, rr.saturation.stopped.c_str(), rr.saturation.seconds);
  std::printf("| program | kernels | %s us | %s us | rewrites |\n| --- | ---: | ---: | ---: | --- |\n",
              buckets[0].first.c_str(), buckets[1].first.c_str());
  for (const auto& t : d.receipt["timed"]) {
    std::string rw;
    for (const auto& r : t["rewrites"]) rw += (rw.empty() ? "" : "; ") + r.get<std::string>();
    const nlohmann::json us = t.value("median_us", nlohmann::json::object());
    std::printf("| %s | %d | %.1f | %.1f | %s |\n", t["candidate"].get<std::string>().c_str(),
                t.value("kernels", 0), us.value(buckets[0].first, 0.0), us.value(buckets[1].first, 0.0),
                rw.c_str());
  }
  std::printf("chosen: %s\n", d.receipt["chosen"].get<std::string>().c_str());
  return 0;
}
