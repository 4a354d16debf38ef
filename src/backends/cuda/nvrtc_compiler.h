// CUDA C -> CUBIN/PTX through NVRTC, loaded at run time (works on machines without a GPU).
#pragma once

#include <string>
#include <vector>

namespace prism {

struct NvrtcOutput {
  std::string arch;         // as requested: "sm_90" (CUBIN) or "compute_90" (PTX)
  bool cubin = false;       // true: image is a CUBIN; false: NUL-terminated PTX text
  std::vector<char> image;  // what cuModuleLoadData takes
  std::string log;          // compiler messages (warnings)
  double seconds = 0;
};

// libnvrtc is found by PRISM_NVRTC (a path), then the default library search path, then
// $CUDA_HOME/lib64 and /usr/local/cuda*/lib64. Missing: Open throws prism::Error starting
// "no NVRTC found".
class NvrtcCompiler {
 public:
  static const NvrtcCompiler& Open();  // loaded once per process
  static bool Available(std::string* why = nullptr);

  // Compiles one translation unit. arch "sm_XY" yields a CUBIN for that GPU, "compute_XY" PTX
  // that the driver JIT-compiles. Errors carry the compiler log.
  NvrtcOutput Compile(const std::string& source, const std::string& arch = "sm_90",
                      const std::vector<std::string>& options = {}) const;

  std::string version() const;  // "13.0"
  const std::string& library() const { return path_; }

  struct Api;

 private:
  NvrtcCompiler() = default;
  const Api* api_ = nullptr;
  std::string path_;
};

}  // namespace prism
