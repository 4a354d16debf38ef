// Where a CUDA toolkit library may be: the files dlopen should try for one, most specific first.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

namespace prism {

// The file named by the environment variable env_var, then each of sonames (for the loader's own
// search path), then every file named `base` or `base.*` in the toolkit's library folders `subdirs`
// under CUDA_HOME, /usr/local/cuda and /usr/local/cuda-*, sorted within each folder.
std::vector<std::string> ToolkitLibraryCandidates(const char* env_var,
                                                  std::initializer_list<const char*> sonames,
                                                  const std::string& base,
                                                  std::initializer_list<const char*> subdirs);

}  // namespace prism
