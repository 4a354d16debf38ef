// The common view of a loaded model file: named tensors pointing into memory-mapped storage.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/dtype.h"

namespace prism {

// A tensor inside a loaded file; `data` points into the mapping owned by its WeightStore.
// Shapes are row-major, outermost first (GGUF's ne[] reversed). Quantized tensors (Q8_0,
// Q4_0) are blocked along the innermost dimension. `data` is only as aligned as the file
// makes it (GGUF: general.alignment; safetensors: 8 when written by the reference writer).
struct TensorData {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  int64_t nbytes;
};

// Owns the file mappings; tensors stay valid for the store's lifetime.
class WeightStore {
 public:
  virtual ~WeightStore() = default;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // nullptr if absent. A tensor present in the file but in a type Prism cannot use
  // (see Unsupported()) throws instead, so that e.g. a Q6_K lm_head is never mistaken for
  // "no lm_head, use tied embeddings".
  const TensorData* Find(const std::string& name) const;
  // Throws "<source>: missing tensor 'name'" (or the unsupported-type message).
  const TensorData& Get(const std::string& name) const;
  // Usable tensors in file order (unsupported ones are left out).
  const std::vector<TensorData>& Tensors() const { return tensors_; }
  // Tensors present but unusable: name -> one-line reason (e.g. unsupported ggml type).
  const std::map<std::string, std::string>& Unsupported() const { return unsupported_; }
  const std::string& Source() const { return source_; }  // path, for messages
  // Lives as long as this store (and as long as anyone holding it): an owner for tensors borrowed from
  // the store, by which what is derived from them is shared while the store lives (weight_memory.h).
  const std::shared_ptr<void>& Lifetime() const { return lifetime_; }
  // "safetensors", "gguf" or "llama2c": tells models which layout conventions apply (e.g.
  // GPT-2 Conv1D weights are [in, out] in safetensors but [out, in] in GGUF).
  const std::string& Format() const { return format_; }

 protected:
  WeightStore(std::string source, std::string format)
      : source_(std::move(source)), format_(std::move(format)) {}
  // Throws "<source>: duplicate tensor 'name'" when the name is already taken.
  void AddTensor(TensorData tensor);
  void AddUnsupported(const std::string& name, std::string reason);
  // Keeps whatever backs the tensors (a MappedFile, another store) alive with this store.
  void KeepAlive(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }

 private:
  std::string source_;
  std::string format_;
  std::vector<TensorData> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> unsupported_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::shared_ptr<void> lifetime_ = std::make_shared<char>();
};

// Product of `shape` into *count; false on a negative dimension or int64 overflow.
bool CheckedElementCount(const std::vector<int64_t>& shape, int64_t* count);
// Bytes for n elements of t into *bytes; false on overflow or, for block-quantized types,
// when n is not a whole number of blocks.
bool CheckedStorageBytes(DType t, int64_t n, int64_t* bytes);
// "[2, 3, 4]", for messages.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace prism
