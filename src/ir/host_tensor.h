// A tensor in host memory (owned or borrowed) and symbol binding from concrete input shapes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/graph.h"

namespace prism {

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::shared_ptr<void> owner;  // keeps data alive (null when borrowed)
  void* data = nullptr;

  static HostTensor Zeros(DType dtype, std::vector<int64_t> shape);
  // Owned memory left as it is (for a result written whole before anyone reads it).
  static HostTensor Uninitialized(DType dtype, std::vector<int64_t> shape);
  static HostTensor FromFloats(std::vector<int64_t> shape, const std::vector<float>& values,
                               DType dtype = DType::F32);
  static HostTensor FromInts(std::vector<int64_t> shape, const std::vector<int32_t>& values);
  // Points at memory owned elsewhere (e.g. a memory-mapped weight file) without copying.
  static HostTensor Borrow(DType dtype, std::vector<int64_t> shape, const void* data);

  int64_t numel() const;
  int64_t nbytes() const { return StorageBytes(dtype, numel()); }
  double At(int64_t i) const { return LoadAsDouble(data, dtype, i); }
  std::vector<float> ToFloats() const;
  std::string ShapeString() const;
};

// The rows of tensors [N_i, K] of one dtype one after another: [sum N_i, K] (a weight named by
// ConcatWeightName). Throws prism::Error when the dtypes or row lengths differ.
HostTensor ConcatRows(const std::vector<HostTensor>& parts, const std::string& what);

using SymbolBindings = std::map<std::string, int64_t>;

// Binds symbols from the concrete shapes of the inputs (a dimension that is a bare symbol binds
// it), merges explicit bindings, then checks every input dimension. Throws prism::Error naming
// the input, the axis and both values on a mismatch, or the first symbol left unbound.
SymbolBindings BindSymbols(const Graph& g, const std::map<std::string, HostTensor>& inputs,
                           const SymbolBindings& explicit_bindings);
// The same with the graph's Input nodes and symbols listed once in advance (per-step hot path).
SymbolBindings BindSymbols(const std::vector<const Node*>& graph_inputs,
                           const std::vector<std::string>& symbols,
                           const std::map<std::string, HostTensor>& inputs,
                           const SymbolBindings& explicit_bindings);
std::vector<const Node*> InputNodes(const Graph& g);

// Random values away from zero (a kernel that drops a term cannot hide behind a zero operand) for n
// elements of type t: quantized blocks are real quantizations of such values; integers (token ids,
// positions) are small, since gathers clamp them anyway.
void FillRandomNonZero(void* data, DType t, int64_t n, std::mt19937& rng);

std::vector<int64_t> EvalShape(const std::vector<Expr>& shape, const SymbolBindings& b);

}  // namespace prism
