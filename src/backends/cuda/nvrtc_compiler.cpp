// NVRTC through dlopen: the few entry points are declared here, so no CUDA headers are needed.
#include "backends/cuda/nvrtc_compiler.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>

#include "backends/cuda/toolkit_library.h"
#include "ir/error.h"

namespace prism {

// The NVRTC C ABI (stable since CUDA 7): an opaque program handle and int result codes.
struct NvrtcCompiler::Api {
  using Program = struct NvrtcProgramOpaque*;
  int (*nvrtcVersion)(int*, int*) = nullptr;
  const char* (*nvrtcGetErrorString)(int) = nullptr;
  int (*nvrtcCreateProgram)(Program*, const char*, const char*, int, const char* const*,
                            const char* const*) = nullptr;
  int (*nvrtcCompileProgram)(Program, int, const char* const*) = nullptr;
  int (*nvrtcGetProgramLogSize)(Program, size_t*) = nullptr;
  int (*nvrtcGetProgramLog)(Program, char*) = nullptr;
  int (*nvrtcGetCUBINSize)(Program, size_t*) = nullptr;
  int (*nvrtcGetCUBIN)(Program, char*) = nullptr;
  int (*nvrtcGetPTXSize)(Program, size_t*) = nullptr;
  int (*nvrtcGetPTX)(Program, char*) = nullptr;
  int (*nvrtcDestroyProgram)(Program*) = nullptr;
};

namespace {

struct Loaded {
  NvrtcCompiler::Api api;
  std::string path;
  std::string error;
};

const Loaded& Load() {
  static std::once_flag once;
  static Loaded l;
  std::call_once(once, [] {
    std::string tried;
    void* lib = nullptr;
    for (const std::string& c : ToolkitLibraryCandidates(
             "PRISM_NVRTC", {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"},
             "libnvrtc.so", {"lib64"})) {
      lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib && dlsym(lib, "nvrtcCompileProgram")) {
        l.path = c;
        break;
      }
      if (lib) dlclose(lib);
      lib = nullptr;
      tried += (tried.empty() ? "" : ", ") + c;
    }
    if (!lib) {
      l.error = "no NVRTC found (tried " + tried + "; set PRISM_NVRTC to libnvrtc.so)";
      return;
    }
#define PRISM_NVRTC_LOAD(name)                                            \
  l.api.name = reinterpret_cast<decltype(l.api.name)>(dlsym(lib, #name)); \
  if (!l.api.name && l.error.empty()) l.error = "no NVRTC found: " + l.path + " lacks " #name;
    PRISM_NVRTC_LOAD(nvrtcVersion)
    PRISM_NVRTC_LOAD(nvrtcGetErrorString)
    PRISM_NVRTC_LOAD(nvrtcCreateProgram)
    PRISM_NVRTC_LOAD(nvrtcCompileProgram)
    PRISM_NVRTC_LOAD(nvrtcGetProgramLogSize)
    PRISM_NVRTC_LOAD(nvrtcGetProgramLog)
    PRISM_NVRTC_LOAD(nvrtcGetCUBINSize)
    PRISM_NVRTC_LOAD(nvrtcGetCUBIN)
    PRISM_NVRTC_LOAD(nvrtcGetPTXSize)
    PRISM_NVRTC_LOAD(nvrtcGetPTX)
    PRISM_NVRTC_LOAD(nvrtcDestroyProgram)
#undef PRISM_NVRTC_LOAD
  });
  return l;
}

}  // namespace

bool NvrtcCompiler::Available(std::string* why) {
  const Loaded& l = Load();
  if (why) *why = l.error;
  return l.error.empty();
}

const NvrtcCompiler& NvrtcCompiler::Open() {
  static NvrtcCompiler c;
  const Loaded& l = Load();
  if (!l.error.empty()) throw Error(l.error);
  c.api_ = &l.api;
  c.path_ = l.path;
  return c;
}

std::string NvrtcCompiler::version() const {
  int major = 0, minor = 0;
  api_->nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

NvrtcOutput NvrtcCompiler::Compile(const std::string& source, const std::string& arch,
                                   const std::vector<std::string>& options) const {
  auto t0 = std::chrono::steady_clock::now();
  const Api& a = *api_;
  auto fail = [&](const char* what, int r) {
    throw Error(std::string("nvrtc: ") + what + " failed: " + a.nvrtcGetErrorString(r));
  };
  Api::Program prog = nullptr;
  int r = a.nvrtcCreateProgram(&prog, source.c_str(), "prism_kernels.cu", 0, nullptr, nullptr);
  if (r != 0) fail("nvrtcCreateProgram", r);
  struct Destroy {
    const Api& a;
    Api::Program* p;
    ~Destroy() { a.nvrtcDestroyProgram(p); }
  } destroy{a, &prog};
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "--std=c++17"};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  r = a.nvrtcCompileProgram(prog, (int)argv.size(), argv.data());
  NvrtcOutput out;
  out.arch = arch;
  size_t n = 0;
  a.nvrtcGetProgramLogSize(prog, &n);
  out.log.assign(n, '\0');
  if (n) a.nvrtcGetProgramLog(prog, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (r != 0)
    throw Error(std::string("nvrtc: compiling for ") + arch + " failed: " + a.nvrtcGetErrorString(r) + "\n" +
                out.log);
  out.cubin = arch.rfind("sm_", 0) == 0;
  if (out.cubin) {
    if ((r = a.nvrtcGetCUBINSize(prog, &n)) != 0) fail("nvrtcGetCUBINSize", r);
    out.image.resize(n);
    if ((r = a.nvrtcGetCUBIN(prog, out.image.data())) != 0) fail("nvrtcGetCUBIN", r);
  } else {
    if ((r = a.nvrtcGetPTXSize(prog, &n)) != 0) fail("nvrtcGetPTXSize", r);
    out.image.resize(n);
    if ((r = a.nvrtcGetPTX(prog, out.image.data())) != 0) fail("nvrtcGetPTX", r);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace prism
