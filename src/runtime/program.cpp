// A compiled program: plans kernels, JIT-compiles them, binds buffers and runs steps on a pool.
#include "runtime/program.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/gemm.h"
#include "codegen/cpp_renderer.h"
#include "ir/error.h"

namespace prism {

using Clock = std::chrono::steady_clock;

static double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::unique_ptr<Program> Program::Compile(const Graph& g, const CompileOptions& opts) {
  if (g.outputs().empty()) throw Error("compile: the graph has no outputs");
  auto t0 = Clock::now();
  KernelProgram kp = BuildKernelProgram(g, opts.fusion);
  std::string source = RenderCpp(kp);
  double plan = Seconds(t0);
  JitStats js;
  JitLibrary lib = JitLibrary::Load(source, &js);
  int threads = opts.threads > 0 ? opts.threads : DefaultThreadCount();
  std::unique_ptr<Program> p(new Program(g, std::move(kp), std::move(source), std::move(lib), threads));
  p->stats_.graph_nodes = g.size();
  p->stats_.kernels = (int)p->kp_.kernels.size();
  p->stats_.plan_seconds = plan;
  p->stats_.compile_seconds = js.compile_seconds;
  p->stats_.cache_hit = js.cache_hit;
  p->stats_.so_path = js.so_path;
  return p;
}

Program::Program(const Graph& g, KernelProgram kp, std::string source, JitLibrary lib, int threads)
    : graph_(g), kp_(std::move(kp)), source_(std::move(source)), lib_(std::move(lib)),
      pool_(std::make_unique<ThreadPool>(threads)) {
  for (const Kernel& k : kp_.kernels)
    fns_.push_back(k.gemm ? nullptr : reinterpret_cast<KernelFn>(lib_.Symbol(k.name)));
  storage_.resize(kp_.buffers.size());
  kernel_seconds_.assign(kp_.kernels.size(), 0);
  kernel_calls_.assign(kp_.kernels.size(), 0);
  const char* prof = std::getenv("PRISM_PROFILE");
  profile_ = prof && *prof && std::string(prof) != "0";
}

Program::~Program() {
  if (profile_ && std::getenv("PRISM_PROFILE")) std::fputs(ProfileTable().c_str(), stderr);
}

std::string Program::ProfileTable() const {
  std::vector<size_t> order(kp_.kernels.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return kernel_seconds_[a] > kernel_seconds_[b]; });
  double total = 0;
  for (double s : kernel_seconds_) total += s;
  std::string out = "kernel profile (" + std::to_string(kp_.kernels.size()) + " kernels, " +
                    std::to_string(total * 1e3) + " ms total)\n";
  char line[256];
  for (size_t i = 0; i < order.size() && i < 25; ++i) {
    size_t k = order[i];
    std::snprintf(line, sizeof line, "  %6.2f%%  %10.3f ms  %8lld calls  %s\n", total > 0 ? 100 * kernel_seconds_[k] / total : 0,
                  kernel_seconds_[k] * 1e3, (long long)kernel_calls_[k], kp_.kernels[k].name.c_str());
    out += line;
  }
  return out;
}

void Program::BindWeight(const std::string& name, HostTensor t) {
  for (size_t b = 0; b < kp_.buffers.size(); ++b) {
    const KBuffer& kb = kp_.buffers[b];
    if (kb.kind != BufferKind::Weight || kb.name != name) continue;
    if (t.dtype != kb.dtype)
      throw Error("weight '" + name + "': dtype " + std::string(DTypeName(t.dtype)) + " given, graph expects " +
                  std::string(DTypeName(kb.dtype)));
    storage_[b] = std::move(t);
    return;
  }
  // Weights that fusion made unnecessary are not an error; unknown names are.
  for (const Node& n : graph_.nodes())
    if (n.op == Op::Weight && n.name == name) return;
  throw Error("weight '" + name + "' is not used by this graph");
}

void Program::ResetState() {
  for (size_t b = 0; b < kp_.buffers.size(); ++b)
    if (kp_.buffers[b].kind == BufferKind::State) storage_[b] = HostTensor();
}

void Program::LaunchGemm(const Kernel& kn, void* const* bufs, const SymbolBindings& b) {
  const GemmTemplate& gm = *kn.gemm;
  int64_t m = gm.m.Eval(b);
  if (m <= 0) return;
  const float* a = static_cast<const float*>(bufs[gm.a_buffer]);
  const void* w = bufs[gm.w_buffer];
  float* y = static_cast<float*>(bufs[kn.out_buffer]);
  DType wt = kp_.buffers[gm.w_buffer].dtype;
  int threads = pool_->size();
  if (threads == 1 || m * gm.n * gm.k < 65536) return GemmRows(a, m, gm.k, w, wt, y, gm.n, 0, gm.n);
  // Threads split the weight rows (in tiles of 4): each weight byte is read by one thread only.
  int64_t tiles = (gm.n + 3) / 4;
  pool_->ParallelFor(threads, [&](int t) {
    int64_t nb = std::min(gm.n, tiles * t / threads * 4), ne = std::min(gm.n, tiles * (t + 1) / threads * 4);
    GemmRows(a, m, gm.k, w, wt, y, gm.n, nb, ne);
  });
}

