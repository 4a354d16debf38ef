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

std::unique_ptr<Executable> TextEncoder::Compile(const LmGraphOptions& go, const SymbolBindings& bucket,
                                                 const LoadOptions& opts,
                                                 std::map<std::string, HostTensor>* derived,
                                                 nlohmann::json* receipt) {
  Graph g = BuildTextEncoder(files_.config, files_.Lookup(), go);  // throws for a causal model
  CompileRequest req;
  req.threads = opts.threads;
  req.graph_replay = opts.gpu_graphs;
  req.exact = opts.exact;
  // The program: the graph's rewritten candidates (q/k/v merged, ...), chosen as a language model's are.
  RewriteOptions ro;
  ro.cost.sizes = bucket;
  ProgramSearchOptions po;
  po.db_path = TuningDatabasePath();
  po.measure = opts.search_budget > 0 && TimesPrograms(device_->name());
  po.busy_limit = opts.search_busy_limit;
  po.force = opts.program;
  po.buckets = {{"prefill", bucket}};
  const RewriteResult rr = opts.program == "as written" ? AsWritten(g, "not run: asked for as written")
                                                        : RewriteProgramKept(g, ro);
  ProgramDecision d = CompileModelProgram(
      *device_, rr, *files_.weights, req, derived, po, [&](Executable& exe, double share) {
        return TuneOn(exe, bucket, std::max(0.0, opts.search_budget) * share);
      });
  if (receipt) *receipt = std::move(d.receipt);
  return std::move(d.exe);
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
  enc->dim_ = cfg.hidden_size * (int64_t)enc->files_.pooling.modes.size();
  enc->search_busy_limit_ = opts.search_busy_limit;
  LmGraphOptions go;
  go.max_context = limit;
  go.pooling = enc->files_.pooling;
  go.encoder_batch = true;
  LoadOptions each = opts;  // one search budget: half of it each where there are two steps
  if (limit > kPackedTokens) each.search_budget = opts.search_budget / 2;
  enc->packed_ =
      enc->Compile(go, enc->PackedBucket(), each, &enc->packed_derived_weights_, &enc->program_receipt_);
  if (limit > kPackedTokens) {  // a packed step's mask is [tokens, tokens]: long inputs run alone
    go.encoder_batch = false;
    enc->exe_ = enc->Compile(go, enc->Bucket(), each, &enc->derived_weights_, nullptr);
  }
  enc->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return enc;
}

std::vector<int32_t> TextEncoder::WithSpecials(std::span<const int32_t> text_ids) const {
  const Tokenizer& tok = *files_.tokenizer;
  const size_t room = (size_t)std::max<int64_t>(max_tokens_ - (int64_t)tok.WithSpecial({}).size(), 0);
  return tok.WithSpecial(text_ids.first(std::min(text_ids.size(), room)));
}

std::vector<std::vector<float>> TextEncoder::EmbedMany(
    const std::vector<std::vector<int32_t>>& inputs) const {
  for (const std::vector<int32_t>& tokens : inputs) {
    if (tokens.empty()) throw Error("embed: no tokens");
    if ((int64_t)tokens.size() > max_tokens_)
      throw Error("embed: " + std::to_string(tokens.size()) + " tokens exceed the model's " +
                  std::to_string(max_tokens_));
    for (int32_t t : tokens)
      if (t < 0 || t >= files_.config.vocab_size)
        throw Error("embed: token id " + std::to_string(t) + " outside the vocabulary [0, " +
                    std::to_string(files_.config.vocab_size) + ")");
  }
  std::vector<std::vector<float>> out(inputs.size());
  std::lock_guard<std::mutex> lock(run_mutex_);
  for (size_t i = 0; i < inputs.size();) {
    if ((int64_t)inputs[i].size() > kPackedTokens) {  // alone, through the one-input graph
      out[i] =
          exe_->Run({{"tokens", HostTensor::FromInts({(int64_t)inputs[i].size()}, inputs[i])}})[0].ToFloats();
      ++i;
      continue;
    }
    // The next inputs that fit one step, in order.
    std::vector<int32_t> tokens, positions, segments, firsts, lasts;
    size_t j = i;
    for (; j < inputs.size() && (int64_t)tokens.size() < kStepRows &&
           (int64_t)(tokens.size() + inputs[j].size()) <= kPackedTokens;
         ++j) {
      firsts.push_back((int32_t)tokens.size());
      for (size_t p = 0; p < inputs[j].size(); ++p) {
        tokens.push_back(inputs[j][p]);
        positions.push_back((int32_t)p);
        segments.push_back((int32_t)(j - i));
      }
      lasts.push_back((int32_t)tokens.size() - 1);
    }
    const int64_t n = (int64_t)tokens.size(), texts = (int64_t)(j - i);
    const HostTensor e = packed_->Run({{"tokens", HostTensor::FromInts({n}, tokens)},
                                       {"positions", HostTensor::FromInts({n}, positions)},
                                       {"segments", HostTensor::FromInts({n}, segments)},
                                       {"firsts", HostTensor::FromInts({texts}, firsts)},
                                       {"lasts", HostTensor::FromInts({texts}, lasts)}},
                                      {{"texts", texts}})[0];  // a program whose pooling reads no firsts
    const std::vector<float> all = e.ToFloats();
    for (int64_t t = 0; t < texts; ++t)
      out[i + t].assign(all.begin() + t * dim_, all.begin() + (t + 1) * dim_);
    i = j;
  }
  return out;
}

nlohmann::json TextEncoder::Tune(double budget_seconds) {
  nlohmann::json receipts = TuneOn(*packed_, PackedBucket(), exe_ ? budget_seconds / 2 : budget_seconds);
  if (exe_)
    for (nlohmann::json& r : TuneOn(*exe_, Bucket(), budget_seconds / 2)) receipts.push_back(std::move(r));
  return receipts;
}

nlohmann::json TextEncoder::TuneOn(Executable& exe, const SymbolBindings& bucket,
                                   double budget_seconds) const {
  SearchOptions so;
  so.budget_seconds = budget_seconds;
  so.db_path = TuningDatabasePath();
  so.busy_limit = search_busy_limit_;
  so.buckets = {{"prefill", bucket}};
  return SearchSchedules(exe, so);
}

}  // namespace prism
