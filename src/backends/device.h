// The one interface every device implements: a graph compiled for it (an Executable) that binds
// weights, runs steps, owns its state and searches its schedules; the registry opens devices by name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backends/schedule_space.h"
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
  bool exact = false;        // cpu: no product rounds its activation (CompileOptions::exact)
};

// Prompts at least this long run on the "prefill-long" bucket's choices when the search made them.
constexpr int64_t kLongPrefillSeq = 256;
// Steps of 2 to kBatchSeqMax - 1 tokens (a batch of decodes, a short prompt) run on the "batch" bucket's
// choices when the search made them, searched at kBatchSeq tokens; from kBatchWideMin tokens on, on the
// "batch-wide" bucket's, searched at kBatchWideSeq (where a product's best form changes: integer dot
// products over the weights as stored up to about 8 rows, K-major panels from about 12).
constexpr int64_t kBatchSeqMax = 32, kBatchSeq = 8, kBatchWideMin = 12, kBatchWideSeq = 16;

// The bucket whose choices a step at these sizes runs with, among those the search made (`searched`: bucket
// names, any container with count()): "decode" (seq == 1); "batch-wide" (kBatchWideMin <= seq <
// kBatchSeqMax) or "batch" (seq < kBatchSeqMax); "prefill-long" (seq >= kLongPrefillSeq); else "prefill".
// A bucket not searched falls to the next. "all" where there is no seq.
template <typename Searched>
std::string BucketOf(const SymbolBindings& b, const Searched& searched) {
  auto it = b.find("seq");
  if (it == b.end()) return "all";
  const int64_t seq = it->second;
  if (seq <= 1) return "decode";
  if (seq >= kBatchWideMin && seq < kBatchSeqMax && searched.count("batch-wide")) return "batch-wide";
  if (seq < kBatchSeqMax && searched.count("batch")) return "batch";
  return seq >= kLongPrefillSeq && searched.count("prefill-long") ? "prefill-long" : "prefill";
}

// Every executable's check of a weight bound by name: its dtype must be the graph's.
inline void CheckWeightDtype(const std::string& name, DType given, DType expected) {
  if (given != expected)
    throw Error("weight '" + name + "': dtype " + std::string(DTypeName(given)) + " given, graph expects " +
                std::string(DTypeName(expected)));
}

// A state's rows are its positions along the axis its writes go (a head-major KV cache's axis 1; a paged
// pool's rows, axis 0); a state no step writes, axis 0.
inline int64_t StateRowAxis(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes())
    if (WritesState(n.op) && n.name == name) return n.axes.at(0);
  return 0;
}

// Where rows [first, first + rows) along `axis` of a state of this shape lie, in elements: `pieces` runs of
// `count` elements, run i at at + i * stride in the state and at i * count in the rows' tensor.
struct StateRowRuns {
  int64_t pieces, at, stride, count;
};
inline StateRowRuns RowRuns(const std::vector<int64_t>& state, int64_t axis, int64_t first, int64_t rows) {
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= state[a];
  for (size_t a = axis + 1; a < state.size(); ++a) inner *= state[a];
  return {outer, first * inner, state[axis] * inner, rows * inner};
}

// Every executable's check of state rows handed to it (WriteStateRows) for state `name` of this shape and
// dtype from row `first` along `axis`: the same dtype, the state's shape but along the axis, no row past
// the state's.
inline void CheckStateRows(const std::string& name, int64_t first, const HostTensor& rows,
                           const std::vector<int64_t>& state, DType dtype, int64_t axis) {
  bool fits = rows.dtype == dtype && rows.shape.size() == state.size() && axis < (int64_t)state.size() &&
              first >= 0 && first + rows.shape[axis] <= state[axis];
  for (size_t a = 0; fits && a < state.size(); ++a) fits = (int64_t)a == axis || rows.shape[a] == state[a];
  if (fits) return;
  std::string want;
  for (int64_t d : state) want += (want.empty() ? "" : ", ") + std::to_string(d);
  throw Error("state '" + name + "': rows " + rows.ShapeString() + " " + std::string(DTypeName(rows.dtype)) +
              " from row " + std::to_string(first) + " do not fit [" + want + "] " +
              std::string(DTypeName(dtype)));
}

// The tensor ReadStateRows fills: rows [first, first + rows) along `axis` of state `name` of this shape and
// dtype (zeros), or prism::Error when the state has fewer.
inline HostTensor StateRowsTensor(const std::string& name, int64_t first, int64_t rows,
                                  std::vector<int64_t> state, DType dtype, int64_t axis) {
  if (axis >= (int64_t)state.size() || rows < 0 || first < 0 || first + rows > state[axis])
    throw Error("state '" + name + "': rows [" + std::to_string(first) + ", " + std::to_string(first + rows) +
                ") asked of " + std::to_string(axis < (int64_t)state.size() ? state[axis] : 0));
  state[axis] = rows;
  return HostTensor::Zeros(dtype, state);
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
  // Persistent state crossing to another device (a KV cache prefilled on one and decoded on another):
  // rows [first, first + rows) of state `name` along its row axis (StateRowAxis), in the graph's dtype
  // (zeros where nothing was written), and writing such rows back in place from row `first`.
  virtual HostTensor ReadStateRows(const std::string& name, int64_t first, int64_t rows) = 0;
  virtual void WriteStateRows(const std::string& name, int64_t first, const HostTensor& rows) = 0;
  // Predicted seconds for `bytes` of state to cross between this device and the host (a simulated device's
  // link); 0 where the copy's wall time is its time.
  virtual double StateTransferSeconds(double bytes) const {
    (void)bytes;
    return 0;
  }
  // Its kernels' schedule candidates and how to run and time them, for the one search
  // (search/schedule_search.h), which applies its decisions through it; null: one schedule per kernel.
  virtual std::unique_ptr<ScheduleSpace> OpenSearch() { return nullptr; }
  // Writes what loading this executable again needs into an artifact folder (CompileRequest::
  // artifact_dir) and adds its own entries to the artifact's manifest.
  virtual void SaveArtifact(const std::string& dir, nlohmann::json& manifest) {
    (void)manifest;
    throw Error(dir + ": device " + device() + " writes no compiled artifacts (the cpu device does)");
  }
  // Kernels after fusion (the interpreter counts one per graph node).
  virtual size_t kernel_count() const = 0;
  // A device whose clock is a model (a simulated chip, backends/systolic): runs one step as Run does
  // (its simulated kernels computed by the host, for speed) and returns the step's predicted time, its
  // parts and its roofline. Null elsewhere: there the step's wall time is its time.
  virtual nlohmann::json PredictStep(const std::map<std::string, HostTensor>& inputs,
                                     const SymbolBindings& syms) {
    (void)inputs, (void)syms;
    return nullptr;
  }
};

// A device: compiles graphs into executables that run on it.
class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Executable> Compile(const Graph& g, const CompileRequest& req = {}) = 0;
};

// The registry of devices (backends/registry.cpp): one line per device.
std::vector<std::string> DeviceNames();  // "cpu", "opencl", "cuda", "interp", "systolic"
// Opens a device by name ("systolic:NAME" picks a simulated system's description); throws prism::Error with
// one line saying why it is absent here (no driver, no GPU) or that the name is unknown (listing the known
// ones).
std::shared_ptr<Device> OpenDevice(const std::string& name);

}  // namespace prism
