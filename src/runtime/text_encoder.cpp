// TextEncoder: loads an encoder, compiles its graph with the pooling its folder asks for, embeds texts.
#include "runtime/text_encoder.h"

#include <chrono>
#include <filesystem>

#include "io/formats/gguf.h"
#include "ir/error.h"
#include "models/family.h"
#include "search/schedule_search.h"

namespace prism {
namespace fs = std::filesystem;

bool IsEncoderModel(const std::string& path) {
  std::string arch;
  if (const fs::path config = fs::path(path) / "config.json"; fs::is_directory(path) && fs::exists(config))
    arch = ParseHfConfig(config.string()).architecture;
  else if (fs::path(path).extension() == ".gguf")
    arch = LoadGguf(path)->Architecture();
  const ModelFamily* f = nullptr;
  for (const ModelFamily& m : ModelFamilies())
    if (m.name == arch) f = &m;
  return f && f->encoder;
}

std::unique_ptr<TextEncoder> TextEncoder::Load(const std::string& path, const LoadOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<TextEncoder> enc(new TextEncoder());
  enc->device_ = OpenDevice(opts.device);
  enc->files_ = OpenModelFiles(path, opts.tokenizer_path);
  const ModelConfig& cfg = enc->files_.config;
  int64_t limit = cfg.max_position;
  if (enc->files_.pooling.max_tokens > 0) limit = std::min(limit, enc->files_.pooling.max_tokens);
  if (opts.max_context > 0) limit = std::min(limit, opts.max_context);
  if (limit < 1)
    throw Error(path + ": the model takes no tokens (max_position_embeddings " +
                std::to_string(cfg.max_position) + ")");
  enc->max_tokens_ = limit;
  LmGraphOptions go;
  go.max_context = limit;
  go.pooling = enc->files_.pooling;
  Graph g = BuildTextEncoder(cfg, enc->files_.Lookup(), go);  // throws for a causal model
  enc->dim_ = cfg.hidden_size * (int64_t)go.pooling.modes.size();
  enc->search_busy_limit_ = opts.search_busy_limit;
  CompileRequest req;
  req.threads = opts.threads;
  req.graph_replay = opts.gpu_graphs;
  // The program: the graph's rewritten candidates (q/k/v merged, ...), chosen as a language model's are.
  RewriteOptions ro;
  ro.cost.sizes = enc->Bucket();
  ProgramSearchOptions po;
  po.db_path = TuningDatabasePath();
  po.measure = opts.search_budget > 0 && TimesPrograms(enc->device_->name());
  po.busy_limit = opts.search_busy_limit;
  po.force = opts.program;
  po.buckets = {{"prefill", enc->Bucket()}};
  const RewriteResult rr =
      opts.program == "as written" ? AsWritten(g, "not run: asked for as written") : RewriteProgram(g, ro);
  ProgramDecision d =
      CompileModelProgram(*enc->device_, rr, *enc->files_.weights, req, &enc->derived_weights_, po,
                          [&](Executable& exe) { enc->TuneOn(exe, std::max(0.0, opts.search_budget)); });
  enc->exe_ = std::move(d.exe);
  enc->program_receipt_ = std::move(d.receipt);
  enc->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return enc;
}

std::vector<int32_t> TextEncoder::WithSpecials(std::span<const int32_t> text_ids) const {
  const Tokenizer& tok = *files_.tokenizer;
  const size_t room = (size_t)std::max<int64_t>(max_tokens_ - (int64_t)tok.WithSpecial({}).size(), 0);
  return tok.WithSpecial(text_ids.first(std::min(text_ids.size(), room)));
}

std::vector<float> TextEncoder::Embed(const std::vector<int32_t>& tokens) const {
  if (tokens.empty()) throw Error("embed: no tokens");
  if ((int64_t)tokens.size() > max_tokens_)
    throw Error("embed: " + std::to_string(tokens.size()) + " tokens exceed the model's " +
                std::to_string(max_tokens_));
  for (int32_t t : tokens)
    if (t < 0 || t >= files_.config.vocab_size)
      throw Error("embed: token id " + std::to_string(t) + " outside the vocabulary [0, " +
                  std::to_string(files_.config.vocab_size) + ")");
  std::map<std::string, HostTensor> in{{"tokens", HostTensor::FromInts({(int64_t)tokens.size()}, tokens)}};
  std::lock_guard<std::mutex> lock(run_mutex_);
  return exe_->Run(in)[0].ToFloats();
}

nlohmann::json TextEncoder::TuneOn(Executable& exe, double budget_seconds) const {
  SearchOptions so;
  so.budget_seconds = budget_seconds;
  so.db_path = TuningDatabasePath();
  so.busy_limit = search_busy_limit_;
  so.buckets = {{"prefill", Bucket()}};
  return SearchSchedules(exe, so);
}

}  // namespace prism
