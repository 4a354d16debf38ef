// A language model ready to run: weights, config and tokenizer loaded, its step graph compiled.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/device.h"
#include "compiler/egraph/rewrite.h"
#include "ir/error.h"
#include "models/model_files.h"
#include "search/program_search.h"

namespace prism {

struct LoadOptions {
  std::string
      tokenizer_path;       // llama2.c checkpoints: defaults to a tok*.bin / tokenizer.bin beside the model
  int64_t max_context = 0;  // 0: the model's maximum, capped at 4096
  int threads = 0;          // 0: all cores
  double search_budget =
      -1;  // seconds of schedule search (< 0: none; decisions from the tuning database only)
  // Where the step graph runs: a device of the registry (backends/device.h): "cpu" (compiled C++,
  // searched schedules), "opencl" or "cuda" (GpuProgram; threads and search_budget do not apply
  // there), "interp" (the reference interpreter).
  std::string device = "cpu";
  // Another device for prompts (steps of more than one token): the same graph compiled there too, the KV
  // cache handed to `device` after each prompt (and back before the next). "": everything on `device`.
  std::string prefill_device{};
  // On cuda: each step's launches replay as one CUDA graph (updated with the step's arguments)
  // instead of one launch per kernel. No effect elsewhere.
  bool gpu_graphs = true;
  // Which of the step graph's rewritten programs runs ("as written", "rewritten", ...: the names `prism graph
  // --rewrites` lists); "": the program search's choice (timed with a search budget, else the tuning
  // database's, else the graph as written).
  std::string program{};
  // Search decisions timed while other processes used more than this fraction of the CPU time are
  // used for this compile but not saved to the tuning database.
  double search_busy_limit = 0.2;
  // cpu: no product rounds its activation (CompileRequest::exact): quantized weights' products in f32, as
  // the parity tests' exact references compute them. Off: int8 dot products, as llama.cpp computes them.
  bool exact = false;
  // > 0: the model steps many sequences at once (StepBatch) over a paged KV cache of kv_blocks blocks
  // of kv_block tokens each; Forward and ForwardAll are then unavailable. kv_blocks 0: as many as
  // kv_memory_bytes hold, but no more than kv_sequences full contexts need.
  int64_t kv_block = 0, kv_blocks = 0, kv_memory_bytes = 0, kv_sequences = 1;
};

// A run of one sequence's tokens in a batched step: tokens[i] sits at position `position + i`; the
// sequence's KV lives in `blocks` (position p at row blocks[p / kv_block] * kv_block + p % kv_block),
// which must cover every position up to the last token's.
struct BatchPiece {
  std::span<const int32_t> tokens;
  int64_t position = 0;
  std::span<const int32_t> blocks;
  bool logits = false;  // the last token's logits are wanted
};

// The logits of a batched step's pieces that want them ([vocab] each, in order): views into the step's
// outputs, which they keep alive (no copy of a step's rows).
struct LogitRows {
  std::vector<HostTensor> outputs;
  std::vector<std::span<const float>> rows;
  size_t size() const { return rows.size(); }
  std::span<const float> operator[](size_t i) const { return rows[i]; }
};

// The tuning database shared by every compile on this machine: KernelCacheDir()/tuning.json.
std::string TuningDatabasePath();
// A model's graph compiled on the device, every weight node bound to its tensor in `store`; a weight made by
// a rewrite (ConcatWeightName) is made from its parts once and kept in `derived`, which must outlive the
// result.
std::unique_ptr<Executable> CompileModelGraph(Device& device, const Graph& g, const WeightStore& store,
                                              const CompileRequest& req,
                                              std::map<std::string, HostTensor>* derived = nullptr);

// A model's graph as the program search chooses it among its rewritten candidates `rr`
// (search/program_search.h): each compiled as CompileModelGraph does (merged weights kept in `derived`) and
// tuned by `tune` within its share of the search budget (ChooseProgram), checked and timed at po's buckets
// (po.measure), else the tuning database's choice or po.force's. Merged weights the chosen program does not
// read are let go.
ProgramDecision CompileModelProgram(Device& device, const RewriteResult& rr, const WeightStore& store,
                                    const CompileRequest& req, std::map<std::string, HostTensor>* derived,
                                    const ProgramSearchOptions& po,
                                    const std::function<nlohmann::json(Executable&, double share)>& tune);

class LanguageModel {
 public:
  // MODEL is a Hugging Face folder (config.json + safetensors + tokenizer.json), a .gguf file,
  // or a llama2.c checkpoint. Throws prism::Error naming the path and the problem.
  static std::unique_ptr<LanguageModel> Load(const std::string& path, const LoadOptions& opts = {});

