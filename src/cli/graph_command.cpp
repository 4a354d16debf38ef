// `prism graph`: shows what the compiler did — the graph, its kernels, generated source, Graphviz dot.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "backends/cpu/program.h"
#include "cli/commands.h"
#include "codegen/cpp_renderer.h"
#include "compiler/egraph/rewrite.h"
#include "ir/error.h"
#include "runtime/language_model.h"

namespace prism::cli {

namespace {

size_t ProductKernels(const KernelProgram& kp) {
  size_t n = 0;
  for (const Kernel& k : kp.kernels) n += k.gemm.has_value();
  return n;
}

// Saturation and extraction at decode sizes, as `prism graph --rewrites` prints them; returns the best
// program.
Graph PrintRewrites(const Graph& g, const FusionOptions& fo) {
  RewriteOptions ro;
  ro.cost.sizes = {{"seq", 1}, {"past", 64}};
  RewriteResult rr = RewriteProgram(g, ro);
  const SaturationReport& s = rr.saturation;
  std::printf(
      "rewrites: %d iteration(s), %zu -> %zu e-nodes, %zu -> %zu classes, stopped: %s (budget %zu nodes, "
      "%d iterations, %.0f s), %.2f s saturating, %.2f s extracting\n",
      s.iterations, s.nodes_start, s.nodes_end, s.classes_start, s.classes_end, s.stopped.c_str(),
      s.budget.max_nodes, s.budget.max_iterations, s.budget.max_seconds, s.seconds, rr.extract_seconds);
  std::printf("rules that fired (unions made):\n");
  for (const Rule& r : DefaultRules())
    if (auto it = s.fired.find(r.name); it != s.fired.end())
      std::printf("  %-26s %6zu  %s\n", r.name.c_str(), it->second, r.text.c_str());
  std::map<std::string, int> found;  // each merge the search found, and how many times
  for (const std::string& j : rr.joints) found[j]++;
  for (const auto& [j, times] : found) std::printf("  found: %s (x%d)\n", j.c_str(), times);
  for (const ProgramCandidate& c : rr.candidates) {
    KernelProgram kp = BuildKernelProgram(c.graph, fo);
    std::printf("candidate '%s': predicted %.1f us per decode step, %zu kernels (%zu products)\n",
                c.name.c_str(), 1e6 * c.predicted_seconds, kp.kernels.size(), ProductKernels(kp));
    for (const std::string& r : c.rewrites) std::printf("  %s\n", r.c_str());
  }
  return rr.candidates.size() > 1 ? rr.candidates[1].graph : g;
}

}  // namespace

Runner AddGraphCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("graph", "Print a model's graph, its fused kernels and their generated C++");
  struct Opts {
    std::string model, dot, tokenizer;
    int64_t layers = -1, ctx = 512;
    bool no_fuse = false, source = false, nodes = false, compile = false, rewrites = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "model path (default: the shipped stories260K)");
  cmd->add_option("--layers", o->layers, "keep only the first N transformer blocks (e.g. 1 for one block)");
  cmd->add_option("--ctx", o->ctx, "KV-cache capacity")->capture_default_str();
  cmd->add_flag("--no-fuse", o->no_fuse, "one kernel per primitive op (to compare against fusion)");
  cmd->add_flag("--nodes", o->nodes, "print every graph node");
  cmd->add_flag("--source", o->source, "print the generated C++");
  cmd->add_flag("--compile", o->compile, "also compile the kernels and report compile time (cached by hash)");
  cmd->add_flag(
      "--rewrites", o->rewrites,
      "saturate the graph under the rewrite rules: print the rules that fired, the candidate programs and "
      "their predicted decode cost, then the kernels of the cost model's best");
  cmd->add_option("--dot", o->dot, "write the graph as Graphviz dot to this file");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file (llama2.c checkpoints)");
  return [o]() {
    std::string path = o->model.empty() ? DefaultModelPath() : o->model;
    ModelFiles mf = OpenModelFiles(path, o->tokenizer);
    ModelConfig cfg = mf.config;
    if (o->layers >= 0) cfg.num_layers = std::min(cfg.num_layers, o->layers);
    LmGraphOptions go;
    go.max_context = o->ctx;
    go.conv1d_transposed = mf.conv1d_transposed;
    Graph g = BuildCausalLM(cfg, mf.Lookup(), go);
    FusionOptions fo = CompileOptions{}.fusion;  // the plan a CPU program gets
    fo.fuse = !o->no_fuse;
    if (o->rewrites) g = PrintRewrites(g, fo);
    KernelProgram kp = BuildKernelProgram(g, fo);
    if (o->nodes) std::fputs(g.ToText().c_str(), stdout);
    std::fputs(KernelProgramToText(g, kp).c_str(), stdout);
    std::string source = RenderCpp(kp);
    if (o->source) std::fputs(source.c_str(), stdout);
    if (!o->dot.empty()) {
      std::ofstream(o->dot) << g.ToDot();
      if (!std::ofstream(o->dot, std::ios::app)) throw Error(o->dot + ": cannot write the dot file");
    }
    std::printf("%s: %lld layer(s), %d graph nodes -> %zu kernels (%s)\n", path.c_str(),
                (long long)cfg.num_layers, g.size(), kp.kernels.size(), o->no_fuse ? "unfused" : "fused");
    if (o->compile) {
      CompileOptions co;
      co.fusion = fo;
      auto prog = Program::Compile(g, co);
      const CompileStats& s = prog->stats();
      std::printf("compile: plan %.3f s, %s %.3f s -> %s\n", s.plan_seconds,
                  s.cache_hit ? "cache hit, load" : "system compiler", s.compile_seconds, s.so_path.c_str());
    }
    return 0;
  };
}

}  // namespace prism::cli
