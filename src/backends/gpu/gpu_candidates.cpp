// The schedules a GPU-style device can run a kernel with: the renderer's, and hand-written or library ones.
#include "backends/gpu/gpu_candidates.h"

#include <algorithm>

#include "backends/gpu/gpu_program.h"
#include "codegen/cuda_mma_gemm.h"

namespace prism {

std::vector<GpuCandidate> GpuScheduleCandidates(const KernelProgram& p, size_t k, const GpuDevice& dev,
                                                std::vector<std::string>* not_offered) {
  const int max_threads = dev.max_threads_per_group();
  std::vector<GpuCandidate> out;
  auto add = [&](const std::string& name, GpuSchedule s) {
    if (s.threads > max_threads) return;
    GpuCandidate c;
    c.name = name;
    c.schedule = s;
    out.push_back(std::move(c));
  };
  GpuSchedule def;
  def.threads = std::min(def.threads, max_threads);
  add("default", def);
  const bool reduce = HasReduce(p.kernels[k].value);
  if (reduce)
    for (int t : {32, 64, 128, 256}) {
      GpuSchedule s;
      s.reduce = GpuSchedule::Reduce::Cooperative;
      s.threads = t;
      add("coop/" + std::to_string(t), s);
    }
  for (int t : {64, 128, 256}) {
    GpuSchedule s;
    s.reduce = GpuSchedule::Reduce::PerThread;
    s.threads = t;
    add("thread/" + std::to_string(t), s);
  }
  const Kernel& kn = p.kernels[k];
  if (dev.dialect() == GpuDialect::Cuda && CudaMmaGemmApplies(p, kn)) {
    const GemmTemplate gm = *kn.gemm;
    const int out_buffer = kn.out_buffer;
    GpuCandidate c;
    c.name = "mma-bf16";
    c.rendered = false;
    c.source = CudaMmaGemmSource(gm.n, gm.k);
    c.functions = {CudaMmaGemmName(gm.n, gm.k)};
    c.launch = [gm, out_buffer](GpuDevice& d, GpuModule& m, int fn, const std::vector<GpuMem>& mems,
                                const SymbolBindings& b) {
      int64_t rows = gm.m.Eval(b);
      if (rows <= 0) return;
      d.Launch(m, fn,
               {GpuArg::Buffer(mems[out_buffer]), GpuArg::Buffer(mems[gm.a_buffer]),
                GpuArg::Buffer(mems[gm.w_buffer]), GpuArg::Int(rows)},
               CudaMmaGemmBlocks(rows, gm.n), kCudaMmaThreads);
    };
    c.error_bound = [gm](const std::vector<void*>& host, int64_t out_index) {
      const float* a = static_cast<const float*>(host[gm.a_buffer]) + out_index / gm.n * gm.k;
      const uint16_t* w = static_cast<const uint16_t*>(host[gm.w_buffer]) + out_index % gm.n * gm.k;
      return CudaMmaGemmErrorBound(a, w, gm.k);
    };
    out.push_back(std::move(c));
  }
  if (dev.dialect() == GpuDialect::Cuda && LibraryGemmApplies(p, kn)) {
    const GemmTemplate gm = *kn.gemm;
    const int out_buffer = kn.out_buffer;
    const DType wt = p.buffers[gm.w_buffer].dtype;
    std::string why;
    if (dev.LibraryGemmAvailable(wt, &why)) {
      GpuCandidate c;
      c.name = "cublas";
      c.rendered = false;  // no source of its own: the device converts and calls the library
      c.launch = [gm, out_buffer, wt](GpuDevice& d, GpuModule&, int, const std::vector<GpuMem>& mems,
                                      const SymbolBindings& b) {
        GpuLibraryGemm lg;
        lg.out = mems[out_buffer];
        lg.a = mems[gm.a_buffer];
        lg.w = mems[gm.w_buffer];
        lg.w_dtype = wt;
        lg.m = gm.m.Eval(b);
        lg.n = gm.n;
        lg.k = gm.k;
        if (lg.m > 0) d.LibraryGemm(lg);
      };
      if (wt != DType::F32)  // activations rounded to bf16/f16 before the library multiplies
        c.error_bound = [gm, wt, &dev](const std::vector<void*>& host, int64_t out_index) {
          const float* a = static_cast<const float*>(host[gm.a_buffer]) + out_index / gm.n * gm.k;
          const uint16_t* w = static_cast<const uint16_t*>(host[gm.w_buffer]) + out_index % gm.n * gm.k;
          return dev.LibraryGemmErrorBound(wt, a, w, gm.k);
        };
      out.push_back(std::move(c));
    } else if (not_offered) {
      not_offered->push_back("cublas: " + why);
    }
  }
  return out;
}

}  // namespace prism