void Program::Launch(size_t k, void* const* bufs, const int64_t* syms, const SymbolBindings& b) {
  const Kernel& kn = kp_.kernels[k];
  if (kn.gemm) return LaunchGemm(kn, bufs, b);
  int64_t total = 1;
  for (const Expr& e : kn.extents) total *= e.Eval(b);
  if (total <= 0) return;
  int64_t inner = kn.extents.empty() ? 1 : kn.extents.back().Eval(b);
  int64_t work = total * std::max<int64_t>(kn.reduce_size.Eval(b), 1);
  KernelFn fn = fns_[k];
  int threads = pool_->size();
  if (threads == 1 || work < 32768) {
    fn(bufs, syms, 0, total);
    return;
  }
  int64_t rows = total / inner;
  pool_->ParallelFor(threads, [&](int t) {
    int64_t begin, end;
    if (rows >= threads) {  // whole rows per thread keep the inner loop long
      begin = rows * t / threads * inner;
      end = rows * (t + 1) / threads * inner;
    } else {
      begin = total * t / threads;
      end = total * (t + 1) / threads;
    }
    if (begin < end) fn(bufs, syms, begin, end);
  });
}

std::vector<HostTensor> Program::Run(const std::map<std::string, HostTensor>& inputs, const SymbolBindings& syms) {
  SymbolBindings b = BindSymbols(graph_, inputs, syms);
  std::vector<int64_t> sym_values;
  for (const std::string& s : kp_.symbols) sym_values.push_back(b.at(s));
  std::vector<void*> ptrs(kp_.buffers.size(), nullptr);
  for (size_t i = 0; i < kp_.buffers.size(); ++i) {
    const KBuffer& kb = kp_.buffers[i];
    std::vector<int64_t> shape = EvalShape(kb.shape, b);
    switch (kb.kind) {
      case BufferKind::Input: ptrs[i] = inputs.at(kb.name).data; break;
      case BufferKind::Weight:
        if (!storage_[i].data) throw Error("weight '" + kb.name + "' was not bound");
        if (storage_[i].shape != shape)
          throw Error("weight '" + kb.name + "': bound shape " + storage_[i].ShapeString() + ", graph expects " +
                      ShapeStr(kb.shape));
        ptrs[i] = storage_[i].data;
        break;
      case BufferKind::State:
      case BufferKind::Intermediate:
      case BufferKind::Output:
        if (!storage_[i].data || storage_[i].shape != shape) storage_[i] = HostTensor::Zeros(kb.dtype, shape);
        ptrs[i] = storage_[i].data;
        break;
    }
  }
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    // State writes must stay inside the state buffer; checked here, not in the kernel.
    const Node& root = graph_.node(kp_.kernels[k].root);
    if (root.op == Op::StateWrite) {
      int64_t off = root.args[0].Eval(b), axis = root.axes[0];
      int64_t len = graph_.node(root.inputs[1]).shape[axis].Eval(b), cap = root.shape[axis].Eval(b);
      if (off < 0 || off + len > cap)
        throw Error("state '" + root.name + "': writing positions [" + std::to_string(off) + ", " +
                    std::to_string(off + len) + ") past its size " + std::to_string(cap));
    }
    if (!profile_) {
      Launch(k, ptrs.data(), sym_values.data(), b);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    Launch(k, ptrs.data(), sym_values.data(), b);
    kernel_seconds_[k] += Seconds(t0);
    kernel_calls_[k]++;
  }
  std::vector<HostTensor> outs;
  for (int ob : kp_.output_buffers) {
    const HostTensor& src = storage_[ob];
    DType t = IsFloat(src.dtype) ? DType::F32 : DType::I32;
    if (src.dtype == t) {
      HostTensor copy = HostTensor::Zeros(t, src.shape);
      std::memcpy(copy.data, src.data, src.nbytes());
      outs.push_back(std::move(copy));
      continue;
    }
    HostTensor r = HostTensor::Zeros(t, src.shape);
    for (int64_t i = 0; i < r.numel(); ++i) StoreFromDouble(r.data, t, i, src.At(i));
    outs.push_back(std::move(r));
  }
  return outs;
}

}  // namespace prism
