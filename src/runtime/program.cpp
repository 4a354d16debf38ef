// A compiled program: plans kernels, JIT-compiles them, binds buffers and runs steps on a pool.
#include "runtime/program.h"

#include <chrono>
#include <cstring>

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
  for (const Kernel& k : kp_.kernels) fns_.push_back(reinterpret_cast<KernelFn>(lib_.Symbol(k.name)));
  storage_.resize(kp_.buffers.size());
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

void Program::Launch(size_t k, void* const* bufs, const int64_t* syms, const SymbolBindings& b) {
  const Kernel& kn = kp_.kernels[k];
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
    Launch(k, ptrs.data(), sym_values.data(), b);
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
