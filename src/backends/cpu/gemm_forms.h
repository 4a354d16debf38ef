// The CPU's GEMM forms as data: one entry per way to run a template GEMM (Y = A · Wᵀ), with what it
// needs (where it is offered, how it packs the weights, how it runs and splits, its rounding bound).
// The runtime (Program) and the search iterate the table; a new form is one entry and its kernel file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/gemm_amx.h"
#include "backends/cpu/thread_pool.h"
#include "ir/dtype.h"

namespace prism {

// Weights a form repacked once, in whatever layout its kernel reads.
struct PackedGemmWeight {
  std::shared_ptr<const void> form_data;  // what GemmCall::packed points at (the form's own struct)
  const void* bytes = nullptr;            // the packed bytes (evicted from cache before timing)
  size_t size = 0;
  std::vector<std::pair<const void*, size_t>> more;  // further packed regions (one per expert slab)
};

// One thread's share of one GEMM: Y[:, nb..ne) over m activation rows (Y's rows n floats apart).
struct GemmCall {
  const float* a = nullptr;
  // a_group > 0: `a` is the whole activation, K-major in groups of a_group rows (GemmTemplate::a_group),
  // and this call's row i is its row a_first + i. Only forms whose reads_kmajor says so get such a call.
  int64_t a_group = 0, a_first = 0;
  int64_t m = 0, n = 0, k = 0;
  const void* w = nullptr;  // the weights as stored ...
  DType wt = DType::F32;
  const void* packed = nullptr;  // ... and the form's packed copy, when it packs them for this dtype
  float* y = nullptr;
  int64_t nb = 0, ne = 0;
  int thread = 0, threads = 1;        // the team taking part, for forms that work as one
  SpinBarrier* barrier = nullptr;     // the team's barrier (null: the GEMM runs on one thread)
  AmxActivation* team_act = nullptr;  // the activation buffer the team shares (fit_team sized it)
  int64_t param = 0;                  // the form's template parameter (GemmForm::param; 0: its default)
  const float* bias = nullptr;        // [n], added to each output as stored (forms with adds_bias only)
};

struct GemmForm {
  const char* name;  // in the tuning database, artifacts and receipts: "rows", "rounded", "panels", "amx"
  int64_t min_rows;  // offered to the search from this many activation rows
  bool (*offered)(DType wt, int64_t k);  // on this CPU, for this weight type and reduction size
  std::string (*label)(DType wt);        // its candidate's name in receipts
  // Packs the weights (N x K, as stored) once; empty form_data where this dtype is read as stored. Null:
  // never.
  PackedGemmWeight (*pack)(const void* w, DType wt, int64_t n, int64_t k);
  void (*run)(const GemmCall& c);
  // Rounds the activation for this weight type (null: never); then each output may differ from the exact
  // products by error_bound (activation row a against weight row col, as stored).
  bool (*rounds)(DType wt);
  double (*error_bound)(const float* a, const void* w, DType wt, int64_t k, int64_t col);
  int64_t split_tile;  // threads split the output columns at multiples of this
  // Split across the team, the activation is rounded once by all into a buffer sized before the step by
  // this (null: each thread works alone).
  void (*fit_team)(AmxActivation* act, int64_t m, const void* packed);
  // Runs one expert's slab of a stacked weight (GemmTemplate::index_buffer), each slab packed on its own
  // where the form packs (gemm_experts.h); false: never (forms the team runs as one).
  bool on_slabs;
  // Reads a K-major activation (GemmCall::a_group) itself for this weight type (null: never; the runtime
  // then gathers the call's rows into row-major order first).
  bool (*reads_kmajor)(DType wt) = nullptr;
  // Where the weight type decides from how many rows the form is offered (null: min_rows for every type).
  int64_t (*min_rows_of)(DType wt) = nullptr;
  // A template parameter the search varies (null: none): its name in candidates' names, and the values
  // offered besides the default (0) for this weight type, count of activation rows and reduction size.
  // The values never change what is computed, only how fast: every candidate is still checked against the
  // reference.
  const char* param = nullptr;
  std::vector<int64_t> (*param_values)(DType wt, int64_t m, int64_t k) = nullptr;
  // The parameter's name where it depends on the weight type (null: param for every type).
  const char* (*param_name_of)(DType wt) = nullptr;
  // Or a parameter the search varies over the whole step at once, every such GEMM together (null: none):
  // the values offered besides the default (0). The int8 GEMMs' weight prefetch distance is one: timed
  // alone, each GEMM's distances come out within the noise of one another (cpu_schedule_space.cpp).
  std::vector<int64_t> (*step_param_values)(DType wt, int64_t k) = nullptr;
  // Adds GemmCall::bias itself for this weight type (null: never; the epilogue then adds it).
  bool (*adds_bias)(DType wt) = nullptr;
};

// The activation rows from which `form` is offered (and taken unsearched) for weights of type wt.
int64_t MinRows(const GemmForm& form, DType wt);

// Rows [first, first + rows) of a K-major activation (groups of `group` rows, k values each) into
// row-major `out` [rows, k].
void KMajorRowsToRowMajor(const float* a, int64_t group, int64_t k, int64_t first, int64_t rows, float* out);

const std::vector<GemmForm>& GemmForms();
// The index of the form named so in GemmForms(); -1 when there is none.
int GemmFormIndex(const std::string& name);

}  // namespace prism
