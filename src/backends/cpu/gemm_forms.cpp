// The CPU's GEMM forms as data (see gemm_forms.h): each entry adapts one kernel file to the table.
#include "backends/cpu/gemm_forms.h"

#include <algorithm>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/gemm_blocks.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/gemm_int8_avx2.h"
#include "backends/cpu/gemm_int8_panels.h"
#include "backends/cpu/gemm_panels.h"
#include "backends/cpu/gemm_slices_avx2.h"
#include "ir/quant_formats.h"

namespace prism {
namespace {

template <class T>
PackedGemmWeight Hold(T packed) {
  auto p = std::make_shared<T>(std::move(packed));
  return {p, p->data.get(), p->bytes, {}};
}

bool Always(DType, int64_t) { return true; }
bool Ever(DType) { return true; }

// Over the weights as stored (AVX-512, AVX2 or scalar): exact f32 products.
void RunRows(const GemmCall& c) { GemmRows(c.a, c.m, c.k, c.w, c.wt, c.y, c.n, c.nb, c.ne, c.param); }
std::vector<int64_t> RowsParams(DType wt, int64_t m, int64_t) { return GemvRowsChoices(wt, m); }

// The activation rounded for dot-product instructions: int8 (VNNI, weights repacked per block) or bf16.
PackedGemmWeight PackRounded(const void* w, DType wt, int64_t n, int64_t k) {
  if (!IsQuantized(wt)) return {};
  return Hold(PackForInt8Dot(w, wt, n, k));
}
void RunRounded(const GemmCall& c) {
  if (c.wt == DType::BF16)
    GemmRowsBf16Dot(c.a, c.m, c.k, static_cast<const uint16_t*>(c.w), c.y, c.n, c.nb, c.ne);
  else
    GemmRowsInt8(c.a, c.m, *static_cast<const Int8PackedWeight*>(c.packed), c.y, c.n, c.nb, c.ne, c.param);
}

// Q4_K/Q6_K weights as stored, the activation rounded as llama.cpp's Q8_K: integer dot products (AVX2).
// Offered where the int8 rows form is not (no AVX512-VNNI, or the AVX-512 templates off): on Zen 5 that
// form was ahead at every row count from cache (1.1-1.7x at one row, 1.9-3.2x at 2-5) and from memory tied
// at the host's low bandwidth level and 13% ahead at its high one (the head, 128256 x 2048 Q6_K, two
// threads), so a search timing both took q8k only by noise (that head, in decode, in the 1B shape's files).
bool Q8KOffered(DType wt, int64_t k) {
  return BlockQ8KSupported(wt, k) && !RoundedActivationSupported(wt, k);
}
void RunQ8K(const GemmCall& c) { GemmRowsBlockQ8K(c.a, c.m, c.k, c.w, c.wt, c.y, c.n, c.nb, c.ne); }

// K-major panels of 32 columns for many activation rows.
bool PanelsOffered(DType wt, int64_t) { return PanelGemmSupported(wt); }
PackedGemmWeight PackPanelForm(const void* w, DType wt, int64_t n, int64_t k) {
  return Hold(PackPanels(w, wt, n, k));
}
void RunPanels(const GemmCall& c) {
  GemmPanels(c.a, c.m, *static_cast<const PanelPackedWeight*>(c.packed), c.y, c.n, c.nb, c.ne,
             {c.a_group, c.a_first}, c.param, c.bias);
}
bool PlainFloat(DType wt) { return !IsQuantized(wt); }
int64_t PanelsMinRows(DType wt) { return IsQuantized(wt) ? Int8PanelsMinRows(wt) : 6; }
std::vector<int64_t> PanelsParams(DType wt, int64_t, int64_t k) {
  return IsQuantized(wt) ? Int8PanelSliceChoices(k) : PanelTileRowsChoices(wt);
}
const char* PanelsParamName(DType wt) { return IsQuantized(wt) ? "slice" : "tile_rows"; }

// The same panels of K-quants against activations rounded per 256 values, as the q8k form rounds them: each
// 16- or 32-value sum takes one multiply-add, the row's scale one per 256 values.
bool Q8KPanelsOffered(DType wt, int64_t k) {
  return Avx512TemplatesEnabled() && Int8PanelsGroupSupported(wt, k);
}
void RunQ8KPanels(const GemmCall& c) {
  const auto& w = *static_cast<const PanelPackedWeight*>(c.packed);
  GemmPanelsInt8(c.a, c.m, w.data.get(), w.type, w.k, c.y, c.n, c.nb, c.ne, c.param, kSuperBlock);
}
std::vector<int64_t> Q8KPanelsParams(DType, int64_t, int64_t k) { return Int8PanelSliceChoices(k); }

// bf16 weights in panels of pairs for AVX512_BF16 dot products, the activation rounded to bf16.
bool Bf16PanelsOffered(DType wt, int64_t) {
  return wt == DType::BF16 && Avx512TemplatesEnabled() && Bf16DotSupported();
}
bool OnlyBf16(DType wt) { return wt == DType::BF16; }
PackedGemmWeight PackBf16PanelForm(const void* w, DType, int64_t n, int64_t k) {
  return Hold(PackBf16Panels(static_cast<const uint16_t*>(w), n, k));
}
void RunBf16Panels(const GemmCall& c) {
  GemmBf16Panels(c.a, c.m, *static_cast<const Bf16PanelWeight*>(c.packed), c.y, c.n, c.nb, c.ne);
}

// AMX tiles; split across the team, the activation is rounded once by everyone, then all multiply.
PackedGemmWeight PackAmxForm(const void* w, DType wt, int64_t n, int64_t k) {
  return Hold(PackForAmx(w, wt, n, k));
}
void RunAmx(const GemmCall& c) {
  const AmxPackedWeight& w = *static_cast<const AmxPackedWeight*>(c.packed);
  if (!c.barrier) return GemmAmx(c.a, c.m, w, c.y, c.n, c.nb, c.ne);
  AmxActivationRound(c.a, c.m, w, c.thread, c.threads, c.team_act);
  c.barrier->Wait();
  GemmAmxRounded(*c.team_act, c.m, w, c.y, c.n, c.nb, c.ne);
}
void FitAmx(AmxActivation* act, int64_t m, const void* packed) {
  AmxActivationFit(act, m, *static_cast<const AmxPackedWeight*>(packed));
}

// AVX2 machines over many rows: the weights as stored, decoded to f32 slices once per row block.
void RunSlices(const GemmCall& c) {
  GemmSlicesAvx2(c.a, c.m, c.k, c.w, c.wt, c.y, c.n, c.nb, c.ne, c.param, {c.a_group, c.a_first});
}
std::vector<int64_t> SlicesParams(DType, int64_t m, int64_t) { return SliceRowBlockChoices(m); }

// AVX2 machines, Q8_0/Q4_0/Q4_K/Q6_K weights in tiles of 8 rows: the activation rounded to int8, byte dot
// products.
PackedGemmWeight PackInt8Avx2Form(const void* w, DType wt, int64_t n, int64_t k) {
  return Hold(PackForInt8Avx2(w, wt, n, k));
}
void RunInt8Avx2(const GemmCall& c) {
  GemmRowsInt8Avx2(c.a, c.m, *static_cast<const Int8Avx2PackedWeight*>(c.packed), c.y, c.n, c.nb, c.ne,
                   c.param);
}

}  // namespace

const std::vector<GemmForm>& GemmForms() {
  static const std::vector<GemmForm> forms = {
      {.name = "rows",
       .min_rows = 1,
       .offered = Always,
       .label = [](DType) -> std::string { return "template"; },
       .pack = nullptr,
       .run = RunRows,
       .rounds = nullptr,
       .error_bound = nullptr,
       .split_tile = 4,
       .fit_team = nullptr,
       .on_slabs = true,
       .param = "gemv_rows",
       .param_values = RowsParams},
      {.name = "rounded",
       .min_rows = 1,
       .offered = RoundedActivationSupported,
       .label = [](DType wt) { return "template-" + std::string(RoundedActivationName(wt)); },
       .pack = PackRounded,
       .run = RunRounded,
       .rounds = Ever,
       .error_bound = RoundedActivationErrorBound,
       .split_tile = 4,
       .fit_team = nullptr,
       .on_slabs = true,
       .step_param_values = Int8PrefetchChoices},
      {.name = "panels",
       .min_rows = 6,
       .offered = PanelsOffered,
       .label = [](DType) -> std::string { return "template-panels"; },
       .pack = PackPanelForm,
       .run = RunPanels,
       .rounds = IsQuantized,
       .error_bound = RoundedActivationErrorBound,
       .split_tile = kPanelCols,
       .fit_team = nullptr,
       .on_slabs = true,
       .reads_kmajor = PlainFloat,
       .min_rows_of = PanelsMinRows,
       .param = "slice",
       .param_values = PanelsParams,
       .param_name_of = PanelsParamName,
       .adds_bias = PlainFloat},
      {.name = "dot-panels",
       .min_rows = 1,
       .offered = Bf16PanelsOffered,
       .label = [](DType) -> std::string { return "template-bf16dot-panels"; },
       .pack = PackBf16PanelForm,
       .run = RunBf16Panels,
       .rounds = OnlyBf16,
       .error_bound = RoundedActivationErrorBound,
       .split_tile = kBf16PanelCols,
       .fit_team = nullptr,
       .on_slabs = true},
      {.name = "amx",
       .min_rows = 6,
       .offered = AmxGemmSupported,
       .label = [](DType) -> std::string { return "template-amx"; },
       .pack = PackAmxForm,
       .run = RunAmx,
       .rounds = Ever,
       .error_bound = AmxErrorBound,
       .split_tile = kAmxCols,
       .fit_team = FitAmx,
       .on_slabs = false},
      {.name = "q8k",
       .min_rows = 1,
       .offered = Q8KOffered,
       .label = [](DType) -> std::string { return "template-q8k"; },
       .pack = nullptr,
       .run = RunQ8K,
       .rounds = Ever,
       .error_bound = BlockQ8KErrorBound,
       .split_tile = 4,
       .fit_team = nullptr,
       .on_slabs = true},
      {.name = "slices",
       .min_rows = 6,
       .offered = SliceGemmSupported,
       .label = [](DType) -> std::string { return "template-slices"; },
       .pack = nullptr,
       .run = RunSlices,
       .rounds = nullptr,
       .error_bound = nullptr,
       .split_tile = kSliceCols,
       .fit_team = nullptr,
       .on_slabs = true,
       .reads_kmajor = Ever,
       .param = "m_block",
       .param_values = SlicesParams},
      {.name = "int8-avx2",
       .min_rows = 1,
       .offered = Int8Avx2Supported,
       .label = [](DType) -> std::string { return "template-int8-avx2"; },
       .pack = PackInt8Avx2Form,
       .run = RunInt8Avx2,
       .rounds = Ever,
       .error_bound = RoundedActivationErrorBound,
       .split_tile = kInt8Avx2TileRows,
       .fit_team = nullptr,
       .on_slabs = true,
       .step_param_values = Int8Avx2PrefetchChoices},
      {.name = "q8k-panels",
       .min_rows = 6,
       .offered = Q8KPanelsOffered,
       .label = [](DType) -> std::string { return "template-q8k-panels"; },
       .pack = PackPanelForm,
       .run = RunQ8KPanels,
       .rounds = Ever,
       .error_bound = BlockQ8KErrorBound,
       .split_tile = kPanelCols,
       .fit_team = nullptr,
       .on_slabs = true,
       .min_rows_of = PanelsMinRows,
       .param = "slice",
       .param_values = Q8KPanelsParams},
  };
  return forms;
}

void KMajorRowsToRowMajor(const float* a, int64_t group, int64_t k, int64_t first, int64_t rows, float* out) {
  for (int64_t r = 0; r < rows;) {  // a run of rows within one group at a time
    const int64_t g = (first + r) / group, p = (first + r) % group, run = std::min(rows - r, group - p);
    const float* src = a + g * k * group + p;
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t i = 0; i < run; ++i) out[(r + i) * k + kk] = src[kk * group + i];
    r += run;
  }
}

int64_t MinRows(const GemmForm& form, DType wt) {
  return form.min_rows_of ? form.min_rows_of(wt) : form.min_rows;
}

int GemmFormIndex(const std::string& name) {
  const std::vector<GemmForm>& forms = GemmForms();
  for (size_t i = 0; i < forms.size(); ++i)
    if (name == forms[i].name) return (int)i;
  return -1;
}

}  // namespace prism
