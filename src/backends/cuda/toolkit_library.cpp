// Where a CUDA toolkit library may be: environment override, loader search path, toolkit folders.
#include "backends/cuda/toolkit_library.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace prism {

std::vector<std::string> ToolkitLibraryCandidates(const char* env_var,
                                                  std::initializer_list<const char*> sonames,
                                                  const std::string& base,
                                                  std::initializer_list<const char*> subdirs) {
  std::vector<std::string> out;
  if (const char* p = std::getenv(env_var); p && *p) out.push_back(p);
  for (const char* n : sonames) out.push_back(n);
  std::vector<std::filesystem::path> roots;
  if (const char* h = std::getenv("CUDA_HOME"); h && *h) roots.push_back(h);
  roots.push_back("/usr/local/cuda");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/local", ec))
    if (e.path().filename().string().rfind("cuda-", 0) == 0) roots.push_back(e.path());
  for (const auto& r : roots)
    for (const char* sub : subdirs) {
      std::vector<std::string> found;
      for (const auto& f : std::filesystem::directory_iterator(r / sub, ec)) {
        const std::string name = f.path().filename().string();
        if (name == base || name.rfind(base + ".", 0) == 0) found.push_back(f.path().string());
      }
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    }
  return out;
}

}  // namespace prism
