// The tuning database: schedule decisions by a kernel's structure, the device and the size bucket.
#include "search/tuning_db.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "compiler/kernel_hash.h"
#include "ir/fnv.h"

namespace prism {
namespace {

// 3: a kernel's structural hash (compiler/kernel_hash.h), the device's identity (for the CPU: its model,
// team size, micro-kernel tier and template revision), the bucket.
constexpr int kKeyVersion = 3;

std::string Where(const std::string& device, const std::string& bucket) {
  return "|" + device + "|" + bucket + "|k" + std::to_string(kKeyVersion);
}

std::string Fnv(const std::string& text) { return FnvHex(Fnv1a(text)); }

}  // namespace

TuningDb::TuningDb(std::string path) : path_(std::move(path)) {
  if (path_.empty() || !std::filesystem::exists(path_)) return;
  std::ifstream f(path_);
  db_ = nlohmann::json::parse(f, nullptr, false);
  if (!db_.is_object()) db_ = nlohmann::json::object();  // unreadable: searched again, then rewritten
}

std::string TuningDb::KernelKey(const KernelProgram& kp, size_t k, const std::string& device,
                                const std::string& bucket) {
  return KernelStructuralHash(kp, kp.kernels[k]) + Where(device, bucket);
}

std::string TuningDb::StepKey(const std::vector<std::string>& kernel_keys, const std::string& device,
                              const std::string& bucket) {
  std::string all;
  for (const std::string& k : kernel_keys) all += k + ";";
  return "step:" + Fnv(all) + Where(device, bucket);
}

std::string TuningDb::ProgramKey(const std::string& written_text, const std::string& rules,
                                 const std::string& device) {
  return "program:" + Fnv(written_text) + "|rules " + rules + Where(device, "all");
}

const nlohmann::json* TuningDb::Find(const std::string& key) const {
  auto it = db_.find(key);
  return it == db_.end() ? nullptr : &*it;
}

void TuningDb::Put(const std::string& key, nlohmann::json entry) {
  db_[key] = std::move(entry);
  changed_ = true;
}

void TuningDb::Erase(const std::string& key) { changed_ |= db_.erase(key) > 0; }

void TuningDb::Save() const {
  if (!changed_ || path_.empty()) return;
  std::filesystem::path p(path_);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::string tmp = path_ + ".tmp" + std::to_string(getpid());
  std::ofstream(tmp) << db_.dump(1);
  std::filesystem::rename(tmp, path_);
}

}  // namespace prism
