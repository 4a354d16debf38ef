// Safetensors parsing: 8-byte header length, JSON header, then raw little-endian tensor bytes.
#include "io/formats/safetensors.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "io/formats/mapped_file.h"
#include "ir/error.h"

namespace prism {
namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::optional<DType> SupportedDType(const std::string& name) {
  static const std::map<std::string, DType> kTypes = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"I32", DType::I32},
      {"I8", DType::I8},   {"U8", DType::U8},   {"BOOL", DType::Bool}};
  auto it = kTypes.find(name);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
}

// Element sizes of dtypes we cannot use, so their byte ranges are still checked.
int UnsupportedElementBytes(const std::string& name) {
  static const std::map<std::string, int> kSizes = {
      {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I16", 2},     {"U16", 2},
      {"U32", 4}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = kSizes.find(name);
  return it == kSizes.end() ? 0 : it->second;
}

bool JsonToInt64(const json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return *out >= 0;
  }
  return false;
}

// Parses JSON, rejecting duplicate keys in the top-level object (nlohmann would keep the
// last silently, hiding a corrupt or hand-edited header).
json ParseJsonRejectingDuplicates(const std::string& path, const char* first, const char* last) {
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(first, last, callback);
  } catch (const json::exception& e) {
    throw Error(path + ": header is not valid JSON (" + e.what() + ")");
  }
  if (!duplicate.empty()) throw Error(path + ": duplicate tensor '" + duplicate + "' in header");
  return j;
}

class SafetensorsStore : public WeightStore {
 public:
  explicit SafetensorsStore(const std::string& source) : WeightStore(source, "safetensors") {}

  // Maps one file and adds its tensors; returns their names.
  std::set<std::string> AddFile(const std::string& path) {
    auto file = std::make_shared<MappedFile>(path);
    KeepAlive(file);
    const int64_t size = file->size();
    if (size < 8)
      throw Error(path + ": truncated file (" + std::to_string(size) +
                  " bytes, need at least 8 for the header length)");
    uint64_t header_len;
    std::memcpy(&header_len, file->data(), 8);  // little-endian, as is every supported host
    if (header_len > static_cast<uint64_t>(size - 8))
      throw Error(path + ": header length " + std::to_string(header_len) +
                  " extends past end of file (8 + " + std::to_string(header_len) + " > " +
                  std::to_string(size) + " bytes)");
    if (header_len > kMaxHeaderBytes)
      throw Error(path + ": header length " + std::to_string(header_len) +
                  " exceeds the 100 MB limit");
    const char* text = reinterpret_cast<const char*>(file->data() + 8);
    json header = ParseJsonRejectingDuplicates(path, text, text + header_len);
    if (!header.is_object()) throw Error(path + ": header is not a JSON object");

    const uint8_t* base = file->data() + 8 + header_len;
    const int64_t data_size = size - 8 - static_cast<int64_t>(header_len);
    std::set<std::string> names;
    for (auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;  // free-form string map; nothing we need
      AddEntry(path, name, entry, base, data_size);
      names.insert(name);
    }
    return names;
  }

