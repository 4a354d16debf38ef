// A tensor in host memory (owned or borrowed) and symbol binding from concrete input shapes.
#include "ir/host_tensor.h"

#include <cstdlib>
#include <cstring>

#include "ir/error.h"
#include "ir/quant_formats.h"

namespace prism {

static int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor ConcatRows(const std::vector<HostTensor>& parts, const std::string& what) {
  if (parts.empty()) throw Error(what + ": nothing to concatenate");
  int64_t rows = 0;
  for (const HostTensor& p : parts) {
    if (p.dtype != parts[0].dtype || p.shape.size() != 2 || p.shape[1] != parts[0].shape[1])
      throw Error(what + ": parts " + parts[0].ShapeString() + " " + std::string(DTypeName(parts[0].dtype)) +
                  " and " + p.ShapeString() + " " + std::string(DTypeName(p.dtype)) +
                  " do not stack as rows");
    rows += p.shape[0];
  }
  HostTensor out = HostTensor::Zeros(parts[0].dtype, {rows, parts[0].shape[1]});
  char* at = (char*)out.data;
  for (const HostTensor& p : parts) {
    std::memcpy(at, p.data, (size_t)p.nbytes());
    at += p.nbytes();
  }
  return out;
}

HostTensor HostTensor::Uninitialized(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  size_t bytes = (size_t)std::max<int64_t>(t.nbytes(), 1);
  // 64-byte alignment so generated kernels may use aligned vector loads.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes for " + t.ShapeString());
  t.owner = std::shared_ptr<void>(p, std::free);
  t.data = p;
  return t;
}

HostTensor HostTensor::Zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t = Uninitialized(dtype, std::move(shape));
  std::memset(t.data, 0, (size_t)std::max<int64_t>(t.nbytes(), 1));
  return t;
}

HostTensor HostTensor::FromFloats(std::vector<int64_t> shape, const std::vector<float>& values, DType dtype) {
  HostTensor t = Zeros(dtype, std::move(shape));
  if ((int64_t)values.size() != t.numel())
    throw Error("FromFloats: " + std::to_string(values.size()) + " values for shape " + t.ShapeString());
  if (IsQuantized(dtype)) {
    if (IsBlockFormat(dtype))
      throw Error("FromFloats: Prism does not quantize to " + std::string(DTypeName(dtype)) +
                  " (it reads that type from GGUF files)");
    if (dtype == DType::Q8_0)
      QuantizeQ8_0(values.data(), static_cast<BlockQ8_0*>(t.data), t.numel());
    else
      QuantizeQ4_0(values.data(), static_cast<BlockQ4_0*>(t.data), t.numel());
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) StoreFromDouble(t.data, dtype, i, values[i]);
  }
  return t;
}

HostTensor HostTensor::FromInts(std::vector<int64_t> shape, const std::vector<int32_t>& values) {
  HostTensor t = Zeros(DType::I32, std::move(shape));
  if ((int64_t)values.size() != t.numel())
    throw Error("FromInts: " + std::to_string(values.size()) + " values for shape " + t.ShapeString());
  std::memcpy(t.data, values.data(), values.size() * 4);
  return t;
}

HostTensor HostTensor::Borrow(DType dtype, std::vector<int64_t> shape, const void* data) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = const_cast<void*>(data);
  return t;
}

int64_t HostTensor::numel() const { return Numel(shape); }

std::vector<float> HostTensor::ToFloats() const {
  std::vector<float> v(numel());
  if (dtype == DType::F32 && !v.empty()) {
    std::memcpy(v.data(), data, v.size() * sizeof(float));
    return v;
  }
  for (int64_t i = 0; i < (int64_t)v.size(); ++i) v[i] = (float)At(i);
  return v;
}

std::string HostTensor::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> EvalShape(const std::vector<Expr>& shape, const SymbolBindings& b) {
  std::vector<int64_t> out;
  for (const Expr& d : shape) out.push_back(d.Eval(b));
  return out;
}

