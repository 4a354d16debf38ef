// The reference interpreter: runs any graph on the CPU in double precision; ground truth for all.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace prism {

// Deliberately simple: every node is materialized as a dense row-major array of doubles,
// rounded to the node's dtype, and every op is a direct loop over concrete indices.
class Interpreter {
 public:
  explicit Interpreter(const Graph& g) : g_(g) {}
  void BindWeight(const std::string& name, HostTensor t) { weights_[name] = std::move(t); }
  // Runs one step; returns the outputs in the graph's output order (as f32 unless integer).
  std::vector<HostTensor> Run(const std::map<std::string, HostTensor>& inputs,
                              const SymbolBindings& syms = {});
  // Persistent state values (allocated as zeros on first use).
  const std::vector<double>& StateValues(const std::string& name) const { return state_.at(name); }
  // State `name`'s values to change in place (allocated as zeros of its node's shape if not yet).
  std::vector<double>& MutableStateValues(const std::string& name);
  void ResetState() { state_.clear(); }

 private:
  const Graph& g_;
  std::map<std::string, HostTensor> weights_;
  std::map<std::string, std::vector<double>> state_;
};

}  // namespace prism
