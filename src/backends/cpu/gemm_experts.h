// Grouped expert GEMMs (ExpertLinear's template): a step's rows grouped by the expert each chose, every
// group one GEMM over that expert's slab of the stacked weight.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/gemm_forms.h"

namespace prism {

// `all` describes the whole product as if its weight were one [N, K] matrix: a [M, K], y [M, N], w the
// stacked [experts, N, K] weight as stored and all.packed the form's ExpertPacks where it packs. Row i uses
// slab clamp(expert[i], 0, experts - 1). The form must run on slabs (GemmForm::on_slabs). A team of `threads`
// computes columns [all.nb, all.ne) of every row, each thread (0 <= thread < threads) its share of the routed
// slabs' tiles (form.split_tile) weighed by their rows.
void RunExpertGemm(const GemmForm& form, const GemmCall& all, const int32_t* expert, int64_t experts,
                   int thread, int threads);

// A packing form's copy of a stacked weight, one slab at a time (GemmCall::packed of an expert GEMM in that
// form points at it).
struct ExpertPacks {
  std::vector<PackedGemmWeight> slabs;
};
PackedGemmWeight PackExperts(const GemmForm& form, const void* w, DType wt, int64_t experts, int64_t n,
                             int64_t k);

// The slab of the stacked weight that output row `row` reads (for rounding bounds and references).
const void* ExpertSlab(const void* w, DType wt, int64_t n, int64_t k, const int32_t* expert, int64_t experts,
                       int64_t row);

}  // namespace prism
