// Loader for GGUF (v2/v3) model files: metadata as JSON, tensors memory-mapped in place.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/formats/weights.h"

namespace prism {

// Every tensor in a GGUF file, whether Prism can use its type or not.
struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type;          // raw ggml type number (0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 30 BF16...)
  std::vector<int64_t> shape;  // outermost first (ne[] reversed)
  uint64_t offset;             // from the start of the data section
};

// A loaded GGUF file. Tensors() holds the usable ones under their GGUF names
// (token_embd.weight, blk.0.attn_q.weight, ...); see HfNamedView (models/family.h) for Hugging Face names.
// Usable ggml types: F32, F16, BF16, Q8_0, Q4_0, I8, I32. Tensors of any other type (Q4_K,
// Q6_K, ...) still load with the file; they are listed in Unsupported() and TensorInfos(),
// and Find/Get on them throw, naming the tensor and its ggml type.
class GgufFile : public WeightStore {
 public:
  // key -> value. Integers stay integers (unsigned types as unsigned), floats become
  // doubles, arrays become JSON arrays (nested arrays too).
  const nlohmann::json& Metadata() const { return metadata_; }
  uint32_t Version() const { return version_; }
  uint64_t Alignment() const { return alignment_; }
  const std::vector<GgufTensorInfo>& TensorInfos() const { return infos_; }
  // Raw ggml type of a tensor (usable or not); throws if the file has no such tensor.
  uint32_t GgmlType(const std::string& name) const;
  // general.architecture; throws if missing or not a string.
  std::string Architecture() const;

 private:
  friend std::unique_ptr<GgufFile> LoadGguf(const std::string& path);
  explicit GgufFile(const std::string& path);

  nlohmann::json metadata_ = nlohmann::json::object();
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<GgufTensorInfo> infos_;
};

// Validates everything (magic, version, counts, string lengths, value types, alignment,
// tensor extents) and throws prism::Error naming the file on the first problem.
std::unique_ptr<GgufFile> LoadGguf(const std::string& path);

// "Q4_K" for known ggml type numbers, "unknown" otherwise.
std::string GgmlTypeName(uint32_t ggml_type);

}  // namespace prism
