// `prism chat`: an interactive conversation rendered with the model's own chat template.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "ir/error.h"
#include "runtime/generator.h"

namespace prism::cli {

Runner AddChatCommand(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("chat", "Interactive chat using the model's chat template (one message per line)");
  struct Opts {
    bool exact = false;
    std::string model, system, tokenizer, device = "cpu";
    int n = 512, threads = 0;
    int64_t ctx = 0;
    float temp = 0.7f;
    uint64_t seed = 1;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "Hugging Face folder or .gguf file with a chat template")->required();
  cmd->add_option("--system", o->system, "system prompt");
  cmd->add_option("-n,--max-tokens", o->n, "tokens per reply")->capture_default_str();
  cmd->add_option("--temp", o->temp, "temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  AddExactOption(cmd, o->exact);
  cmd->add_option("--ctx", o->ctx, "context size in tokens");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file");
  AddDeviceOption(cmd, o->device);
  return [o]() {
    LoadOptions lo;
    lo.tokenizer_path = o->tokenizer;
    lo.max_context = o->ctx;
    lo.threads = o->threads;
    lo.exact = o->exact;
    lo.device = o->device;
    auto lm = LanguageModel::Load(o->model, lo);
    if (!lm->chat_template()) throw Error(o->model + ": the model has no chat template");
    std::vector<ChatMessage> messages;
    if (!o->system.empty()) messages.push_back({"system", o->system});
    GenerateOptions go;
    go.max_tokens = o->n;
    go.sampler.temperature = o->temp;
    go.sampler.seed = o->seed;
    go.add_special = false;  // the template writes BOS itself
    std::string line;
    std::fprintf(stderr, "chatting with %s; an empty line or end of input ends the conversation\n",
                 o->model.c_str());
    while (std::fputs("> ", stderr), std::getline(std::cin, line) && !line.empty()) {
      messages.push_back({"user", line});
      // Each turn re-renders the whole conversation: templates may change earlier text per turn.
      std::string prompt = lm->chat_template()->Render(messages, true, lm->chat_variables());
      auto r = Generate(*lm, prompt, go, [](const std::string& s) {
        std::fputs(s.c_str(), stdout);
        std::fflush(stdout);
      });
      std::printf("\n");
      messages.push_back({"assistant", r.text});
    }
    return 0;
  };
}

}  // namespace prism::cli
