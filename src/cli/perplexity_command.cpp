// `prism perplexity`: perplexity of a text file over non-overlapping windows of N tokens.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "ir/error.h"
#include "runtime/language_model.h"

namespace prism::cli {

Runner AddPerplexityCommand(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("perplexity", "Perplexity of a text file (non-overlapping windows of --ctx tokens)");
  struct Opts {
    bool exact = false;
    std::string model, file, tokenizer;
    int64_t ctx = 512;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "Hugging Face folder, .gguf file, or llama2.c checkpoint")->required();
  cmd->add_option("-f,--file", o->file, "text file")->required();
  cmd->add_option("--ctx", o->ctx, "window size in tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  AddExactOption(cmd, o->exact);
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file");
  return [o]() {
    std::ifstream f(o->file, std::ios::binary);
    if (!f) throw Error(o->file + ": cannot read the text file");
    std::stringstream ss;
    ss << f.rdbuf();
    LoadOptions lo;
    lo.tokenizer_path = o->tokenizer;
    lo.max_context = o->ctx;
    lo.threads = o->threads;
    lo.exact = o->exact;
    auto lm = LanguageModel::Load(o->model, lo);
    // As transformers' perplexity guide with stride == window: the text is tokenized once (with
    // BOS), cut into windows of ctx tokens, and every token but each window's first is scored.
    std::vector<int32_t> ids = lm->tokenizer().Encode(ss.str(), true);
    const int64_t vocab = lm->config().vocab_size;
    double nll = 0;
    int64_t scored = 0;
    for (size_t start = 0; start + 1 < ids.size(); start += o->ctx) {
      std::vector<int32_t> window(ids.begin() + start, ids.begin() + std::min(ids.size(), start + o->ctx));
      if (window.size() < 2) break;
      std::vector<float> logits = lm->ForwardAll(window);
      for (size_t i = 0; i + 1 < window.size(); ++i) {
        const float* row = logits.data() + i * vocab;
        double mx = -INFINITY, z = 0;
        for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, (double)row[v]);
        for (int64_t v = 0; v < vocab; ++v) z += std::exp(row[v] - mx);
        nll += std::log(z) + mx - row[window[i + 1]];
        scored++;
      }
    }
    if (scored == 0) throw Error(o->file + ": too short to score (needs at least 2 tokens)");
    std::printf("perplexity: %.4g (%lld tokens scored, window %lld)\n", std::exp(nll / scored),
                (long long)scored, (long long)o->ctx);
    return 0;
  };
}

}  // namespace prism::cli
