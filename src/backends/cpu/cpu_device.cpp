// The CPU as a device of the registry: graphs compiled into Programs, or loaded from an artifact
// folder (kernels.so, kernels.cpp, schedule.json) that Program::SaveArtifact wrote.
#include "backends/cpu/cpu_device.h"

#include <filesystem>
#include <fstream>

#include "backends/cpu/program.h"

namespace prism {
namespace fs = std::filesystem;

namespace {

nlohmann::json ReadArtifactJson(const std::string& dir, const char* name) {
  std::ifstream f(fs::path(dir) / name);
  if (!f) throw Error(dir + ": artifact has no " + name);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) throw Error(dir + "/" + name + ": not valid JSON");
  return j;
}

}  // namespace

std::unique_ptr<Program> Program::LoadArtifact(const Graph& g, CompileOptions co, const std::string& dir) {
  co.prebuilt_so = (fs::path(dir) / "kernels.so").string();
  std::ifstream src(fs::path(dir) / "kernels.cpp");
  if (!src) throw Error(dir + ": artifact has no kernels.cpp");
  co.prebuilt_source.assign(std::istreambuf_iterator<char>(src), std::istreambuf_iterator<char>());
  std::unique_ptr<Program> p = Program::Compile(g, co);
  KernelChoices choices;
  const nlohmann::json schedule = ReadArtifactJson(dir, "schedule.json");  // outlives items()
  for (const auto& [bucket, arr] : schedule.items())
    for (const auto& c : arr) choices[bucket].push_back(ChoiceFromJson(c));
  p->SetChoices(std::move(choices));
  return p;
}

std::unique_ptr<Executable> CpuDevice::Compile(const Graph& g, const CompileRequest& req) {
  CompileOptions co;
  co.threads = req.threads;
  co.exact = req.exact;
  if (req.artifact_dir.empty()) return Program::Compile(g, co);
  return Program::LoadArtifact(g, co, req.artifact_dir);
}

void Program::SaveArtifact(const std::string& dir, nlohmann::json& manifest) {
  std::error_code ec;
  fs::copy_file(stats_.so_path, fs::path(dir) / "kernels.so", fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error(dir + ": cannot copy the compiled kernels: " + ec.message());
  std::ofstream(fs::path(dir) / "kernels.cpp") << source_;
  nlohmann::json choices = nlohmann::json::object();
  for (const auto& [bucket, cs] : choices_) {
    nlohmann::json arr = nlohmann::json::array();
    for (const KernelChoice& c : cs) arr.push_back(ChoiceToJson(c));
    choices[bucket] = arr;
  }
  std::ofstream(fs::path(dir) / "schedule.json") << choices.dump(1);
  nlohmann::json buffers = nlohmann::json::array();
  for (const KBuffer& b : kp_.buffers)
    buffers.push_back({{"name", b.name}, {"dtype", DTypeName(b.dtype)}, {"shape", ShapeStr(b.shape)}});
  nlohmann::json kernels = nlohmann::json::array();
  for (const Kernel& k : kp_.kernels) kernels.push_back(k.name);
  const int64_t ctx = manifest.at("max_context").get<int64_t>();
  manifest["graph_nodes"] = stats_.graph_nodes;
  manifest["kernels"] = kernels;
  manifest["buffers"] = buffers;
  manifest["memory"] = {{"prefill", MemoryReport({{"seq", ctx}, {"past", 0}})},
                        {"decode", MemoryReport({{"seq", 1}, {"past", ctx - 1}})}};
}

}  // namespace prism
