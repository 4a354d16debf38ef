// The one interface every device implements: a graph compiled for it (an Executable) that binds
// weights, runs steps, owns its state and searches its schedules; the registry opens devices by name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace prism {

// What every device takes when compiling a graph; a device ignores what does not apply to it.
struct CompileRequest {
  int threads = 0;  // cpu: the team's size (0: $PRISM_THREADS, else every core)
  // Load the compiled kernels and schedule an artifact folder holds (Executable::SaveArtifact) instead of
  // compiling; the kernels rendered now must equal the artifact's, else loading fails (a stale artifact).
  std::string artifact_dir;
  bool graph_replay = true;  // cuda: each step's launches replay as one CUDA graph
};

// A schedule search over size buckets within a wall-clock budget, remembered in a tuning database.
struct SearchOptions {
  std::vector<std::pair<std::string, SymbolBindings>>
      buckets;                 // e.g. {"decode", seq=1}, {"prefill", seq=128}
  double budget_seconds = 30;  // over all buckets; 0: apply what the tuning database knows, time nothing
  std::string db_path;         // tuning database (JSON); "" = none
  std::string only_kernel;     // search this kernel only
  bool replay = false;         // search again what the database already decided (and save the result)
  double busy_limit = 0.2;     // decisions timed while others used more of the CPU are not saved
  // A bucket named here is searched only for the kernels with a loop over a range involving
  // `span_symbol` (attention over the KV cache, whose cost grows as the square of a prompt's length,
  // so a choice made at a short prefill does not carry to a long one); its other kernels take the
  // choices of bucket `from`, searched before it.
  struct Inherit {
    std::string from, span_symbol;
  };
  std::map<std::string, Inherit> inherit;
  // Called as the search reaches each kernel of a bucket: kernels done of total, seconds of budget left.
  std::function<void(const std::string& bucket, size_t done, size_t total, double seconds_left)> progress;
};

// Prompts at least this long run on the "prefill-long" bucket's choices when the search made them.
constexpr int64_t kLongPrefillSeq = 256;

// Every executable's check of a weight bound by name: its dtype must be the graph's.
inline void CheckWeightDtype(const std::string& name, DType given, DType expected) {
  if (given != expected)
    throw Error("weight '" + name + "': dtype " + std::string(DTypeName(given)) + " given, graph expects " +
                std::string(DTypeName(expected)));
}

// A graph compiled for one device, with its weights and state (the KV cache) in the device's memory.
class Executable {
 public:
  virtual ~Executable() = default;
  virtual const std::string& device() const = 0;
  virtual const Graph& graph() const = 0;
  // Binds a weight of the graph by name; the caller keeps t's memory alive (e.g. a file mapping).
  virtual void BindWeight(const std::string& name, const HostTensor& t) = 0;
  // Runs one step. Symbols bind from input shapes or explicitly; outputs come back as f32 (integer
  // outputs as i32), in the graph's output order. State persists across runs until ResetState.
  virtual std::vector<HostTensor> Run(const std::map<std::string, HostTensor>& inputs,
                                      const SymbolBindings& syms = {}) = 0;
  virtual void ResetState() = 0;
  // Searches the schedules of its kernels (candidates checked against the reference before they are
  // timed) and applies the fastest; returns one JSON receipt per decision.
  virtual nlohmann::json Search(const SearchOptions& opts) = 0;
  // Writes what loading this executable again needs into an artifact folder (CompileRequest::
  // artifact_dir) and adds its own entries to the artifact's manifest.
  virtual void SaveArtifact(const std::string& dir, nlohmann::json& manifest) {
    (void)manifest;
    throw Error(dir + ": device " + device() + " writes no compiled artifacts (the cpu device does)");
  }
  // Kernels after fusion (the interpreter counts one per graph node).
  virtual size_t kernel_count() const = 0;
};

// A device: compiles graphs into executables that run on it.
class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Executable> Compile(const Graph& g, const CompileRequest& req = {}) = 0;
};

// The registry of devices (backends/registry.cpp): one line per device.
std::vector<std::string> DeviceNames();  // "cpu", "opencl", "cuda", "interp"
// Opens a device by name; throws prism::Error with one line saying why it is absent here (no
// driver, no GPU) or that the name is unknown (listing the known ones).
std::shared_ptr<Device> OpenDevice(const std::string& name);

}  // namespace prism
