// WeightStore bookkeeping (lookup by name, duplicate detection) and shape helpers.
#include "io/formats/weights.h"

#include "ir/error.h"

namespace prism {

const TensorData* WeightStore::Find(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return &tensors_[it->second];
  auto bad = unsupported_.find(name);
  if (bad != unsupported_.end()) throw Error(bad->second);
  return nullptr;
}

const TensorData& WeightStore::Get(const std::string& name) const {
  const TensorData* t = Find(name);
  if (t == nullptr) throw Error(source_ + ": missing tensor '" + name + "'");
  return *t;
}

void WeightStore::AddTensor(TensorData tensor) {
  if (index_.count(tensor.name) || unsupported_.count(tensor.name))
    throw Error(source_ + ": duplicate tensor '" + tensor.name + "'");
  index_.emplace(tensor.name, tensors_.size());
  tensors_.push_back(std::move(tensor));
}

void WeightStore::AddUnsupported(const std::string& name, std::string reason) {
  if (index_.count(name) || unsupported_.count(name))
    throw Error(source_ + ": duplicate tensor '" + name + "'");
  unsupported_.emplace(name, std::move(reason));
}

bool CheckedElementCount(const std::vector<int64_t>& shape, int64_t* count) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  *count = n;
  return true;
}

bool CheckedStorageBytes(DType t, int64_t n, int64_t* bytes) {
  if (n < 0 || n % BlockElems(t) != 0) return false;
  return !__builtin_mul_overflow(n / BlockElems(t), static_cast<int64_t>(BlockBytes(t)), bytes);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace prism
