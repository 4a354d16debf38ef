// GGUF parsing: header, metadata key/values, tensor infos, aligned data section.
#include "io/formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "io/formats/mapped_file.h"
#include "ir/error.h"

namespace prism {
namespace {

using nlohmann::json;

enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr int kMaxDims = 4;                  // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;          // real files nest at most once

// Smallest encoding of one value of a type: bounds array counts before we loop over them.
int64_t MinValueBytes(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;  // a string is at least its length
    case kArray: return 12;                                     // element type + count
    default: return 1;
  }
}

std::optional<DType> UsableDType(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 6: return DType::Q5_0;
    case 7: return DType::Q5_1;
    case 8: return DType::Q8_0;
    case 10: return DType::Q2_K;
    case 11: return DType::Q3_K;
    case 12: return DType::Q4_K;
    case 13: return DType::Q5_K;
    case 14: return DType::Q6_K;
    case 20: return DType::IQ4_NL;
    case 23: return DType::IQ4_XS;
    case 24: return DType::I8;
    case 26: return DType::I32;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}

// Bounds-checked little-endian reads over the mapped file; every failure names the file.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* data, int64_t size)
      : path_(path), data_(data), size_(size) {}

  int64_t pos() const { return pos_; }
  int64_t remaining() const { return size_ - pos_; }

  void Need(int64_t n, const std::string& what) const {
    if (n > remaining())
      throw Error(path_ + ": truncated file: " + what + " at offset " + std::to_string(pos_) +
                  " needs " + std::to_string(n) + " bytes but only " +
                  std::to_string(remaining()) + " remain (file is " + std::to_string(size_) +
                  " bytes)");
  }

  template <typename T>
  T Read(const std::string& what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string ReadString(const std::string& what) {
    uint64_t len = Read<uint64_t>(what + " length");
    if (len > static_cast<uint64_t>(remaining()))
      throw Error(path_ + ": truncated file: " + what + " at offset " + std::to_string(pos_) +
                  " claims " + std::to_string(len) + " bytes but only " +
                  std::to_string(remaining()) + " remain");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += static_cast<int64_t>(len);
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  int64_t size_;
  int64_t pos_ = 0;
};

json ReadValue(Reader& r, const std::string& path, uint32_t type, const std::string& key,
               int depth) {
  const std::string what = "value of '" + key + "'";
  switch (type) {
    case kU8: return r.Read<uint8_t>(what);
    case kI8: return r.Read<int8_t>(what);
    case kU16: return r.Read<uint16_t>(what);
    case kI16: return r.Read<int16_t>(what);
    case kU32: return r.Read<uint32_t>(what);
    case kI32: return r.Read<int32_t>(what);
    case kU64: return r.Read<uint64_t>(what);
    case kI64: return r.Read<int64_t>(what);
    case kF32: return static_cast<double>(r.Read<float>(what));
    case kF64: return r.Read<double>(what);
    case kBool: {
      uint8_t b = r.Read<uint8_t>(what);
      if (b > 1)
        throw Error(path + ": key '" + key + "' has bool value " + std::to_string(b) +
                    " (must be 0 or 1)");
      return b == 1;
    }
    case kString: return r.ReadString(what);
    case kArray: {
      if (depth >= kMaxArrayNesting)
        throw Error(path + ": key '" + key + "' nests arrays deeper than " +
                    std::to_string(kMaxArrayNesting));
      uint32_t elem_type = r.Read<uint32_t>("array type of '" + key + "'");
      if (elem_type > kF64)
        throw Error(path + ": key '" + key + "' is an array of unknown value type " +
                    std::to_string(elem_type));
      uint64_t count = r.Read<uint64_t>("array length of '" + key + "'");
      if (count > static_cast<uint64_t>(r.remaining() / MinValueBytes(elem_type)))
        throw Error(path + ": truncated file: array '" + key + "' claims " +
                    std::to_string(count) + " elements but only " +
                    std::to_string(r.remaining()) + " bytes remain");
      json arr = json::array();
      arr.get_ref<json::array_t&>().reserve(count);
      for (uint64_t i = 0; i < count; ++i) arr.push_back(ReadValue(r, path, elem_type, key, depth + 1));
      return arr;
    }
    default:
      throw Error(path + ": key '" + key + "' has unknown value type " + std::to_string(type));
  }
}

}  // namespace

std::string GgmlTypeName(uint32_t t) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",   "Q5_0",    "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",   "Q6_K",    "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",  "IQ2_S",   "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M",  "BF16",    "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
      "MXFP4",   "NVFP4",  "Q1_0"};
  if (t < sizeof(kNames) / sizeof(kNames[0])) return kNames[t];
  return "unknown";
}

