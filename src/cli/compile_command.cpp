// `prism compile`: compiles a model, searches kernel schedules within a budget, writes an artifact.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "cli/commands.h"
#include "ir/error.h"
#include "runtime/language_model.h"

namespace prism::cli {

Runner AddCompileCommand(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("compile", "Compile a model into an artifact folder (kernels, schedules, receipts)");
  struct Opts {
    bool exact = false;
    std::string model, out, tokenizer, replay, device = "cpu", program;
    double budget = 60;
    int64_t ctx = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "model path (default: the shipped stories260K)");
  cmd->add_option("-o,--output", o->out, "artifact folder to write, e.g. stories.prism")->required();
  cmd->add_option("--search-budget", o->budget,
                  "seconds of schedule search for the whole compile, shared by the candidate programs "
                  "(decisions already in the tuning database cost nothing)")
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "context size in tokens");
  cmd->add_option("--threads", o->threads, "threads the schedules are tuned for (default: all cores)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file (llama2.c checkpoints)");
  cmd->add_option("--replay", o->replay,
                  "search one kernel again (whatever the database holds), save the decision and print its "
                  "receipts");
  AddDeviceOption(cmd, o->device);
  AddProgramOption(cmd, o->program);
  AddExactOption(cmd, o->exact);
  return [o]() {
    auto t0 = std::chrono::steady_clock::now();
    std::string path = o->model.empty() ? DefaultModelPath() : o->model;
    // With --replay, the program is the database's (nothing timed); else the program search times the
    // rewritten candidates, each tuned within the budget, and the schedules below come from the database.
    LoadOptions lo;
    lo.tokenizer_path = o->tokenizer;
    lo.max_context = o->ctx;
    lo.threads = o->threads;
    lo.exact = o->exact;
    lo.search_budget = o->replay.empty() ? o->budget : -1.0;
    lo.device = o->device;
    lo.program = o->program;
    auto lm = LanguageModel::Load(path, lo);
    if (!o->replay.empty()) {
      auto receipts = lm->Tune(o->budget, o->replay, /*replay=*/true);
      std::printf("%s\n", receipts.dump(1).c_str());
      return 0;
    }
    // Progress on a terminal: the bucket, kernels reached of all, the budget left (redrawn in place).
    std::function<void(const std::string&, size_t, size_t, double)> progress;
    bool drew = false;
    if (isatty(STDERR_FILENO))
      progress = [&drew](const std::string& bucket, size_t done, size_t total, double left) {
        std::fprintf(stderr, "\rsearching %-12s kernel %4zu of %zu, %5.0f s of the budget left ",
                     bucket.c_str(), done + 1, total, std::max(0.0, left));
        drew = true;
      };
    auto receipts = lm->TuneRest(progress);
    if (drew) std::fprintf(stderr, "\n");
    receipts.push_back(lm->program_receipt());
    lm->SaveArtifact(o->out, receipts);
    int searched = 0, from_db = 0, defaults = 0;
    for (const auto& r : receipts) {
      if (r.value("scope", "") == "search" && !r.value("saved", true))
        std::fprintf(stderr,
                     "warning: other processes used %.0f%% of the CPU time while the %s schedules were "
                     "timed; they are used here but not saved to the tuning database\n",
                     100 * r.value("others_cpu_fraction", 0.0), r.value("bucket", "").c_str());
      std::string why = r.value("reason", "");
      if (why == "tuning database")
        from_db++;
      else if (r.contains("candidates"))
        searched++;
      else if (r.value("chosen", "") == "default" && r.contains("bucket"))
        defaults++;
    }
    std::printf(
        "%s -> %s: %zu kernels, %d schedule decisions searched, %d from the tuning database, "
        "%d left at their defaults, %.1f s of search, %.2f s\n",
        path.c_str(), o->out.c_str(), lm->step().kernel_count(), searched, from_db, defaults,
        lm->search_seconds(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
  };
}

}  // namespace prism::cli