 private:
  void AddEntry(const std::string& path, const std::string& name, const json& entry,
                const uint8_t* base, int64_t data_size) {
    const std::string what = path + ": tensor '" + name + "'";
    if (!entry.is_object()) throw Error(what + ": header entry is not an object");
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string())
      throw Error(what + ": missing or non-string 'dtype'");
    if (shape_it == entry.end() || !shape_it->is_array())
      throw Error(what + ": missing or non-array 'shape'");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2)
      throw Error(what + ": 'data_offsets' must be an array of two integers");

    std::vector<int64_t> shape;
    for (const json& d : *shape_it) {
      int64_t v;
      if (!JsonToInt64(d, &v)) throw Error(what + ": shape entries must be non-negative integers");
      shape.push_back(v);
    }
    int64_t begin, end;
    if (!JsonToInt64((*offsets_it)[0], &begin) || !JsonToInt64((*offsets_it)[1], &end))
      throw Error(what + ": 'data_offsets' must be non-negative integers");
    if (begin > end)
      throw Error(what + ": data_offsets [" + std::to_string(begin) + ", " +
                  std::to_string(end) + "] are reversed");
    if (end > data_size)
      throw Error(what + " extends past end of file (data_offsets end " + std::to_string(end) +
                  " > " + std::to_string(data_size) + " bytes of tensor data)");
    int64_t count;
    if (!CheckedElementCount(shape, &count))
      throw Error(what + ": shape " + ShapeString(shape) + " overflows");

    const std::string dtype_name = dtype_it->get<std::string>();
    std::optional<DType> dtype = SupportedDType(dtype_name);
    int64_t expected = -1;
    if (dtype) {
      if (!CheckedStorageBytes(*dtype, count, &expected))
        throw Error(what + ": shape " + ShapeString(shape) + " overflows");
    } else if (int elem = UnsupportedElementBytes(dtype_name); elem > 0) {
      if (__builtin_mul_overflow(count, static_cast<int64_t>(elem), &expected))
        throw Error(what + ": shape " + ShapeString(shape) + " overflows");
    }
    if (expected >= 0 && end - begin != expected)
      throw Error(what + ": holds " + std::to_string(end - begin) + " bytes but shape " +
                  ShapeString(shape) + " of " + dtype_name + " needs " +
                  std::to_string(expected));
    if (!dtype) {
      AddUnsupported(name, what + " has dtype " + dtype_name +
                               ", which Prism does not support (supported: F32, F16, BF16, "
                               "I32, I8, U8, BOOL)");
      return;
    }
    AddTensor(TensorData{name, *dtype, std::move(shape), base + begin, end - begin});
  }
};

void LoadSharded(SafetensorsStore& store, const std::filesystem::path& folder,
                 const std::string& index_path) {
  MappedFile index_file(index_path);
  const char* text = reinterpret_cast<const char*>(index_file.data());
  json index;
  try {
    index = json::parse(text, text + index_file.size());
  } catch (const json::exception& e) {
    throw Error(index_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(index_path + ": missing 'weight_map' object");
  std::map<std::string, std::vector<std::string>> by_shard;  // shard file -> tensor names
  for (auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw Error(index_path + ": weight_map entry for '" + name + "' is not a file name");
    std::string file = shard.get<std::string>();
    std::filesystem::path rel(file);
    bool escapes = false;  // a shard must live inside the folder
    for (const auto& part : rel) escapes = escapes || part == "..";
    if (file.empty() || rel.is_absolute() || escapes)
      throw Error(index_path + ": weight_map entry for '" + name + "' names an invalid file '" +
                  file + "'");
    by_shard[file].push_back(name);
  }
  if (by_shard.empty()) throw Error(index_path + ": weight_map is empty");
  for (const auto& [file, names] : by_shard) {
    const std::string shard_path = (folder / file).string();
    std::set<std::string> present = store.AddFile(shard_path);
    for (const std::string& name : names) {
      if (!present.count(name))
        throw Error(index_path + ": tensor '" + name + "' is mapped to '" + file +
                    "', which does not contain it");
    }
  }
}

}  // namespace

std::unique_ptr<WeightStore> LoadSafetensors(const std::string& path) {
  namespace fs = std::filesystem;
  auto store = std::make_unique<SafetensorsStore>(path);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    store->AddFile(path);
    return store;
  }
  const fs::path folder(path);
  if (fs::exists(folder / "model.safetensors", ec)) {
    store->AddFile((folder / "model.safetensors").string());
  } else if (fs::exists(folder / "model.safetensors.index.json", ec)) {
    LoadSharded(*store, folder, (folder / "model.safetensors.index.json").string());
  } else {
    throw Error(path + ": folder holds neither model.safetensors nor "
                       "model.safetensors.index.json");
  }
  return store;
}

}  // namespace prism
