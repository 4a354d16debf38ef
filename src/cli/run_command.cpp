// `prism run`: loads a model, compiles it, streams generated text and a one-line speed summary.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "ir/error.h"
#include "runtime/generator.h"

namespace prism::cli {

std::string DefaultModelPath() {
  if (const char* env = std::getenv("PRISM_DEFAULT_MODEL"); env && *env) return env;
  // Next to the binary (build/prism -> models/), else the source tree it was built from.
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (auto dir = exe.parent_path(); !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    auto p = dir / "models/stories260K/stories260K.bin";
    if (std::filesystem::exists(p)) return p.string();
  }
  return PRISM_DEFAULT_MODEL_PATH;
}

Runner AddRunCommand(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("run", "Generate text from a prompt (default model: the shipped stories260K)");
  struct Opts {
    bool exact = false;
    std::string model, prompt = "Once upon a time", tokenizer, device = "cpu", prefill_device, program;
    int n = 256, threads = 0;
    int64_t ctx = 0;
    float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
    int top_k = 40;
    uint64_t seed = 0;
    bool seed_set = false;
    std::vector<std::string> stop;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "Hugging Face folder, .gguf file, or llama2.c checkpoint");
  cmd->add_option("-p,--prompt", o->prompt, "prompt text")->capture_default_str();
  cmd->add_option("-n,--max-tokens", o->n, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temp", o->temp, "temperature (0 = greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", o->top_k, "top-k filter (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "top-p filter (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->min_p, "min-p filter (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str();
  auto* seed = cmd->add_option("--seed", o->seed, "random seed (default: from the clock)");
  cmd->add_option("--stop", o->stop, "stop string (repeatable)");
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  cmd->add_option("--ctx", o->ctx, "context size in tokens (default: the model's, at most 4096)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file (llama2.c checkpoints)");
  AddDeviceOption(cmd, o->device);
  AddProgramOption(cmd, o->program);
  AddExactOption(cmd, o->exact);
  AddSplitDeviceOptions(cmd, o->device, o->prefill_device);
  return [o, seed]() {
    std::string path = o->model.empty() ? DefaultModelPath() : o->model;
    LoadOptions lo;
    lo.tokenizer_path = o->tokenizer;
    lo.max_context = o->ctx;
    lo.threads = o->threads;
    lo.exact = o->exact;
    lo.device = o->device;
    lo.program = o->program;
    lo.prefill_device = o->prefill_device;
    auto lm = LanguageModel::Load(path, lo);
    GenerateOptions go;
    go.max_tokens = o->n;
    go.stop = o->stop;
    go.sampler.temperature = o->temp;
    go.sampler.top_k = o->top_k;
    go.sampler.top_p = o->top_p;
    go.sampler.min_p = o->min_p;
    go.sampler.repeat_penalty = o->repeat_penalty;
    go.sampler.seed =
        seed->count() ? o->seed : (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    std::fputs(o->prompt.c_str(), stdout);
    auto r = Generate(*lm, o->prompt, go, [](const std::string& s) {
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    });
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "prompt: %d tokens, %.1f tokens/s | generated: %zu tokens, %.1f tokens/s | %s\n",
                 r.prompt_tokens, r.PromptTokensPerSecond(), r.tokens.size(), r.GenerateTokensPerSecond(),
                 r.finish_reason.c_str());
    if (lm->prefill_device() != lm->device())
      std::fprintf(stderr, "prompt on %s, generation on %s: KV cache handed over (%.0f bytes)\n",
                   lm->prefill_device().c_str(), lm->device().c_str(),
                   lm->last_handover().is_null() ? 0.0 : lm->last_handover().value("bytes", 0.0));
    return 0;
  };
}

}  // namespace prism::cli
