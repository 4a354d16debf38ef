// A read-only memory mapping of a whole file (RAII), the storage behind every weight loader.
#pragma once

#include <cstdint>
#include <string>

namespace prism {

class MappedFile {
 public:
  // Maps `path` read-only; throws prism::Error naming the path if it is missing, not a
  // regular file, or cannot be read. An empty file maps to data() == nullptr, size() == 0.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace prism