std::vector<const Node*> InputNodes(const Graph& g) {
  std::vector<const Node*> v;
  for (const Node& n : g.nodes())
    if (n.op == Op::Input) v.push_back(&n);
  return v;
}

SymbolBindings BindSymbols(const Graph& g, const std::map<std::string, HostTensor>& inputs,
                           const SymbolBindings& explicit_bindings) {
  return BindSymbols(InputNodes(g), g.Symbols(), inputs, explicit_bindings);
}

SymbolBindings BindSymbols(const std::vector<const Node*>& graph_inputs,
                           const std::vector<std::string>& symbols,
                           const std::map<std::string, HostTensor>& inputs,
                           const SymbolBindings& explicit_bindings) {
  SymbolBindings b = explicit_bindings;
  for (const Node* n : graph_inputs) {
    auto it = inputs.find(n->name);
    if (it == inputs.end()) throw Error("missing input '" + n->name + "' of shape " + ShapeStr(n->shape));
    const HostTensor& t = it->second;
    if (t.shape.size() != n->shape.size())
      throw Error("input '" + n->name + "': rank " + std::to_string(t.shape.size()) +
                  " given, graph expects " + ShapeStr(n->shape));
    for (size_t i = 0; i < n->shape.size(); ++i)
      if (n->shape[i].kind() == Expr::Kind::Sym && !b.count(n->shape[i].name()))
        b[n->shape[i].name()] = t.shape[i];
  }
  for (const std::string& s : symbols)
    if (!b.count(s))
      throw Error("unbound symbol '" + s + "': give it a value or an input whose shape binds it");
  for (const Node* n : graph_inputs) {
    const HostTensor& t = inputs.at(n->name);
    if (t.dtype != n->dtype)
      throw Error("input '" + n->name + "': dtype " + std::string(DTypeName(t.dtype)) +
                  " given, graph expects " + std::string(DTypeName(n->dtype)));
    for (size_t i = 0; i < n->shape.size(); ++i) {
      int64_t want = n->shape[i].Eval(b);
      if (want != t.shape[i])
        throw Error("input '" + n->name + "' axis " + std::to_string(i) + ": size " +
                    std::to_string(t.shape[i]) + " given, graph expects " + n->shape[i].str() + " = " +
                    std::to_string(want));
    }
  }
  for (const auto& [name, v] : b)
    if (v < 0) throw Error("symbol '" + name + "' bound to negative value " + std::to_string(v));
  return b;
}

void FillRandomNonZero(void* data, DType t, int64_t n, std::mt19937& rng) {
  if (IsBlockFormat(t)) return FillRandomBlocks(t, data, n / BlockElems(t), rng);
  // Values in +-[0.05, 1) (small integers for integer types) from a splitmix64 stream the caller's generator
  // seeds: a 1B model's schedule search fills hundreds of MB, and an mt19937 draw and a distribution per
  // value were 13% of its compile.
  uint64_t state = ((uint64_t)rng() << 32) | rng();
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto value = [&next] {
    const uint64_t z = next();
    const float mag = 0.05f + 0.95f * (float)(z >> 40) * 0x1p-24f;
    return (z & 1) ? mag : -mag;
  };
  if (IsQuantized(t)) {
    std::vector<float> f((size_t)n);
    for (float& x : f) x = value();
    HostTensor q = HostTensor::FromFloats({n}, f, t);
    std::memcpy(data, q.data, (size_t)q.nbytes());
    return;
  }
  if (t == DType::F32) {
    float* out = static_cast<float*>(data);
    for (int64_t i = 0; i < n; ++i) out[i] = value();
    return;
  }
  for (int64_t i = 0; i < n; ++i) StoreFromDouble(data, t, i, IsFloat(t) ? value() : (double)(next() % 4));
}

}  // namespace prism
