// The CPU executable's GEMM forms at run time: weights repacked for a form, kept out of cache for timing,
// the team's shared rounded activations, and the form a choice takes in JSON.
#include <algorithm>
#include <exception>
#include <memory>
#include <set>
#include <string>

#include "backends/cpu/gemm_experts.h"
#include "backends/cpu/machine_probe.h"
#include "backends/cpu/program.h"
#include "backends/cpu/weight_memory.h"
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
  if (pack) PackForms({{&gm, form_index}});
  return true;
}

void Program::PackForms(const std::vector<std::pair<const GemmTemplate*, int>>& wanted) {
  std::vector<std::pair<const GemmTemplate*, int>> todo;  // each (form, weight) not packed yet, once
  std::set<std::pair<int, int>> seen;
  for (const auto& [gm, form] : wanted) {
    if (!GemmForms()[form].pack || packed_.count({form, gm->w_buffer}) ||
        !seen.insert({form, gm->w_buffer}).second)
      continue;
    if (!storage_[gm->w_buffer].data)
      throw Error("weight '" + kp_.buffers[gm->w_buffer].name + "' was not bound");
    todo.emplace_back(gm, form);
  }
  // Weights are packed side by side, one per thread at a time: the packing and the first touch of the
  // packed copy's pages (the kernel zeroing them) are most of a quantized model's load.
  std::vector<PackedGemmWeight> packed(todo.size());
  std::vector<std::exception_ptr> errors(todo.size());
  auto pack = [&](int i) {
    const GemmTemplate& gm = *todo[i].first;
    const GemmForm& form = GemmForms()[todo[i].second];
    const HostTensor& src = storage_[gm.w_buffer];
    const DType wt = kp_.buffers[gm.w_buffer].dtype;
    try {
      // Shared with every other Program packing the same weight alike (weight_memory.h).
      const std::string what = std::string(form.name) + " " + std::string(DTypeName(wt)) + " " +
                               std::to_string(gm.n) + "x" + std::to_string(gm.k) + " experts " +
                               std::to_string(gm.index_buffer >= 0 ? gm.experts : 0);
      const std::shared_ptr<const void> made = SharedDerived(src.data, src.owner, what, [&] {
        return std::make_shared<const PackedGemmWeight>(
            gm.index_buffer >= 0 ? PackExperts(form, src.data, wt, gm.experts, gm.n, gm.k)
                                 : form.pack(src.data, wt, gm.n, gm.k));
      });
      const PackedGemmWeight& pw = *static_cast<const PackedGemmWeight*>(made.get());
      packed[i] = pw;
      packed[i].form_data = std::shared_ptr<const void>(made, pw.form_data.get());  // keeps `made` alive
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  if (todo.size() > 1)
    pool_->ParallelFor((int)todo.size(), pack);
  else if (todo.size() == 1)
    pack(0);
  for (size_t i = 0; i < todo.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    if (packed[i].form_data)
      packed_.emplace(std::make_pair(todo[i].second, todo[i].first->w_buffer), std::move(packed[i]));
  }
}

}  // namespace prism
