// `prism embed`: sentence embeddings of texts from an encoder model, one JSON array per line.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "ir/error.h"
#include "runtime/text_encoder.h"

namespace prism::cli {

Runner AddEmbedCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "embed", "Print the embedding of each text (one JSON array per line), pooled as the model's files say");
  struct Opts {
    bool exact = false;
    std::string model, file, device = "cpu", program;
    std::vector<std::string> texts;
    bool tokens = false, timing = false;
    int threads = 0;
    int64_t max_tokens = 0;
    double search_budget = -1;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "an encoder model folder (BERT; sentence-transformers' files)")
      ->required();
  cmd->add_option("--text", o->texts, "a text to embed (repeat for more)");
  cmd->add_option("--file", o->file, "a file of texts, one per line ('-': standard input)");
  cmd->add_flag("--tokens", o->tokens, "print each text's token ids instead of its embedding");
  cmd->add_flag("--timing", o->timing, "print the load time and the embedding throughput to stderr");
  cmd->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  cmd->add_option("--max-tokens", o->max_tokens,
                  "truncate inputs to this many tokens (0: the model's limit)");
  cmd->add_option("--search-budget", o->search_budget, "seconds of schedule search (default: none)");
  AddDeviceOption(cmd, o->device);
  AddProgramOption(cmd, o->program);
  AddExactOption(cmd, o->exact);
  return [o]() {
    std::vector<std::string> texts = o->texts;
    if (!o->file.empty()) {
      std::ifstream in;
      if (o->file != "-") {
        in.open(o->file);
        if (!in) throw Error(o->file + ": cannot open file");
      }
      std::istream& s = o->file == "-" ? std::cin : in;
      for (std::string line; std::getline(s, line);) texts.push_back(line);
    }
    if (texts.empty()) throw Error("embed: give --text or --file");
    LoadOptions lo;
    lo.max_context = o->max_tokens;
    lo.threads = o->threads;
    lo.exact = o->exact;
    lo.device = o->device;
    lo.program = o->program;
    lo.search_budget = o->search_budget;
    auto enc = TextEncoder::Load(o->model, lo);
    const auto t0 = std::chrono::steady_clock::now();
    size_t tokens = 0;
    std::vector<std::vector<int32_t>> inputs;
    for (const std::string& t : texts) {
      inputs.push_back(enc->Tokenize(t));
      tokens += inputs.back().size();
    }
    if (o->tokens) {
      for (const std::vector<int32_t>& ids : inputs) std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    } else {
      for (const std::vector<float>& e : enc->EmbedMany(inputs))
        std::printf("%s\n", nlohmann::json(e).dump().c_str());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o->timing)
      std::fprintf(stderr, "prism embed: %zu texts, %zu tokens in %.3f s (%.1f tokens/s); load %.3f s\n",
                   texts.size(), tokens, s, tokens / s, enc->compile_seconds());
    return 0;
  };
}

}  // namespace prism::cli
