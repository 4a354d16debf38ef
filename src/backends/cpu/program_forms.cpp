// The CPU executable's GEMM forms at run time: weights repacked for a form, kept out of cache for timing,
// the team's shared rounded activations, and the form a choice takes in JSON.
#include <algorithm>

#include "backends/cpu/gemm_experts.h"
#include "backends/cpu/machine_probe.h"
#include "backends/cpu/program.h"
#include "ir/error.h"

namespace prism {

nlohmann::json ChoiceToJson(const KernelChoice& c) {
  return {{"template", c.use_template},
          {"parallel", (int)c.threading},
          {"reduce_outer", c.reduce_outer},
          {"form", GemmForms()[c.form].name},
          {"param", c.param}};
}

KernelChoice ChoiceFromJson(const nlohmann::json& j) {
  const int parallel = std::clamp(j.value("parallel", -1), -1, 1);
  KernelChoice c{j.value("template", true), static_cast<Threading>(parallel), j.value("reduce_outer", false)};
  c.form = std::max(0, GemmFormIndex(j.value("form", "rows")));  // a form this Prism lacks: rows
  c.param = std::max<int64_t>(0, j.value("param", (int64_t)0));  // older entries: the form's default
  return c;
}

const void* Program::Packed(int form, int w_buffer) const {
  auto it = packed_.find({form, w_buffer});
  return it == packed_.end() ? nullptr : it->second.form_data.get();
}

void Program::EvictWeights(const GemmTemplate& gm) const {
  const HostTensor& w = storage_[gm.w_buffer];
  if (w.data) EvictFromCache(w.data, (size_t)w.nbytes());
  for (const auto& [key, packed] : packed_)
    if (key.second == gm.w_buffer) {
      EvictFromCache(packed.bytes, packed.size);
      for (const auto& [bytes, size] : packed.more) EvictFromCache(bytes, size);
    }
}

void Program::FitTeamActivations() {
  for (size_t k = 0; k < launches_.size(); ++k) {
    const KernelLaunch& st = launches_[k];
    const GemmForm& form = GemmForms()[st.form];
    if (kp_.kernels[k].gemm && st.use_template && form.fit_team && st.parallel && st.m > 0)
      form.fit_team(&team_act_[st.team_slot], st.m, Packed(st.form, kp_.kernels[k].gemm->w_buffer));
  }
}

bool Program::PrepareForm(const GemmTemplate& gm, int form_index, bool pack) {
  const KBuffer& kb = kp_.buffers[gm.w_buffer];
  const GemmForm& form = GemmForms()[form_index];
  if (!form.offered(kb.dtype, gm.k)) return false;
  if (gm.index_buffer >= 0 && !form.on_slabs) return false;
  if (!pack || !form.pack || packed_.count({form_index, gm.w_buffer})) return true;
  if (!storage_[gm.w_buffer].data) throw Error("weight '" + kb.name + "' was not bound");
  PackedGemmWeight p = gm.index_buffer >= 0
                           ? PackExperts(form, storage_[gm.w_buffer].data, kb.dtype, gm.experts, gm.n, gm.k)
                           : form.pack(storage_[gm.w_buffer].data, kb.dtype, gm.n, gm.k);
  if (p.form_data) packed_.emplace(std::make_pair(form_index, gm.w_buffer), std::move(p));
  return true;
}

}  // namespace prism
