// Runs a kernel program on a GpuDevice: plans and renders once, then per step binds symbols,
// places buffers, launches every kernel in order and reads the outputs back.
#include "backends/gpu/gpu_program.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "codegen/cuda_mma_gemm.h"
#include "ir/error.h"

namespace prism {

using Clock = std::chrono::steady_clock;

static double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool LibraryGemmApplies(const KernelProgram& p, const Kernel& k) {
  return k.gemm && !k.gemm->epilogue && k.gemm->index_buffer < 0 &&
         p.buffers[k.gemm->a_buffer].dtype == DType::F32 && p.buffers[k.out_buffer].dtype == DType::F32;
}

std::unique_ptr<GpuProgram> GpuProgram::Compile(const Graph& g, std::shared_ptr<GpuDevice> device,
                                                const GpuCompileOptions& opts) {
  return std::move(CompileMany({&g}, std::move(device), {opts})[0]);
}

std::vector<std::unique_ptr<GpuProgram>> GpuProgram::CompileMany(const std::vector<const Graph*>& graphs,
                                                                 std::shared_ptr<GpuDevice> device,
                                                                 const std::vector<GpuCompileOptions>& opts) {
  if (!device) throw Error("gpu compile: no device");
  if (opts.size() != 1 && opts.size() != graphs.size())
    throw Error("gpu compile: " + std::to_string(opts.size()) + " option sets for " +
                std::to_string(graphs.size()) + " graphs");
  auto t0 = Clock::now();
  std::vector<std::unique_ptr<GpuProgram>> progs;
  std::string source = GpuRenderer(device->dialect()).Prelude();
  std::vector<std::string> functions;
  for (size_t i = 0; i < graphs.size(); ++i) {
    const Graph& g = *graphs[i];
    if (g.outputs().empty()) throw Error("compile: the graph has no outputs");
    std::unique_ptr<GpuProgram> p(new GpuProgram(g, device));
    p->opts_ = opts.size() == 1 ? opts[0] : opts[i];
    p->kp_ = BuildKernelProgram(g, p->opts_.fusion);
    // Programs in one build need distinct function names.
    const std::string prefix = graphs.size() > 1 ? "p" + std::to_string(i) + "_" : "";
    const Plan& plan = p->plans_[""] = p->BuildPlan({}, prefix, source, functions);
    for (const GpuKernelPlan& kp : plan.src.kernels) p->stats_.cooperative += kp.cooperative;
    p->stats_.graph_nodes = g.size();
    p->stats_.kernels = (int)p->kp_.kernels.size();
    p->stats_.functions = (int)plan.src.functions.size();
    p->slots_.resize(p->kp_.buffers.size());
    progs.push_back(std::move(p));
  }
  double plan = Seconds(t0);
  auto t1 = Clock::now();
  std::shared_ptr<GpuModule> module = device->Compile(source, functions);
  double compile = Seconds(t1);
  for (auto& p : progs) {
    p->module_ = module;
    p->stats_.plan_seconds = plan;
    p->stats_.compile_seconds = compile;
  }
  return progs;
}

GpuProgram::Plan GpuProgram::BuildPlan(const std::vector<GpuKernelChoice>& choices, const std::string& prefix,
                                       std::string& source, std::vector<std::string>& functions) const {
  const GpuCompileOptions& o = opts_;
  const size_t nk = kp_.kernels.size();
  auto check_size = [&](size_t given, const char* what) {
    if (given != 0 && given != nk)
      throw Error("gpu compile: " + std::to_string(given) + " " + what + " for " + std::to_string(nk) +
                  " kernels");
  };
  check_size(o.per_kernel.size(), "schedules");
  check_size(o.mma_gemm.size(), "tensor-core flags");
  check_size(o.library_gemm.size(), "library GEMM flags");
  check_size(choices.size(), "searched choices");
  Plan plan;
  std::vector<GpuSchedule> schedules =
      o.per_kernel.empty() ? std::vector<GpuSchedule>(nk, o.schedule) : o.per_kernel;
  std::vector<bool> mma = o.mma_gemm, library = o.library_gemm;
  mma.resize(nk, false);
  library.resize(nk, false);
  plan.mma_min_rows.assign(nk, o.mma_min_rows);
  if (o.mma_where_applicable && device_->dialect() == GpuDialect::Cuda && o.mma_min_rows > 0)
    for (size_t k = 0; k < nk; ++k) mma[k] = CudaMmaGemmApplies(kp_, kp_.kernels[k]);
  for (size_t k = 0; k < choices.size(); ++k) {  // a searched choice replaces what the options say
    const GpuKernelChoice& c = choices[k];
    if (c.tier == GpuKernelChoice::Tier::AsCompiled) continue;
    mma[k] = c.tier == GpuKernelChoice::Tier::TensorCores;
    library[k] = c.tier == GpuKernelChoice::Tier::Library;
    plan.mma_min_rows[k] = 1;
    if (c.tier == GpuKernelChoice::Tier::Rendered) schedules[k] = c.schedule;
  }
  for (GpuSchedule& s : schedules) s.threads = std::min(s.threads, device_->max_threads_per_group());
  plan.src = GpuRenderer(device_->dialect()).Render(kp_, schedules, prefix);
  source += plan.src.functions_source;
  for (const GpuKernelPlan& kp : plan.src.kernels) {
    auto it = std::find(plan.src.functions.begin(), plan.src.functions.end(), kp.function);
    plan.function_of.push_back((int)functions.size() + (int)(it - plan.src.functions.begin()));
  }
  functions.insert(functions.end(), plan.src.functions.begin(), plan.src.functions.end());
  plan.mma_function.assign(nk, -1);
  for (size_t k = 0; k < nk; ++k) {
    if (!mma[k]) continue;
    const Kernel& kn = kp_.kernels[k];
    if (device_->dialect() != GpuDialect::Cuda || !CudaMmaGemmApplies(kp_, kn))
      throw Error("gpu compile: kernel " + kn.name +
                  " cannot use the tensor-core GEMM (CUDA only, f32 x bf16 template GEMMs only)");
    std::string name = CudaMmaGemmName(kn.gemm->n, kn.gemm->k);
    auto it = std::find(functions.begin(), functions.end(), name);
    if (it == functions.end()) {  // one function per shape across the build
      source += CudaMmaGemmSource(kn.gemm->n, kn.gemm->k);
      it = functions.insert(functions.end(), name);
    }
    plan.mma_function[k] = (int)(it - functions.begin());
  }
  plan.library_gemm.assign(nk, false);
  for (size_t k = 0; k < nk; ++k) {
    if (!library[k]) continue;
    const Kernel& kn = kp_.kernels[k];
    std::string why = "not an f32 template GEMM";
    if (!LibraryGemmApplies(kp_, kn) ||
        !device_->LibraryGemmAvailable(kp_.buffers[kn.gemm->w_buffer].dtype, &why))
      throw Error("gpu compile: kernel " + kn.name + " cannot use the library GEMM: " + why);
    if (plan.mma_function[k] >= 0)
      throw Error("gpu compile: kernel " + kn.name + " selects both the tensor-core and the library GEMM");
    plan.library_gemm[k] = true;
  }
  return plan;
}

void GpuProgram::Reschedule(const std::map<std::string, std::vector<GpuKernelChoice>>& per_bucket) {
  std::string source = GpuRenderer(device_->dialect()).Prelude();
  std::vector<std::string> functions;
  std::map<std::string, Plan> plans;
  plans[""] = BuildPlan({}, "", source, functions);
  int i = 0;
  for (const auto& [bucket, choices] : per_bucket)
    plans[bucket] = BuildPlan(choices, "b" + std::to_string(i++) + "_", source, functions);
  auto t0 = Clock::now();
  std::shared_ptr<GpuModule> module = device_->Compile(source, functions);
  stats_.compile_seconds = Seconds(t0);
  launch_graph_.reset();  // its nodes' functions are the old module's
  module_ = std::move(module);
  plans_ = std::move(plans);
  choices_ = per_bucket;
}

namespace {

const char* ReduceName(GpuSchedule::Reduce r) {
  switch (r) {
    case GpuSchedule::Reduce::Auto: return "auto";
    case GpuSchedule::Reduce::Cooperative: return "cooperative";
    case GpuSchedule::Reduce::PerThread: return "per-thread";
  }
  return "";
}

}  // namespace

nlohmann::json GpuChoiceToJson(const GpuKernelChoice& c) {
  switch (c.tier) {
    case GpuKernelChoice::Tier::AsCompiled: return {{"tier", "as-compiled"}};
    case GpuKernelChoice::Tier::Rendered:
      return {
          {"tier", "rendered"}, {"threads", c.schedule.threads}, {"reduce", ReduceName(c.schedule.reduce)}};
    case GpuKernelChoice::Tier::TensorCores: return {{"tier", "mma-bf16"}};
    case GpuKernelChoice::Tier::Library: return {{"tier", "library"}};
  }
  return nullptr;
}

GpuKernelChoice GpuChoiceFromJson(const nlohmann::json& j) {
  GpuKernelChoice c;
  const std::string tier = j.value("tier", "");
  if (tier == "rendered") {
    c.tier = GpuKernelChoice::Tier::Rendered;
    c.schedule.threads = j.value("threads", c.schedule.threads);
    const std::string reduce = j.value("reduce", "auto");
    c.schedule.reduce = reduce == "cooperative"  ? GpuSchedule::Reduce::Cooperative
                        : reduce == "per-thread" ? GpuSchedule::Reduce::PerThread
                                                 : GpuSchedule::Reduce::Auto;
  } else if (tier == "mma-bf16") {
    c.tier = GpuKernelChoice::Tier::TensorCores;
  } else if (tier == "library") {
    c.tier = GpuKernelChoice::Tier::Library;
  }
  return c;
}

GpuProgram::~GpuProgram() {
  launch_graph_.reset();  // before the buffers it points at
  for (size_t b = 0; b < slots_.size(); ++b) {
    try {
      Release(b);
    } catch (...) {  // a failing device at teardown must not terminate the process
    }
  }
}

void GpuProgram::Release(size_t b) {
  Slot& s = slots_[b];
  if (s.allocated) device_->Free(s.mem);
  s = Slot();
}

void GpuProgram::Place(size_t b, const std::vector<int64_t>& shape) {
  Release(b);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  slots_[b].mem = device_->Alloc((size_t)StorageBytes(kp_.buffers[b].dtype, n));
  slots_[b].allocated = true;
  slots_[b].capacity = (size_t)StorageBytes(kp_.buffers[b].dtype, n);
  slots_[b].shape = shape;
}

// Inputs, intermediates and outputs are rewritten in full by every step, so storage allocated for
// a larger step serves a smaller one: decode steps (whose attention sizes grow with `past`) then
// keep their buffers instead of reallocating every step (and a recorded graph its pointers).
void GpuProgram::Reuse(size_t b, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Slot& s = slots_[b];
  if (s.allocated && s.capacity >= (size_t)StorageBytes(kp_.buffers[b].dtype, n))
    s.shape = shape;
  else
    Place(b, shape);
}

void GpuProgram::SetGraphReplay(bool on) {
  graph_replay_ = on;
  if (!on) launch_graph_.reset();
}

void GpuProgram::Launch(const std::vector<size_t>& kernels, const std::vector<GpuLaunchParams>& launches) {
  if (graph_replay_) {
    std::vector<int> functions;
    for (const GpuLaunchParams& l : launches) functions.push_back(l.function);
    if (!launch_graph_ || graph_kernels_ != kernels || graph_functions_ != functions) {
      launch_graph_.reset();
      launch_graph_ = device_->RecordGraph(*module_, launches);
      if (!launch_graph_) {
        graph_replay_ = false;  // the device has no graphs: launch one by one from now on
      } else {
        graph_kernels_ = kernels;
        graph_functions_ = std::move(functions);
        ++graph_records_;
      }
    }
    if (launch_graph_) {
      for (size_t i = 0; i < launches.size(); ++i) launch_graph_->Set(i, launches[i]);
      launch_graph_->Replay();
      ++graph_replays_;
      return;
    }
  }
  for (const GpuLaunchParams& l : launches)
    device_->Launch(*module_, l.function, l.args, l.groups, l.threads);
}

void GpuProgram::BindWeight(const std::string& name, const HostTensor& t) {
  for (size_t b = 0; b < kp_.buffers.size(); ++b) {
    const KBuffer& kb = kp_.buffers[b];
    if (kb.kind != BufferKind::Weight || kb.name != name) continue;
    CheckWeightDtype(name, t.dtype, kb.dtype);
    Place(b, t.shape);
    device_->Upload(slots_[b].mem, t.data, (size_t)t.nbytes());
    return;
  }
  for (const Node& n : graph_.nodes())
    if (n.op == Op::Weight && n.name == name) return;  // fused away: not an error
  throw Error("weight '" + name + "' is not used by this graph");
}

size_t GpuProgram::StateSlot(const std::string& name) {
  for (size_t b = 0; b < kp_.buffers.size(); ++b) {
    const KBuffer& kb = kp_.buffers[b];
    if (kb.kind != BufferKind::State || kb.name != name) continue;
    const std::vector<int64_t> shape = EvalShape(kb.shape, {});
    if (!slots_[b].allocated || slots_[b].shape != shape) Place(b, shape);  // Alloc zero-fills
    return b;
  }
  throw Error("state '" + name + "': the graph has no such state");
}

HostTensor GpuProgram::ReadStateRows(const std::string& name, int64_t first, int64_t rows) {
  const size_t b = StateSlot(name);
  const int64_t axis = StateRowAxis(graph_, name);
  HostTensor out = StateRowsTensor(name, first, rows, slots_[b].shape, kp_.buffers[b].dtype, axis);
  const StateRowRuns r = RowRuns(slots_[b].shape, axis, first, rows);
  const size_t e = (size_t)BlockBytes(out.dtype);
  for (int64_t i = 0; r.count > 0 && i < r.pieces; ++i)
    device_->DownloadAt(static_cast<char*>(out.data) + i * r.count * e, slots_[b].mem,
                        (size_t)(r.at + i * r.stride) * e, (size_t)r.count * e);
  return out;
}

void GpuProgram::WriteStateRows(const std::string& name, int64_t first, const HostTensor& rows) {
  const size_t b = StateSlot(name);
  const int64_t axis = StateRowAxis(graph_, name);
  CheckStateRows(name, first, rows, slots_[b].shape, kp_.buffers[b].dtype, axis);
  const StateRowRuns r = RowRuns(slots_[b].shape, axis, first, rows.shape[axis]);
  const size_t e = (size_t)BlockBytes(rows.dtype);
  for (int64_t i = 0; r.count > 0 && i < r.pieces; ++i)
    device_->UploadAt(slots_[b].mem, (size_t)(r.at + i * r.stride) * e,
                      static_cast<const char*>(rows.data) + i * r.count * e, (size_t)r.count * e);
}

void GpuProgram::ResetState() {
  for (size_t b = 0; b < kp_.buffers.size(); ++b)
    if (kp_.buffers[b].kind == BufferKind::State) Release(b);
}

std::vector<HostTensor> GpuProgram::Run(const std::map<std::string, HostTensor>& inputs,
                                        const SymbolBindings& syms) {
  SymbolBindings b = BindSymbols(graph_, inputs, syms);
  CheckStateWrites(graph_, kp_, b);  // before anything is launched
  for (size_t i = 0; i < kp_.buffers.size(); ++i) {
    const KBuffer& kb = kp_.buffers[i];
    std::vector<int64_t> shape = EvalShape(kb.shape, b);
    switch (kb.kind) {
      case BufferKind::Input: {
        const HostTensor& t = inputs.at(kb.name);
        if (t.dtype != kb.dtype)
          throw Error("input '" + kb.name + "': dtype " + std::string(DTypeName(t.dtype)) +
                      " given, graph expects " + std::string(DTypeName(kb.dtype)));
        Reuse(i, shape);
        device_->Upload(slots_[i].mem, t.data, (size_t)t.nbytes());
        break;
      }
      case BufferKind::Weight:
        if (!slots_[i].allocated) throw Error("weight '" + kb.name + "' was not bound");
        if (slots_[i].shape != shape) {
          HostTensor probe;
          probe.shape = slots_[i].shape;
          throw Error("weight '" + kb.name + "': bound shape " + probe.ShapeString() + ", graph expects " +
                      ShapeStr(kb.shape));
        }
        break;
      case BufferKind::State:
        if (!slots_[i].allocated || slots_[i].shape != shape) Place(i, shape);
        break;
      case BufferKind::Intermediate:
      case BufferKind::Output: Reuse(i, shape); break;
    }
  }
  auto chosen = plans_.find(BucketOf(b, plans_));
  const Plan& pl = chosen != plans_.end() ? chosen->second : plans_.at("");
  std::vector<size_t> launched;
  std::vector<GpuLaunchParams> launches;
  std::vector<std::pair<size_t, GpuLibraryGemm>> library;  // each runs before launches[first]
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    const GpuKernelPlan& plan = pl.src.kernels[k];
    GpuLaunchDims dims = GpuLaunch(kp_.kernels[k], plan, b);
    if (dims.elements == 0) continue;
    if (const Kernel& kn = kp_.kernels[k]; pl.library_gemm[k]) {
      const GemmTemplate& gm = *kn.gemm;
      GpuLibraryGemm lg;
      lg.out = slots_[kn.out_buffer].mem;
      lg.a = slots_[gm.a_buffer].mem;
      lg.w = slots_[gm.w_buffer].mem;
      lg.w_dtype = kp_.buffers[gm.w_buffer].dtype;
      lg.m = gm.m.Eval(b);
      lg.n = gm.n;
      lg.k = gm.k;
      library.emplace_back(launches.size(), lg);
      continue;
    }
    GpuLaunchParams l;
    if (const Kernel& kn = kp_.kernels[k];
        pl.mma_function[k] >= 0 && kn.gemm->m.Eval(b) >= pl.mma_min_rows[k]) {
      const GemmTemplate& gm = *kn.gemm;
      int64_t m = gm.m.Eval(b);
      l.function = pl.mma_function[k];
      l.args = {GpuArg::Buffer(slots_[kn.out_buffer].mem), GpuArg::Buffer(slots_[gm.a_buffer].mem),
                GpuArg::Buffer(slots_[gm.w_buffer].mem), GpuArg::Int(m)};
      l.groups = CudaMmaGemmBlocks(m, gm.n);
      l.threads = kCudaMmaThreads;
      launched.push_back(k);
      launches.push_back(std::move(l));
      continue;
    }
    l.function = pl.function_of[k];
    for (int buf : plan.buffers) l.args.push_back(GpuArg::Buffer(slots_[buf].mem));
    for (const std::string& s : kp_.symbols) l.args.push_back(GpuArg::Int(b.at(s)));
    l.groups = dims.groups;
    l.threads = dims.threads;
    launched.push_back(k);
    launches.push_back(std::move(l));
  }
  if (library.empty()) {
    Launch(launched, launches);
  } else {
    // The CUDA graph path builds kernel nodes by hand (cuda_device.cpp), and a cuBLAS call is not
    // a kernel node this program knows (capturing it from the stream would be the way to record
    // it): programs with library GEMMs enqueue everything in order, one call at a time.
    size_t next = 0;
    for (size_t i = 0; i <= launches.size(); ++i) {
      for (; next < library.size() && library[next].first == i; ++next)
        device_->LibraryGemm(library[next].second);
      if (i < launches.size())
        device_->Launch(*module_, launches[i].function, launches[i].args, launches[i].groups,
                        launches[i].threads);
    }
  }
  device_->Finish();
  std::vector<HostTensor> outs;
  for (int ob : kp_.output_buffers) {
    HostTensor raw = HostTensor::Zeros(kp_.buffers[ob].dtype, slots_[ob].shape);
    device_->Download(raw.data, slots_[ob].mem, (size_t)raw.nbytes());
    DType t = IsFloat(raw.dtype) ? DType::F32 : DType::I32;
    if (raw.dtype == t) {
      outs.push_back(std::move(raw));
      continue;
    }
    HostTensor r = HostTensor::Zeros(t, raw.shape);
    for (int64_t i = 0; i < r.numel(); ++i) StoreFromDouble(r.data, t, i, raw.At(i));
    outs.push_back(std::move(r));
  }
  return outs;
}

}  // namespace prism
