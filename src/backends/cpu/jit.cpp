// Compiles generated C++ into a shared object with the system compiler, cached on disk by hash.
#include "backends/cpu/jit.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/error.h"
#include "ir/fnv.h"

namespace prism {
namespace fs = std::filesystem;

std::string KernelCacheDir() {
  if (const char* d = std::getenv("PRISM_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/prism";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/prism";
  return (fs::temp_directory_path() / "prism-cache").string();
}

std::string JitCompilerCommand() {
  const char* cxx = std::getenv("PRISM_CXX");
  std::string c = cxx && *cxx ? cxx : "c++";
  // No -ffast-math: masks rely on infinities and NaN must propagate. -fopenmp-simd only honours
  // the reduction pragmas the renderer emits; it needs no OpenMP runtime.
  return c + " -O2 -march=native -fPIC -shared -fno-math-errno -ffp-contract=fast -fopenmp-simd -w";
}

static std::string HexHash(const std::string& s) {
  // FNV-1a 64 twice with different seeds: a 128-bit content key is plenty for a cache.
  uint64_t h2 = 0x9e3779b97f4a7c15ull;
  for (unsigned char c : s) h2 = (h2 ^ c) * 0x100000001b3ull + 0x7f4a7c15;
  return FnvHex(Fnv1a(s)) + FnvHex(h2);
}

static std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line;
  return "unknown-cpu";
}

JitLibrary& JitLibrary::operator=(JitLibrary&& o) noexcept {
  if (this != &o) {
    if (handle_) dlclose(handle_);
    handle_ = o.handle_;
    o.handle_ = nullptr;
  }
  return *this;
}

JitLibrary::~JitLibrary() {
  if (handle_) dlclose(handle_);
}

void* JitLibrary::FindSymbol(const std::string& name) const { return dlsym(handle_, name.c_str()); }

void* JitLibrary::Symbol(const std::string& name) const {
  void* p = dlsym(handle_, name.c_str());
  if (!p) throw Error("generated library has no kernel '" + name + "'");
  return p;
}

JitLibrary JitLibrary::LoadFile(const std::string& so_path) {
  void* h = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw Error(so_path + ": cannot load compiled kernels: " + dlerror());
  return JitLibrary(h);
}

JitLibrary JitLibrary::Load(const std::string& source, JitStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  std::string cmd = JitCompilerCommand();
  std::string key = HexHash(cmd + "\n" + CpuModel() + "\n" + source);
  fs::path dir = KernelCacheDir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create kernel cache folder " + dir.string() + ": " + ec.message());
  fs::path so = dir / (key + ".so");
  bool hit = fs::exists(so);
  if (!hit) {
    // Write and compile under unique names, then rename: concurrent compiles never see half a file.
    std::string tag = key + "." + std::to_string(getpid()) + "." +
                      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    fs::path src = dir / (tag + ".cpp"), tmp = dir / (tag + ".so"), log = dir / (tag + ".log");
    {
      std::ofstream f(src);
      f << source;
      if (!f) throw Error("cannot write generated source to " + src.string());
    }
    std::string full =
        cmd + " -x c++ " + src.string() + " -o " + tmp.string() + " > " + log.string() + " 2>&1";
    int rc = std::system(full.c_str());
    if (rc != 0) {
      std::ifstream lf(log);
      std::string first, line;
      while (std::getline(lf, line))
        if (line.find("error") != std::string::npos) {
          first = line;
          break;
        }
      throw Error("kernel compilation failed (" + cmd.substr(0, cmd.find(' ')) + " exit " +
                  std::to_string(rc) + "): " + (first.empty() ? "see " + log.string() : first) +
                  " [source kept at " + src.string() + "]");
    }
    fs::rename(tmp, so, ec);
    if (ec) throw Error("cannot move compiled kernels into the cache: " + ec.message());
    fs::remove(log, ec);
    // Keep the source beside the object for inspection (`prism graph` prints it too).
    fs::rename(src, dir / (key + ".cpp"), ec);
  }
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw Error(std::string("cannot load compiled kernels: ") + dlerror());
  if (stats) {
    stats->cache_hit = hit;
    stats->so_path = so.string();
    stats->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return JitLibrary(h);
}

}  // namespace prism