GgufFile::GgufFile(const std::string& path) : WeightStore(path, "gguf") {
  auto file = std::make_shared<MappedFile>(path);
  KeepAlive(file);
  Reader r(path, file->data(), file->size());

  uint32_t magic = r.Read<uint32_t>("magic");
  if (magic != kGgufMagic) throw Error(path + ": not a GGUF file (bad magic)");
  version_ = r.Read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    throw Error(path + ": unsupported GGUF version " + std::to_string(version_) +
                " (supported: 2, 3)");
  uint64_t tensor_count = r.Read<uint64_t>("tensor count");
  uint64_t kv_count = r.Read<uint64_t>("metadata count");
  // Each key/value needs >= 13 bytes and each tensor info >= 32, so larger counts are lies.
  if (kv_count > static_cast<uint64_t>(r.remaining() / 13))
    throw Error(path + ": metadata count " + std::to_string(kv_count) +
                " is impossible for a file of " + std::to_string(file->size()) +
                " bytes (truncated or corrupt)");
  if (tensor_count > static_cast<uint64_t>(r.remaining() / 32))
    throw Error(path + ": tensor count " + std::to_string(tensor_count) +
                " is impossible for a file of " + std::to_string(file->size()) +
                " bytes (truncated or corrupt)");

  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = r.ReadString("metadata key " + std::to_string(i));
    uint32_t type = r.Read<uint32_t>("value type of '" + key + "'");
    json value = ReadValue(r, path, type, key, 0);
    if (metadata_.contains(key)) throw Error(path + ": duplicate metadata key '" + key + "'");
    metadata_[key] = std::move(value);
  }

  if (auto it = metadata_.find("general.alignment"); it != metadata_.end()) {
    // The spec says uint32; accept any integer type holding a sane power of two.
    const int64_t a = it->is_number_integer() ? it->get<int64_t>() : 0;
    if (a <= 0 || (a & (a - 1)) != 0 || a > (int64_t{1} << 30))
      throw Error(path + ": general.alignment must be a power of two, got " + it->dump());
    alignment_ = static_cast<uint64_t>(a);
  }

  infos_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo info;
    info.name = r.ReadString("tensor name " + std::to_string(i));
    const std::string what = path + ": tensor '" + info.name + "'";
    uint32_t n_dims = r.Read<uint32_t>("dimension count of '" + info.name + "'");
    if (n_dims < 1 || n_dims > kMaxDims)
      throw Error(what + " has " + std::to_string(n_dims) + " dimensions (must be 1 to 4)");
    info.shape.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = r.Read<uint64_t>("dimensions of '" + info.name + "'");
      if (ne > static_cast<uint64_t>(INT64_MAX))
        throw Error(what + " has dimension " + std::to_string(ne) + " out of range");
      info.shape[n_dims - 1 - d] = static_cast<int64_t>(ne);  // ne[0] is innermost
    }
    info.ggml_type = r.Read<uint32_t>("type of '" + info.name + "'");
    info.offset = r.Read<uint64_t>("data offset of '" + info.name + "'");
    infos_.push_back(std::move(info));
  }

  // The data section starts at the first aligned offset after the header.
  const uint64_t header_end = static_cast<uint64_t>(r.pos());
  const uint64_t data_start = (header_end + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t file_size = static_cast<uint64_t>(file->size());
  if (!infos_.empty() && data_start > file_size)
    throw Error(path + ": truncated file: data section would start at " +
                std::to_string(data_start) + " but the file is " + std::to_string(file_size) +
                " bytes");
  const uint64_t data_size = data_start > file_size ? 0 : file_size - data_start;

  for (const GgufTensorInfo& info : infos_) {
    const std::string what = path + ": tensor '" + info.name + "'";
    if (info.offset % alignment_ != 0)
      throw Error(what + " has offset " + std::to_string(info.offset) +
                  " not aligned to general.alignment " + std::to_string(alignment_));
    if (info.offset > data_size)
      throw Error(what + " extends past end of file (offset " +
                  std::to_string(data_start + info.offset) + " > " + std::to_string(file_size) +
                  " bytes)");
    int64_t count;
    if (!CheckedElementCount(info.shape, &count))
      throw Error(what + ": shape " + ShapeString(info.shape) + " overflows");
    std::optional<DType> dtype = UsableDType(info.ggml_type);
    if (!dtype) {
      AddUnsupported(info.name, what + " has ggml type " + std::to_string(info.ggml_type) +
                                    " (" + GgmlTypeName(info.ggml_type) +
                                    "), which Prism does not support (supported: F32, F16, "
                                    "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K, IQ4_NL, "
                                    "IQ4_XS, I8, I32)");
      continue;
    }
    if (IsQuantized(*dtype) && info.shape.back() % BlockElems(*dtype) != 0)
      throw Error(what + " of type " + GgmlTypeName(info.ggml_type) + " has shape " +
                  ShapeString(info.shape) + " whose last dimension is not a multiple of " +
                  std::to_string(BlockElems(*dtype)));
    int64_t nbytes;
    if (!CheckedStorageBytes(*dtype, count, &nbytes))
      throw Error(what + ": shape " + ShapeString(info.shape) + " overflows");
    if (static_cast<uint64_t>(nbytes) > data_size - info.offset)
      throw Error(what + " extends past end of file (offset " +
                  std::to_string(data_start + info.offset) + " + " + std::to_string(nbytes) +
                  " > " + std::to_string(file_size) + " bytes)");
    AddTensor(TensorData{info.name, *dtype, info.shape,
                         file->data() + data_start + info.offset, nbytes});
  }
  // A shape that needs more bytes than its type holds before the next tensor's data would read that
  // tensor's bytes as its own: tensors may not overlap.
  std::vector<const TensorData*> by_start;
  for (const TensorData& t : Tensors()) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(),
            [](const TensorData* a, const TensorData* b) { return a->data < b->data; });
  for (size_t i = 0; i + 1 < by_start.size(); ++i) {
    const TensorData& a = *by_start[i];
    const TensorData& b = *by_start[i + 1];
    const auto* a_start = static_cast<const uint8_t*>(a.data);
    const auto* b_start = static_cast<const uint8_t*>(b.data);
    if (a_start + a.nbytes > b_start)
      throw Error(path + ": tensor '" + a.name + "' of type " + std::string(DTypeName(a.dtype)) + " and shape " +
                  ShapeString(a.shape) + " needs " + std::to_string(a.nbytes) + " bytes but tensor '" + b.name +
                  "' starts " + std::to_string(b_start - a_start) + " bytes after it");
  }
}

uint32_t GgufFile::GgmlType(const std::string& name) const {
  for (const GgufTensorInfo& info : infos_)
    if (info.name == name) return info.ggml_type;
  throw Error(Source() + ": missing tensor '" + name + "'");
}

std::string GgufFile::Architecture() const {
  auto it = metadata_.find("general.architecture");
  if (it == metadata_.end() || !it->is_string())
    throw Error(Source() + ": missing string metadata 'general.architecture'");
  return it->get<std::string>();
}

std::unique_ptr<GgufFile> LoadGguf(const std::string& path) {
  return std::unique_ptr<GgufFile>(new GgufFile(path));
}

}  // namespace prism
