// The systolic timing model's array cycles for products [m x k] . [k x n] as JSON lines, for comparing it
// with a cycle-level simulator (bench/systolic_scalesim.py).
// Usage: prism_systolic_cycles DESCRIPTION M,N,K [M,N,K ...]   (DESCRIPTION: a built-in name or a file)
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backends/systolic/description.h"
#include "backends/systolic/timing_model.h"
#include "ir/error.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DESCRIPTION M,N,K [M,N,K ...]\n", argv[0]);
    return 2;
  }
  try {
    const prism::SystolicDescription d = prism::LoadSystolicDescription(argv[1]);
    for (int i = 2; i < argc; ++i) {
      long long m = 0, n = 0, k = 0;
      if (std::sscanf(argv[i], "%lld,%lld,%lld", &m, &n, &k) != 3 || m <= 0 || n <= 0 || k <= 0)
        throw prism::Error(std::string("shape '") + argv[i] + "': expected M,N,K");
      std::printf("%s\n",
                  nlohmann::json{{"m", m}, {"n", n}, {"k", k}, {"cycles", prism::ArrayCycles(d, m, n, k)}}
                      .dump()
                      .c_str());
    }
  } catch (const prism::Error& e) {
    std::fprintf(stderr, "prism_systolic_cycles: %s\n", e.what());
    return 1;
  }
  return 0;
}
