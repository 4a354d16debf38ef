// The tuning database: schedule decisions by a kernel's structure, the device and the size bucket, in
// one JSON file that every search reads and writes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/kernel_ir.h"

namespace prism {

class TuningDb {
 public:
  explicit TuningDb(std::string path);  // "" = no file: decisions live for this search only
  // Keys: what is decided (a kernel's structural hash, or the step's: all its kernels'), then where (the
  // device's identity, the bucket) and the key format's version. Entries of another version never match.
  static std::string KernelKey(const KernelProgram& kp, size_t k, const std::string& device,
                               const std::string& bucket);
  static std::string StepKey(const std::vector<std::string>& kernel_keys, const std::string& device,
                             const std::string& bucket);
  // A program decision (search/program_search.h): which rewritten program of the graph `written_text` runs,
  // under these rules (their fingerprint), on this device.
  static std::string ProgramKey(const std::string& written_text, const std::string& rules,
                                const std::string& device);
  const nlohmann::json* Find(const std::string& key) const;
  void Put(const std::string& key, nlohmann::json entry);
  void Erase(const std::string& key);
  void Save() const;  // atomically (a renamed temporary), when anything changed

 private:
  std::string path_;
  nlohmann::json db_ = nlohmann::json::object();
  bool changed_ = false;
};

}  // namespace prism
