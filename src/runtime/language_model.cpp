// A language model ready to run: weights, config and tokenizer loaded, its step graph compiled.
#include "runtime/language_model.h"

#include <sys/mman.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "backends/cpu/jit.h"
#include "backends/cpu/machine_probe.h"
#include "ir/error.h"
#include "search/program_search.h"
#include "search/schedule_search.h"

namespace prism {
namespace fs = std::filesystem;

std::string TuningDatabasePath() { return KernelCacheDir() + "/tuning.json"; }

std::unique_ptr<LanguageModel> LanguageModel::Load(const std::string& path, const LoadOptions& opts) {
  if (IsArtifact(path)) return LoadArtifact(path, opts);
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<LanguageModel> lm(new LanguageModel());
  lm->device_ = OpenDevice(opts.device);  // before reading the model: a missing device fails fast
  lm->path_ = fs::absolute(path).string();
  lm->files_ = OpenModelFiles(path, opts.tokenizer_path);
  lm->tokenizer_path_ = opts.tokenizer_path;
  const ModelConfig& cfg = lm->files_.config;
  int64_t cap = cfg.max_position > 0 ? std::min<int64_t>(cfg.max_position, 4096) : 2048;
  lm->max_context_ = opts.max_context > 0 ? opts.max_context : cap;
  lm->threads_ = opts.threads;
  lm->search_busy_limit_ = opts.search_busy_limit;
  lm->graph_replay_ = opts.gpu_graphs;
  lm->exact_ = opts.exact;
  lm->SetBatching(opts);
  lm->program_ = opts.program;
  lm->search_budget_ = std::max(0.0, opts.search_budget);
  // The program and its schedules from the tuning database (and a search within the budget, if one was
  // given).
  lm->CompileProgram(opts.search_budget);
  if (!opts.prefill_device.empty() && opts.prefill_device != opts.device) {
    std::shared_ptr<Device> pd = OpenDevice(opts.prefill_device);
    lm->prefill_ = CompileModelGraph(
        *pd, lm->StepGraph(false), *lm->files_.weights,
        {.threads = opts.threads, .artifact_dir = "", .graph_replay = opts.gpu_graphs, .exact = opts.exact});
    // Its schedules from the tuning database (its own device's decisions), searched like the step's.
    std::swap(lm->step_, lm->prefill_);
    lm->TuneRest();
    std::swap(lm->step_, lm->prefill_);
    lm->kv_on_ = lm->step_.get();
  }
  lm->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

nlohmann::json LanguageModel::Tune(
    double budget_seconds, const std::string& only_kernel, bool replay,
    const std::function<void(const std::string&, size_t, size_t, double)>& progress) {
  return TuneOn(*step_, budget_seconds, only_kernel, replay, progress);
}

nlohmann::json LanguageModel::TuneRest(
    const std::function<void(const std::string&, size_t, size_t, double)>& progress) {
  return Tune(std::max(0.0, search_budget_ - search_seconds_), "", false, progress);
}

nlohmann::json LanguageModel::TuneOn(
    Executable& exe, double budget_seconds, const std::string& only_kernel, bool replay,
    const std::function<void(const std::string&, size_t, size_t, double)>& progress) const {
  SearchOptions so;
  so.budget_seconds = budget_seconds;
  so.db_path = TuningDatabasePath();
  so.only_kernel = only_kernel;
  so.replay = replay;
  so.busy_limit = search_busy_limit_;
  so.progress = progress;
  so.buckets = Buckets();
  if (kv_block_ == 0 && so.buckets.back().first == "prefill-long")
    so.inherit["prefill-long"] = {"prefill", "past"};
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json receipts = SearchSchedules(exe, so);
  search_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return receipts;
}

std::vector<std::pair<std::string, SymbolBindings>> LanguageModel::Buckets() const {
  const int64_t prefill = std::min<int64_t>(128, std::max<int64_t>(2, max_context_ / 2));
  if (kv_block_ > 0) {  // batched: the same buckets, the context as blocks, one row of logits
    auto blocks = [&](int64_t n) { return std::min<int64_t>((n + kv_block_ - 1) / kv_block_, kv_blocks_); };
    const int64_t ctx = blocks(std::min<int64_t>(max_context_, 65));
    return {{"decode", {{"seq", 1}, {"blocks", ctx}, {"rows", 1}}},
            {"batch", {{"seq", kBatchSeq}, {"blocks", ctx}, {"rows", kBatchSeq}}},
            {"batch-wide", {{"seq", kBatchWideSeq}, {"blocks", ctx}, {"rows", kBatchWideSeq}}},
            {"prefill", {{"seq", prefill}, {"blocks", blocks(prefill)}, {"rows", 1}}}};
  }
  const int64_t past = std::min<int64_t>(max_context_ - 1, 64);
  std::vector<std::pair<std::string, SymbolBindings>> b = {{"decode", {{"seq", 1}, {"past", past}}},
                                                           {"prefill", {{"seq", prefill}, {"past", 0}}}};
  // Short prompts and chat turns (2 to kBatchSeqMax - 1 tokens) get their own choices.
  if (max_context_ >= past + kBatchWideSeq)
    b.insert(b.begin() + 1, {"batch-wide", {{"seq", kBatchWideSeq}, {"past", past}}});
  if (max_context_ >= past + kBatchSeq)
    b.insert(b.begin() + 1, {"batch", {{"seq", kBatchSeq}, {"past", past}}});
  // Long prompts: attention searched again at 512 (or the context), the rest as in "prefill".
  if (const int64_t long_seq = std::min<int64_t>(512, max_context_); long_seq >= kLongPrefillSeq)
    b.push_back({"prefill-long", {{"seq", long_seq}, {"past", 0}}});
  return b;
}

RewriteResult LanguageModel::Rewrites() const {
  // The cost model ranks at decode sizes, where per-kernel costs weigh most. Its ceilings are its fixed
  // defaults, not this machine's probe: the same model must give the same candidates on every load (an
  // artifact regenerates its program by name), and the cost model only ranks what is timed.
  RewriteOptions ro;
  ro.cost.sizes = Buckets().front().second;
  return RewriteProgramKept(StepGraph(false), ro);
}

Graph LanguageModel::ProgramGraph(const std::string& name) const {
  if (name.empty() || name == "as written") return StepGraph(false);
  for (ProgramCandidate& c : Rewrites().candidates)
    if (c.name == name) return std::move(c.graph);
  throw Error(path_ + ": the rewrites no longer give a program named '" + name +
              "' (recompile the artifact)");
}

void LanguageModel::CompileProgram(double search_budget) {
  CompileRequest req;
  req.threads = threads_;
  req.graph_replay = graph_replay_;
  req.exact = exact_;
  ProgramSearchOptions po;
  po.db_path = TuningDatabasePath();
  po.measure = search_budget > 0 && TimesPrograms(device_->name());
  po.busy_limit = search_busy_limit_;
  po.force = program_;
  for (const auto& b : Buckets())  // the whole step at decode and at a prompt's length
    if (b.first == "decode" || b.first == "prefill") po.buckets.push_back(b);
  // The request a program is chosen for: a prompt of the prefill bucket's length, then as many tokens
  // generated (one decode step each). Per token a decode step costs several times a prompt token here, so
  // decode weighs most, as it does in a chat turn.
  for (const auto& [name, sizes] : po.buckets)
    if (name == "prefill") po.steps["decode"] = (double)sizes.at("seq");
  const RewriteResult rr =
      program_ == "as written" ? AsWritten(StepGraph(false), "not run: asked for as written") : Rewrites();
  ProgramDecision d = CompileModelProgram(
      *device_, rr, *files_.weights, req, &derived_weights_, po,
      [&](Executable& exe, double share) { return TuneOn(exe, std::max(0.0, search_budget) * share); });
  step_ = std::move(d.exe);
  program_ = rr.candidates[d.chosen].name;
  program_receipt_ = std::move(d.receipt);
}

bool LanguageModel::IsArtifact(const std::string& path) {
  return fs::is_directory(path) && fs::exists(fs::path(path) / "manifest.json");
}

void LanguageModel::SaveArtifact(const std::string& dir, const nlohmann::json& receipts) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create the artifact folder: " + ec.message());
  nlohmann::json m{
      {"format", "prism-artifact-1"}, {"device", step_->device()},   {"model", path_},
      {"tokenizer", tokenizer_path_}, {"max_context", max_context_}, {"architecture", config().architecture},
      {"program", program_}};
  step_->SaveArtifact(dir, m);  // the device's files, and its entries in the manifest
  std::ofstream(fs::path(dir) / "receipts.json") << receipts.dump(1);
  std::ofstream f(fs::path(dir) / "manifest.json");
  f << m.dump(1);
  if (!f) throw Error(dir + ": cannot write manifest.json");
}

std::unique_ptr<LanguageModel> LanguageModel::LoadArtifact(const std::string& dir, const LoadOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  std::ifstream mf(fs::path(dir) / "manifest.json");
  if (!mf) throw Error(dir + ": artifact has no manifest.json");
  nlohmann::json m = nlohmann::json::parse(mf, nullptr, false);
  if (m.is_discarded()) throw Error(dir + "/manifest.json: not valid JSON");
  if (m.value("format", "") != "prism-artifact-1")
    throw Error(dir + "/manifest.json: unknown artifact format");
  const std::string device = m.value("device", "cpu");
  if (opts.device != device)
    throw Error(dir + ": a compiled artifact holds " + device + " kernels; give the model files to run on " +
                opts.device);
  if (!opts.prefill_device.empty() && opts.prefill_device != device)
    throw Error(dir + ": a compiled artifact runs on one device; give the model files to prefill on " +
                opts.prefill_device);
  std::unique_ptr<LanguageModel> lm(new LanguageModel());
  lm->device_ = OpenDevice(device);
  lm->path_ = m.value("model", "");
  lm->tokenizer_path_ = opts.tokenizer_path.empty() ? m.value("tokenizer", "") : opts.tokenizer_path;
  lm->files_ = OpenModelFiles(lm->path_, lm->tokenizer_path_);
  lm->max_context_ = m.value("max_context", (int64_t)2048);
  lm->threads_ = opts.threads;
  lm->search_busy_limit_ = opts.search_busy_limit;
  lm->graph_replay_ = opts.gpu_graphs;
  lm->exact_ = opts.exact;
  lm->SetBatching(opts);
  lm->program_ = m.value("program", "as written");
  lm->search_budget_ = std::max(0.0, opts.search_budget);
  if (lm->kv_block_ > 0)  // the artifact holds the one-sequence step: compile the batched one (same program)
    lm->CompileProgram(opts.search_budget);
  else
    lm->step_ = lm->CompileStep(false, dir);
  lm->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

Graph LanguageModel::StepGraph(bool all_logits) const {
  LmGraphOptions go;
  go.max_context = max_context_;
  go.all_logits = all_logits;
  go.conv1d_transposed = files_.conv1d_transposed;
  go.kv_block = kv_block_;
  go.kv_blocks = kv_blocks_;
  return BuildCausalLM(files_.config, files_.Lookup(), go);
}

namespace {

// After a merged weight is made from its parts, the parts' pages go back (a file mapping's are read again if
// anything asks; anonymous memory keeps its contents): the program reads the copy, and memory holds one.
void ReleasePages(const void* p, size_t bytes) {
#ifdef MADV_PAGEOUT
  const uintptr_t page = 4096, begin = ((uintptr_t)p + page - 1) / page * page,
                  end = ((uintptr_t)p + bytes) / page * page;
  if (end > begin) madvise((void*)begin, end - begin, MADV_PAGEOUT);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace

std::unique_ptr<Executable> CompileModelGraph(Device& device, const Graph& g, const WeightStore& store,
                                              const CompileRequest& req,
                                              std::map<std::string, HostTensor>* derived) {
  std::unique_ptr<Executable> exe = device.Compile(g, req);
  auto stored = [&](const std::string& name) {
    const TensorData& t = store.Get(name);
    HostTensor h = HostTensor::Borrow(t.dtype, t.shape, t.data);
    h.owner = store.Lifetime();  // the candidates of a program search share the copies made of it
    return h;
  };
  for (const Node& n : g.nodes()) {
    if (n.op != Op::Weight) continue;
    const std::vector<std::string> parts = ConcatParts(n.name);
    if (parts.empty()) {
      exe->BindWeight(n.name, stored(n.name));
      continue;
    }
    if (!derived)
      throw Error(store.Source() + ": weight '" + n.name + "' is made by a rewrite; nothing keeps it");
    auto it = derived->find(n.name);
    if (it == derived->end()) {
      std::vector<HostTensor> ts;
      for (const std::string& p : parts) ts.push_back(stored(p));
      it = derived->emplace(n.name, ConcatRows(ts, store.Source() + ": weight '" + n.name + "'")).first;
      for (const HostTensor& t : ts) ReleasePages(t.data, (size_t)t.nbytes());
    }
    exe->BindWeight(n.name, it->second);
  }
  return exe;
}

ProgramDecision CompileModelProgram(Device& device, const RewriteResult& rr, const WeightStore& store,
                                    const CompileRequest& req, std::map<std::string, HostTensor>* derived,
                                    const ProgramSearchOptions& po,
                                    const std::function<nlohmann::json(Executable&, double share)>& tune) {
  auto build = [&](const Graph& g) { return CompileModelGraph(device, g, store, req, derived); };
  // Where the decision holds: the device, the host's CPU (which runs it, or feeds a GPU) and the team's size.
  const std::string identity =
      device.name() + "|" + CpuModelName() + "|threads " + std::to_string(req.threads);
  ProgramDecision d = ChooseProgram(rr, identity, build, tune, po);
  // Merged weights only the candidates not chosen read are let go.
  for (auto it = derived->begin(); it != derived->end();) {
    bool used = false;
    for (const Node& n : d.exe->graph().nodes()) used |= n.op == Op::Weight && n.name == it->first;
    it = used ? std::next(it) : derived->erase(it);
  }
  return d;
}

std::unique_ptr<Executable> LanguageModel::CompileStep(bool all_logits,
                                                       const std::string& artifact_dir) const {
  CompileRequest req;
  req.threads = threads_;
  req.artifact_dir = artifact_dir;
  req.graph_replay = graph_replay_;
  req.exact = exact_;
  if (all_logits) return CompileModelGraph(*device_, StepGraph(true), *files_.weights, req);
  return CompileModelGraph(*device_, ProgramGraph(program_), *files_.weights, req, &derived_weights_);
}

void LanguageModel::CheckTokens(std::span<const int32_t> tokens, int64_t past) const {
  if (tokens.empty()) throw Error("forward: no tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= files_.config.vocab_size)
      throw Error("forward: token id " + std::to_string(t) + " outside the vocabulary [0, " +
                  std::to_string(files_.config.vocab_size) + ")");
  if (past + (int64_t)tokens.size() > max_context_)
    throw Error("context full: " + std::to_string(past) + " + " + std::to_string(tokens.size()) +
                " tokens exceed " + std::to_string(max_context_) + " (raise --ctx)");
}

void LanguageModel::SetBatching(const LoadOptions& opts) {
  if (opts.kv_block <= 0) return;
  int64_t blocks = opts.kv_blocks;
  if (blocks == 0) {
    const ModelConfig& c = files_.config;
    const int64_t token_bytes = 2 * c.num_layers * c.num_kv_heads * c.head_dim * (int64_t)sizeof(float);
    const int64_t need =
        (std::max<int64_t>(opts.kv_sequences, 1) * max_context_ + opts.kv_block - 1) / opts.kv_block;
    blocks = std::min(need, opts.kv_memory_bytes / std::max<int64_t>(token_bytes * opts.kv_block, 1));
  }
  if (blocks < 1 || blocks * opts.kv_block > INT32_MAX)
    throw Error("batched model: a KV pool of " + std::to_string(blocks) + " blocks of " +
                std::to_string(opts.kv_block) +
                " tokens (give it at least one block, fewer than 2^31 tokens)");
  kv_block_ = opts.kv_block;
  kv_blocks_ = blocks;
}

LogitRows LanguageModel::StepBatch(const std::vector<BatchPiece>& pieces) {
  if (kv_block_ <= 0)
    throw Error("StepBatch: the model was loaded for one sequence (set LoadOptions::kv_block)");
  if (pieces.empty()) throw Error("StepBatch: no pieces");
  const int64_t b = kv_block_;
  int64_t width = 1;
  for (const BatchPiece& p : pieces) {
    CheckTokens(p.tokens, p.position);
    const int64_t need = (p.position + (int64_t)p.tokens.size() + b - 1) / b;
    if ((int64_t)p.blocks.size() < need)
      throw Error("StepBatch: positions up to " + std::to_string(p.position + p.tokens.size()) + " need " +
                  std::to_string(need) + " blocks, the piece has " + std::to_string(p.blocks.size()));
    for (int32_t blk : p.blocks)
      if (blk < 0 || blk >= kv_blocks_)
        throw Error("StepBatch: block " + std::to_string(blk) + " outside the pool [0, " +
                    std::to_string(kv_blocks_) + ")");
    width = std::max(width, need);
  }
  if (!prefill_) return RunBatch(*step_, pieces, width);
  // Prompts (pieces of several tokens) run on the prefill device, the rest here: a prompt's earlier rows
  // (a chunk after the first, a shared prefix) go to the prefill device first, the rows it writes come here
  // after it.
  std::vector<BatchPiece> prompts, steps;
  for (const BatchPiece& p : pieces) (p.tokens.size() > 1 ? prompts : steps).push_back(p);
  LogitRows from_prompts, from_steps;
  if (!prompts.empty()) {
    std::vector<std::pair<int64_t, int64_t>> before, written;
    for (const BatchPiece& p : prompts) {
      PieceRows(p, 0, p.position, &before);
      PieceRows(p, p.position, p.position + (int64_t)p.tokens.size(), &written);
    }
    if (!before.empty()) HandOver(*step_, *prefill_, before);
    from_prompts = RunBatch(*prefill_, prompts, width);
    HandOver(*prefill_, *step_, written);
  }
  if (!steps.empty()) from_steps = RunBatch(*step_, steps, width);
  LogitRows out;
  for (LogitRows* from : {&from_prompts, &from_steps})
    out.outputs.insert(out.outputs.end(), from->outputs.begin(), from->outputs.end());
  size_t a = 0, c = 0;
  for (const BatchPiece& p : pieces)
    if (p.logits) out.rows.push_back(p.tokens.size() > 1 ? from_prompts[a++] : from_steps[c++]);
  return out;
}

void LanguageModel::PieceRows(const BatchPiece& p, int64_t from, int64_t to,
                              std::vector<std::pair<int64_t, int64_t>>* ranges) const {
  for (int64_t pos = from; pos < to;) {  // one run of rows per block
    const int64_t end = std::min(to, (pos / kv_block_ + 1) * kv_block_);
    ranges->push_back({p.blocks[pos / kv_block_] * kv_block_ + pos % kv_block_, end - pos});
    pos = end;
  }
}

LogitRows LanguageModel::RunBatch(Executable& exe, const std::vector<BatchPiece>& pieces, int64_t width) {
  const int64_t b = kv_block_;
  int64_t n = 0;
  for (const BatchPiece& p : pieces) n += (int64_t)p.tokens.size();
  std::vector<int32_t> tokens, positions, slots, table, rows;
  tokens.reserve(n), positions.reserve(n), slots.reserve(n), table.reserve(n * width);
  for (const BatchPiece& p : pieces) {
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      const int64_t pos = p.position + (int64_t)i;
      tokens.push_back(p.tokens[i]);
      positions.push_back((int32_t)pos);
      slots.push_back((int32_t)(p.blocks[pos / b] * b + pos % b));
      // The sequence's blocks, padded with its first (masked: past this token's position).
      for (int64_t j = 0; j < width; ++j)
        table.push_back(j < (int64_t)p.blocks.size() ? p.blocks[j] : p.blocks[0]);
    }
    if (p.logits) rows.push_back((int32_t)tokens.size() - 1);
  }
  const size_t wanted = rows.size();
  if (rows.empty()) rows.push_back(0);  // the graph computes at least one row; dropped below
  std::map<std::string, HostTensor> in{{"tokens", HostTensor::FromInts({n}, tokens)},
                                       {"positions", HostTensor::FromInts({n}, positions)},
                                       {"slots", HostTensor::FromInts({n}, slots)},
                                       {"block_table", HostTensor::FromInts({n, width}, table)},
                                       {"logit_rows", HostTensor::FromInts({(int64_t)rows.size()}, rows)}};
  LogitRows out;
  out.outputs.push_back(std::move(exe.Run(in)[0]));
  const int64_t vocab = files_.config.vocab_size;
  if (out.outputs[0].dtype != DType::F32 || out.outputs[0].numel() < (int64_t)rows.size() * vocab)
    throw Error("StepBatch: the step's logits came back as " + out.outputs[0].ShapeString() + " " +
                std::string(DTypeName(out.outputs[0].dtype)) + ", not f32 rows of " + std::to_string(vocab));
  const float* all = static_cast<const float*>(out.outputs[0].data);
  for (size_t r = 0; r < wanted; ++r) out.rows.emplace_back(all + (int64_t)r * vocab, (size_t)vocab);
  return out;
}

void LanguageModel::CopyKvRows(int64_t from, int64_t to, int64_t count) {
  if (kv_block_ == 0) throw Error("CopyKvRows: the model is not batched");
  const int64_t rows = kv_blocks_ * kv_block_;
  if (count < 0 || from < 0 || to < 0 || from + count > rows || to + count > rows)
    throw Error("CopyKvRows: rows [" + std::to_string(from) + ", +" + std::to_string(count) + ") -> [" +
                std::to_string(to) + ", ...) outside the pool's " + std::to_string(rows));
  for (const Node& n : step_->graph().nodes())  // the pool's home: the prefill device gets rows handed over
    if (n.op == Op::State) step_->WriteStateRows(n.name, to, step_->ReadStateRows(n.name, from, count));
}

void LanguageModel::HandOver(Executable& from, Executable& to,
                             const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  const auto t0 = std::chrono::steady_clock::now();
  double bytes = 0, link = 0;
  int64_t rows = 0;
  for (const auto& [first, count] : ranges) rows += count;
  for (const Node& n : from.graph().nodes()) {
    if (n.op != Op::State) continue;
    double state_bytes = 0;
    for (const auto& [first, count] : ranges) {
      const HostTensor t = from.ReadStateRows(n.name, first, count);
      to.WriteStateRows(n.name, first, t);
      state_bytes += (double)t.nbytes();
    }
    bytes += state_bytes;
    link += from.StateTransferSeconds(state_bytes) + to.StateTransferSeconds(state_bytes);
  }
  handovers_++;
  last_handover_ = {{"from", from.device()},
                    {"to", to.device()},
                    {"rows", rows},
                    {"bytes", bytes},
                    {"wall_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                    {"link_s", link}};
}

Executable& LanguageModel::StepFor(size_t n) {
  if (!prefill_) return *step_;
  // A prompt runs on the prefill device: the cache comes back first when decoding wrote to it since.
  Executable& exe = n > 1 ? *prefill_ : *step_;
  if (kv_on_ != &exe && past_ > 0) HandOver(*kv_on_, exe, {{0, past_}});
  kv_on_ = &exe;
  return exe;
}

void LanguageModel::Advance(Executable& exe, size_t n) {
  past_ += (int64_t)n;
  // After a prompt the cache goes to the decoding device at once: its cost is part of the first token's.
  if (&exe == prefill_.get()) {
    HandOver(exe, *step_, {{0, past_}});
    kv_on_ = step_.get();
  }
}

std::vector<float> LanguageModel::Forward(const std::vector<int32_t>& tokens) {
  if (kv_block_ > 0) throw Error("forward: a batched model steps sequences with StepBatch");
  CheckTokens(tokens, past_);
  std::map<std::string, HostTensor> in{{"tokens", HostTensor::FromInts({(int64_t)tokens.size()}, tokens)}};
  Executable& exe = StepFor(tokens.size());
  std::vector<float> logits = exe.Run(in, {{"past", past_}})[0].ToFloats();
  Advance(exe, tokens.size());
  return logits;
}

nlohmann::json LanguageModel::PredictForward(const std::vector<int32_t>& tokens) {
  if (kv_block_ > 0) throw Error("forward: a batched model steps sequences with StepBatch");
  CheckTokens(tokens, past_);
  std::map<std::string, HostTensor> in{{"tokens", HostTensor::FromInts({(int64_t)tokens.size()}, tokens)}};
  Executable& exe = StepFor(tokens.size());
  nlohmann::json predicted = exe.PredictStep(in, {{"past", past_}});
  if (predicted.is_null()) return predicted;  // nothing ran: Forward runs it
  Advance(exe, tokens.size());
  return predicted;
}

void LanguageModel::Reset() {
  past_ = 0;
  step_->ResetState();
  if (prefill_) prefill_->ResetState();
  kv_on_ = step_.get();
}

std::vector<float> LanguageModel::ForwardAll(const std::vector<int32_t>& tokens) {
  if (kv_block_ > 0) throw Error("forward: a batched model steps sequences with StepBatch");
  CheckTokens(tokens, 0);
  if (!all_) all_ = CompileStep(true);
  all_->ResetState();
  std::map<std::string, HostTensor> in{{"tokens", HostTensor::FromInts({(int64_t)tokens.size()}, tokens)}};
  return all_->Run(in, {{"past", 0}})[0].ToFloats();
}

}  // namespace prism