  const ModelConfig& config() const { return files_.config; }
  const Tokenizer& tokenizer() const { return *files_.tokenizer; }
  const ChatTemplate* chat_template() const { return files_.chat_template.get(); }
  const nlohmann::json& chat_variables() const { return files_.chat_variables; }
  int64_t max_context() const { return max_context_; }
  int64_t position() const { return past_; }  // tokens in the KV cache
  const std::string& device() const { return step_->device(); }
  // The compiled step, through the interface every device implements ...
  const Executable& step() const { return *step_; }
  // ... or as the device's own executable type (Program on the cpu, GpuProgram on opencl and cuda);
  // throws prism::Error when the model runs on another device.
  template <class T>
  const T& step_as() const {
    if (auto* p = dynamic_cast<const T*>(step_.get())) return *p;
    throw Error("the model runs on device " + step_->device() +
                ", which compiles it to another kind of program");
  }

  int64_t kv_block() const { return kv_block_; }  // > 0: a batched model (LoadOptions::kv_block)
  int64_t kv_blocks() const { return kv_blocks_; }
  // One batched step over the pieces of many sequences (a batched model only): writes their keys and
  // values into the pool and returns the logits ([vocab] each) of the pieces that want them, in order.
  LogitRows StepBatch(const std::vector<BatchPiece>& pieces);
  // Batched: copies `count` rows of every K/V pool from row `from` to row `to` (block * kv_block + slot),
  // a partial prefix match's copy on write (KvBlockCopy).
  void CopyKvRows(int64_t from, int64_t to, int64_t count);

  // Appends tokens to the KV cache; returns the logits of the last one ([vocab]).
  std::vector<float> Forward(const std::vector<int32_t>& tokens);
  void Reset();
  // On a device timed by a model (a simulated chip: Executable::PredictStep): appends tokens as Forward
  // does and returns the step's predicted time and parts instead of its logits; null (and nothing run)
  // on a device whose wall time is its time.
  nlohmann::json PredictForward(const std::vector<int32_t>& tokens);
  // The KV cache's last hand-over between devices (LoadOptions::prefill_device): rows, bytes, wall seconds
  // of the copy, predicted seconds on simulated devices' links; null before the first. handovers() counts
  // them.
  const nlohmann::json& last_handover() const { return last_handover_; }
  int64_t handovers() const { return handovers_; }
  const std::string& prefill_device() const { return prefill_ ? prefill_->device() : step_->device(); }
  // Logits of every position of a fresh sequence ([n * vocab]); for perplexity. Compiled on first use.
  std::vector<float> ForwardAll(const std::vector<int32_t>& tokens);

  // Schedule search for the step program over a decode and a prefill bucket; returns receipts.
  // `replay`: search again what the tuning database already decided (only_kernel's, or every one).
  nlohmann::json Tune(double budget_seconds, const std::string& only_kernel = "", bool replay = false,
                      const std::function<void(const std::string&, size_t, size_t, double)>& progress = {});
  // Tune within what the load's search budget has left (its program search spent part of it): the kernels
  // that search did not reach are searched now, and every kernel's receipt comes back. A budget is the whole
  // compile's seconds of schedule search, however many candidate programs shared it.
  nlohmann::json TuneRest(
      const std::function<void(const std::string&, size_t, size_t, double)>& progress = {});
  // Seconds of schedule search spent so far (the program search's and Tune's).
  double search_seconds() const { return search_seconds_; }
  // Writes a compiled artifact folder: manifest, generated source, compiled kernels, the chosen
  // schedules and the receipts. `prism run DIR` loads it without compiling.
  void SaveArtifact(const std::string& dir, const nlohmann::json& receipts) const;
  // Loads a model from an artifact folder written by SaveArtifact.
  static std::unique_ptr<LanguageModel> LoadArtifact(const std::string& dir, const LoadOptions& opts = {});
  static bool IsArtifact(const std::string& path);
  double compile_seconds() const { return compile_seconds_; }
  // The program search's receipt (scope "program"): the candidates the rewrites gave, what was timed, the
  // rewrites of the program the step runs.
  const nlohmann::json& program_receipt() const { return program_receipt_; }

