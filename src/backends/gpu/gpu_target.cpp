// A GPU-style device of the registry (OpenCL, CUDA): graphs compiled into GpuPrograms on it.
#include "backends/gpu/gpu_target.h"

#include <cstdlib>

#include "backends/gpu/gpu_program.h"

namespace prism {

std::string GpuTarget::name() const { return std::string(GpuDialectName(gpu_->dialect())); }

std::unique_ptr<Executable> GpuTarget::Compile(const Graph& g, const CompileRequest& req) {
  if (!req.artifact_dir.empty())
    throw Error(req.artifact_dir +
                ": a compiled artifact holds CPU kernels; give the model files to run on " + name());
  GpuCompileOptions opts;
  opts.mma_where_applicable = true;  // CUDA only
  opts.mma_min_rows = kStepMmaMinRows;
  if (const char* v = std::getenv("PRISM_MMA_MIN_ROWS"); v && *v) opts.mma_min_rows = std::atoll(v);
  std::unique_ptr<GpuProgram> p = GpuProgram::Compile(g, gpu_, opts);
  p->SetGraphReplay(req.graph_replay);
  return p;
}

}  // namespace prism
