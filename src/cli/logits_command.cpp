// `prism logits`: dumps raw logits as JSON for parity tests against other implementations.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "ir/error.h"
#include "runtime/language_model.h"

namespace prism::cli {

static std::vector<int32_t> ParseIds(const std::string& s, const char* what) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      ids.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error(std::string(what) + ": '" + item + "' is not a token id");
    }
  }
  return ids;
}

Runner AddLogitsCommand(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("logits", "Write logits as JSON: a prefill, then teacher-forced decode steps");
  struct Opts {
    bool exact = false;
    std::string model, prompt_ids, decode_ids, out, tokenizer, text, device = "cpu", program;
    bool all = false;
    int64_t ctx = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "model path")->required();
  cmd->add_option("--prompt-ids", o->prompt_ids, "comma-separated prompt token ids");
  cmd->add_option("--text", o->text, "prompt text (tokenized with BOS) instead of ids");
  cmd->add_option("--decode-ids", o->decode_ids, "comma-separated ids fed one per decode step");
  cmd->add_flag("--all", o->all, "logits of every prompt position (else only the last)");
  cmd->add_option("--ctx", o->ctx, "context size");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file");
  cmd->add_option("-o,--out", o->out, "output JSON file")->required();
  AddDeviceOption(cmd, o->device);
  AddProgramOption(cmd, o->program);
  AddExactOption(cmd, o->exact);
  return [o]() {
    LoadOptions lo;
    lo.tokenizer_path = o->tokenizer;
    lo.max_context = o->ctx;
    lo.threads = 1;
    lo.exact = o->exact;
    lo.device = o->device;
    lo.program = o->program;
    auto lm = LanguageModel::Load(o->model, lo);
    std::vector<int32_t> prompt =
        o->text.empty() ? ParseIds(o->prompt_ids, "--prompt-ids") : lm->tokenizer().Encode(o->text, true);
    if (prompt.empty()) throw Error("logits: give --prompt-ids or --text");
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["prefill"] = o->all ? lm->ForwardAll(prompt) : lm->Forward(prompt);
    if (o->all) lm->Forward(prompt);
    j["decode"] = nlohmann::json::array();
    if (!o->decode_ids.empty())
      for (int32_t id : ParseIds(o->decode_ids, "--decode-ids")) j["decode"].push_back(lm->Forward({id}));
    std::ofstream f(o->out);
    f << j.dump();
    if (!f) throw Error(o->out + ": cannot write");
    return 0;
  };
}

}  // namespace prism::cli