 private:
  LanguageModel() = default;
  Graph StepGraph(bool all_logits) const;
  // The step's program: the graph's rewritten candidates (compiler/egraph) compiled, checked and timed by the
  // program search (with a search budget; else the tuning database's choice or the graph as written), the
  // chosen one's schedules tuned; sets step_, program_ and program_receipt_.
  void CompileProgram(double search_budget);
  // Tune's search on another executable of this model's step (a candidate of the program search); its
  // seconds count against the load's search budget.
  nlohmann::json TuneOn(
      Executable& exe, double budget_seconds, const std::string& only_kernel = "", bool replay = false,
      const std::function<void(const std::string&, size_t, size_t, double)>& progress = {}) const;
  // The step graph's rewritten programs (compiler/egraph/rewrite.h).
  RewriteResult Rewrites() const;
  // The candidate named `name` of the step graph's rewrites ("" or "as written": the graph itself).
  Graph ProgramGraph(const std::string& name) const;
  // The sizes each bucket is searched at (Tune's and the program search's).
  std::vector<std::pair<std::string, SymbolBindings>> Buckets() const;
  // Compiles the step graph (or the all-logits one) on the device and binds its weights.
  std::unique_ptr<Executable> CompileStep(bool all_logits, const std::string& artifact_dir = "") const;
  void CheckTokens(std::span<const int32_t> tokens, int64_t past) const;
  // The executable a step of n tokens runs on, with the KV cache's first past_ rows moved there first.
  Executable& StepFor(size_t n);
  // After a step of n tokens ran on exe: the position moves on, and a prompt's cache goes to the decoder.
  void Advance(Executable& exe, size_t n);
  // Moves runs of the KV cache's rows ((first, count) each) from one executable to the other, into
  // last_handover_.
  void HandOver(Executable& from, Executable& to, const std::vector<std::pair<int64_t, int64_t>>& ranges);
  // A batched step of these pieces on exe (width: the block table's columns).
  LogitRows RunBatch(Executable& exe, const std::vector<BatchPiece>& pieces, int64_t width);
  // The pool rows of positions [from, to) of a piece's sequence, one (first, count) run per block.
  void PieceRows(const BatchPiece& p, int64_t from, int64_t to,
                 std::vector<std::pair<int64_t, int64_t>>* ranges) const;
  void SetBatching(const LoadOptions& opts);

  std::string path_, tokenizer_path_;
  double compile_seconds_ = 0;
  double search_budget_ = 0;           // LoadOptions::search_budget: the whole compile's
  mutable double search_seconds_ = 0;  // spent of it (TuneOn's searches)
  ModelFiles files_;
  int64_t max_context_ = 0;
  int threads_ = 0;
  double search_busy_limit_ = 0.2;
  bool graph_replay_ = true;
  bool exact_ = false;  // LoadOptions::exact
  std::shared_ptr<Device> device_;
  std::unique_ptr<Executable> step_, all_;  // the step program, and the all-logits one (made on first use)
  std::string program_ = "as written";      // which candidate of the step graph's rewrites step_ runs
  nlohmann::json program_receipt_;
  mutable std::map<std::string, HostTensor>
      derived_weights_;                  // weights made by rewrites (merged products' rows)
  std::unique_ptr<Executable> prefill_;  // the step on LoadOptions::prefill_device, or null
  Executable* kv_on_ = nullptr;          // which step holds the KV cache (with prefill_)
  nlohmann::json last_handover_;
  int64_t handovers_ = 0;
  int64_t past_ = 0;
  int64_t kv_block_ = 0, kv_blocks_ = 0;
};

}  // namespace prism
