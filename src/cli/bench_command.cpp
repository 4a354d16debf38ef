// `prism bench`: llama-bench style prompt-processing (ppN) and generation (tgN) tokens/s.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "ir/error.h"
#include "runtime/language_model.h"

namespace prism::cli {

namespace {

// A comma-separated list of counts (what: the option, for the error).
std::vector<int> ParseList(const std::string& s, const char* what) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    int n = -1;
    try {
      n = std::stoi(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || n < 0)
      throw Error(std::string("bench: ") + what + " '" + item + "' is not a count (0 or more)");
    v.push_back(n);
  }
  return v;
}

struct Stat {
  double mean, stdev;
};

Stat MeanStd(const std::vector<double>& xs) {
  double m = 0, v = 0;
  for (double x : xs) m += x;
  m /= xs.size();
  for (double x : xs) v += (x - m) * (x - m);
  return {m, xs.size() > 1 ? std::sqrt(v / (xs.size() - 1)) : 0.0};
}

}  // namespace

Runner AddBenchCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Prompt-processing and generation speed, llama-bench style");
  struct Opts {
    bool exact = false;
    std::string model, prompts = "128,512", threads = "1,2", tokenizer, device = "cpu", prefill_device,
                       program;
    int gen = 128, reps = 3, depth = 0;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "model path (default: the shipped stories260K)");
  cmd->add_option("-p,--n-prompt", o->prompts, "prompt lengths, comma-separated (ppN); 0 skips")
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", o->gen, "generated tokens (tgN); 0 skips")->capture_default_str();
  cmd->add_option("-d,--n-depth", o->depth,
                  "tokens in the KV cache before each test (llama-bench's depth; the name gains @ dN)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", o->threads, "thread counts, comma-separated")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->reps, "timed repetitions after one warm-up")->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per line instead of a table");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file (llama2.c checkpoints)");
  AddDeviceOption(cmd, o->device);
  AddProgramOption(cmd, o->program);
  AddExactOption(cmd, o->exact);
  AddSplitDeviceOptions(cmd, o->device, o->prefill_device);
  return [o]() {
    std::string path = o->model.empty() ? DefaultModelPath() : o->model;
    std::vector<int> prompts = ParseList(o->prompts, "--n-prompt"),
                     threads = ParseList(o->threads, "--threads");
    const bool gpu = o->device != "cpu";
    if (gpu) threads = {0};  // host threads play no part in a GPU step: one pass
    int max_prompt = prompts.empty() ? 0 : *std::max_element(prompts.begin(), prompts.end());
    if (!o->json)
      std::printf("| model | device | test | threads | tokens/s |\n| --- | --- | --- | ---: | ---: |\n");
    for (int t : threads) {
      LoadOptions lo;
      lo.tokenizer_path = o->tokenizer;
      lo.max_context = o->depth + std::max<int64_t>(max_prompt, o->gen) + 8;
      lo.threads = t;
      lo.exact = o->exact;
      lo.device = o->device;
      lo.program = o->program;
      lo.prefill_device = o->prefill_device;
      auto lm = LanguageModel::Load(path, lo);
      std::mt19937 rng(1234);
      std::uniform_int_distribution<int32_t> tok(0, (int32_t)lm->config().vocab_size - 1);
      // A simulated device's steps take the time its model predicts (its host kernels timed for real); a KV
      // cache handed between devices (--prefill-device) adds its copy and the simulated links' time.
      nlohmann::json predicted;  // the last step's prediction (null: it ran on a device timed by the clock)
      auto step_seconds = [&](const std::vector<int32_t>& ids) {
        const int64_t handovers = lm->handovers();
        predicted = lm->PredictForward(ids);
        double sec;
        if (!predicted.is_null()) {
          sec = predicted["predicted_us"].get<double>() * 1e-6;
        } else {
          auto t0 = std::chrono::steady_clock::now();
          lm->Forward(ids);
          sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        if (lm->handovers() != handovers) {
          const nlohmann::json& h = lm->last_handover();
          sec += h["link_s"].get<double>() + (predicted.is_null() ? 0 : h["wall_s"].get<double>());
        }
        return sec;
      };
      auto report = [&](const std::string& test, const std::vector<double>& tps) {
        Stat s = MeanStd(tps);
        if (o->json) {
          nlohmann::json j{
              {"model", path},    {"device", o->device}, {"prefill_device", lm->prefill_device()},
              {"test", test},     {"threads", t},        {"tokens_per_second", s.mean},
              {"stdev", s.stdev}, {"samples", tps}};
          if (!predicted.is_null()) {  // the last step's prediction, less its per-kernel list
            j["predicted_step"] = predicted;
            j["predicted_step"].erase("kernels");
          }
          std::printf("%s\n", j.dump().c_str());
        } else {
          const std::string note =
              !predicted.is_null()
                  ? " (predicted; " +
                        std::to_string((int)std::lround(100 * predicted.value("roofline_fraction", 0.0))) +
                        "% of roofline)"
                  : "";
          const std::string where = lm->prefill_device() == lm->device()
                                        ? lm->device()
                                        : "prompt " + lm->prefill_device() + ", generation " + lm->device();
          std::printf("| %s | %s | %s | %s | %.2f ± %.2f%s |\n", path.c_str(), where.c_str(), test.c_str(),
                      gpu ? "-" : std::to_string(t).c_str(), s.mean, s.stdev, note.c_str());
        }
        std::fflush(stdout);
      };
      // Each test starts from a reset cache holding `depth` random tokens (untimed).
      auto reset = [&]() {
        lm->Reset();
        if (o->depth == 0) return;
        std::vector<int32_t> ids(o->depth);
        for (auto& x : ids) x = tok(rng);
        lm->Forward(ids);
      };
      const std::string at = o->depth ? " @ d" + std::to_string(o->depth) : "";
      for (int p : prompts) {
        if (p <= 0) continue;  // llama-bench's `-p 0`: generation only
        std::vector<double> tps;
        for (int r = 0; r <= o->reps; ++r) {  // repetition 0 is the warm-up
          std::vector<int32_t> ids(p);
          for (auto& x : ids) x = tok(rng);
          reset();
          const double sec = step_seconds(ids);
          if (r > 0) tps.push_back(p / sec);
        }
        report("pp" + std::to_string(p) + at, tps);
      }
      if (o->gen > 0) {
        std::vector<double> tps;
        for (int r = 0; r <= o->reps; ++r) {
          reset();
          lm->Forward({tok(rng)});  // generation starts after one token, as llama-bench does
          double sec = 0;
          for (int i = 0; i < o->gen; ++i) sec += step_seconds({tok(rng)});
          if (r > 0) tps.push_back(o->gen / sec);
        }
        report("tg" + std::to_string(o->gen) + at, tps);
      }
    }
    return 0;
  };
}

}  // namespace prism::cli
