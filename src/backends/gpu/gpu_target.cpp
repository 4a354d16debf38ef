// A GPU-style device of the registry (OpenCL, CUDA): graphs compiled into GpuPrograms on it; an artifact
// holds their searched choices (schedule.json) and is rendered and built again on load.
#include "backends/gpu/gpu_target.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/gpu/gpu_program.h"

namespace prism {
namespace fs = std::filesystem;

std::string GpuTarget::name() const { return std::string(GpuDialectName(gpu_->dialect())); }

std::unique_ptr<Executable> GpuTarget::Compile(const Graph& g, const CompileRequest& req) {
  GpuCompileOptions opts;
  opts.mma_where_applicable = true;  // CUDA only
  opts.mma_min_rows = kStepMmaMinRows;
  if (const char* v = std::getenv("PRISM_MMA_MIN_ROWS"); v && *v) opts.mma_min_rows = std::atoll(v);
  std::unique_ptr<GpuProgram> p = GpuProgram::Compile(g, gpu_, opts);
  p->SetGraphReplay(req.graph_replay);
  if (req.artifact_dir.empty()) return p;
  // An artifact holds the searched choices; the kernels are rendered and built again here.
  const fs::path file = fs::path(req.artifact_dir) / "schedule.json";
  std::ifstream f(file);
  if (!f) throw Error(req.artifact_dir + ": artifact has no schedule.json");
  const nlohmann::json schedule = nlohmann::json::parse(f, nullptr, false);
  if (!schedule.is_object()) throw Error(file.string() + ": not a JSON object");
  std::map<std::string, std::vector<GpuKernelChoice>> choices;
  for (const auto& [bucket, arr] : schedule.items()) {
    if (!arr.is_array() || arr.size() != p->kernel_count())
      throw Error(file.string() + ": bucket " + bucket + " has " + std::to_string(arr.size()) +
                  " choices for " + std::to_string(p->kernel_count()) + " kernels (a stale artifact)");
    for (const auto& c : arr) choices[bucket].push_back(GpuChoiceFromJson(c));
  }
  if (!choices.empty()) p->Reschedule(choices);
  return p;
}

void GpuProgram::SaveArtifact(const std::string& dir, nlohmann::json& manifest) {
  nlohmann::json schedule = nlohmann::json::object();
  for (const auto& [bucket, cs] : choices_) {
    nlohmann::json arr = nlohmann::json::array();
    for (const GpuKernelChoice& c : cs) arr.push_back(GpuChoiceToJson(c));
    schedule[bucket] = arr;
  }
  std::ofstream f(fs::path(dir) / "schedule.json");
  f << schedule.dump(1);
  if (!f) throw Error(dir + ": cannot write schedule.json");
  nlohmann::json kernels = nlohmann::json::array();
  for (const Kernel& k : kp_.kernels) kernels.push_back(k.name);
  manifest["graph_nodes"] = stats_.graph_nodes;
  manifest["kernels"] = kernels;
}

}  // namespace prism
