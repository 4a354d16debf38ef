// Compiles generated C++ into a shared object with the system compiler, cached on disk by hash.
#pragma once

#include <string>

namespace prism {

struct JitStats {
  bool cache_hit = false;
  double compile_seconds = 0;
  std::string so_path;
};

// A loaded shared object; unloaded on destruction.
class JitLibrary {
 public:
  // Compiles (or finds in the cache) `source`; throws prism::Error with the compiler's first
  // error line if compilation fails.
  static JitLibrary Load(const std::string& source, JitStats* stats = nullptr);
  // Loads an already compiled shared object (a compiled artifact's kernels).
  static JitLibrary LoadFile(const std::string& so_path);
  JitLibrary(JitLibrary&& o) noexcept : handle_(o.handle_) { o.handle_ = nullptr; }
  JitLibrary& operator=(JitLibrary&& o) noexcept;
  ~JitLibrary();
  void* Symbol(const std::string& name) const;
  void* FindSymbol(const std::string& name) const;  // nullptr when absent

 private:
  explicit JitLibrary(void* h) : handle_(h) {}
  void* handle_ = nullptr;
};

// Cache folder: $PRISM_CACHE_DIR, else $XDG_CACHE_HOME/prism, else ~/.cache/prism.
std::string KernelCacheDir();
// The compiler command used (without file names); part of the cache key.
std::string JitCompilerCommand();

}  // namespace prism
