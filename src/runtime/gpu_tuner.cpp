// GPU schedule search: per kernel, candidate schedules checked against the reference and timed on the device.
//
// Every buffer gets random non-zero contents (on the host and on the device), so each kernel can
// run alone on realistic values. All candidates of all kernels are rendered into one translation
// unit (one device build); a candidate is first checked (sampled outputs against the value tree
// evaluated in double), then the passing ones are timed in interleaved rounds with the device's
// own timer, so a burst of load elsewhere slows every candidate alike.
#include "runtime/gpu_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "backends/cuda/cublas_loader.h"
#include "backends/timing.h"
#include "codegen/cuda_mma_gemm.h"
#include "codegen/gpu_renderer.h"
#include "compiler/kernel_eval.h"
#include "ir/error.h"

namespace prism {
namespace {

bool Reads(const KValuePtr& v, int buffer) {
  if (v->kind == KValue::Kind::Load && v->buffer == buffer) return true;
  for (const GatherBinding& gb : v->gathers)
    if (Reads(gb.value, buffer)) return true;
  for (const KValuePtr& a : v->args)
    if (Reads(a, buffer)) return true;
  return false;
}

// Random values away from zero (a kernel that drops a term cannot hide behind a zero operand);
// quantized tensors are real quantizations of such values. Integers (token ids, positions) are
// small, since gathers clamp them anyway.
void FillRandom(HostTensor& t, std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.05f, 1.0f);
  auto value = [&] { return rng() % 2 ? mag(rng) : -mag(rng); };
  const int64_t n = t.numel();
  if (IsQuantized(t.dtype)) {
    std::vector<float> f((size_t)n);
    for (float& x : f) x = value();
    HostTensor q = HostTensor::FromFloats(t.shape, f, t.dtype);  // real blocks
    std::memcpy(t.data, q.data, (size_t)t.nbytes());
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    StoreFromDouble(t.data, t.dtype, i, IsFloat(t.dtype) ? value() : (double)(rng() % 4));
}

// One unit of rounding of an output dtype, relative to the value (the device rounds its f32 result,
// the reference its double one: they may land one unit apart).
double RelativeUlp(DType t) {
  switch (t) {
    case DType::BF16: return 1.0 / 256;
    case DType::F16: return 1.0 / 2048;
    default: return 0;
  }
}

std::string ReduceName(GpuSchedule::Reduce r) {
  switch (r) {
    case GpuSchedule::Reduce::Auto: return "auto";
    case GpuSchedule::Reduce::Cooperative: return "cooperative";
    case GpuSchedule::Reduce::PerThread: return "per-thread";
  }
  return "";
}

// Device buffers freed however the search ends.
struct DeviceBuffers {
  GpuDevice& dev;
  std::vector<GpuMem> mems;
  ~DeviceBuffers() {
    for (GpuMem m : mems) {
      try {
        dev.Free(m);
      } catch (...) {  // a failing device at teardown must not terminate the process
      }
    }
  }
};

struct Cand {
  GpuCandidate c;
  std::vector<std::string> same_code_as;  // other candidates that rendered identically
  GpuKernelPlan plan;                     // rendered candidates
  std::shared_ptr<GpuModule> module;      // null: did not compile
  int first_function = 0;
  std::string compile_error;
};

}  // namespace

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
        c.error_bound = [gm, wt](const std::vector<void*>& host, int64_t out_index) {
          const float* a = static_cast<const float*>(host[gm.a_buffer]) + out_index / gm.n * gm.k;
          const uint16_t* w = static_cast<const uint16_t*>(host[gm.w_buffer]) + out_index % gm.n * gm.k;
          return CublasGemmErrorBound(wt, a, w, gm.k);
        };
      out.push_back(std::move(c));
    } else if (not_offered) {
      not_offered->push_back("cublas: " + why);
    }
  }
  return out;
}

GpuTuneResult SearchGpuSchedules(const Graph& g, GpuDevice& dev, const GpuTuneOptions& opts) {
  const auto start = Clock::now();
  GpuTuneResult res;
  res.kernels = BuildKernelProgram(g, opts.fusion);
  const KernelProgram& kp = res.kernels;
  const size_t nk = kp.kernels.size();
  SymbolBindings b;
  for (const std::string& s : kp.symbols) {
    auto it = opts.sizes.find(s);
    if (it == opts.sizes.end()) throw Error("gpu schedule search: no value for size symbol '" + s + "'");
    b[s] = it->second;
  }
  nlohmann::json sizes_json = b;

  // Host and device copies of every buffer.
  std::mt19937 rng((uint32_t)opts.seed);
  std::vector<HostTensor> host;
  std::vector<void*> ptrs;
  DeviceBuffers bufs{dev, {}};
  for (const KBuffer& kb : kp.buffers) {
    std::vector<int64_t> shape = EvalShape(kb.shape, b);
    HostTensor t = HostTensor::Zeros(kb.dtype, shape);
    auto w = opts.weights.find(kb.name);
    if (kb.kind == BufferKind::Weight && w != opts.weights.end()) {
      if (w->second.dtype != kb.dtype || w->second.shape != shape)
        throw Error("gpu schedule search: weight '" + kb.name + "' is " + w->second.ShapeString() + " " +
                    std::string(DTypeName(w->second.dtype)) + ", the graph expects " + ShapeStr(kb.shape) +
                    " " + std::string(DTypeName(kb.dtype)));
      std::memcpy(t.data, w->second.data, (size_t)t.nbytes());
    } else {
      FillRandom(t, rng);
    }
    bufs.mems.push_back(dev.Alloc((size_t)t.nbytes()));
    dev.Upload(bufs.mems.back(), t.data, (size_t)t.nbytes());
    ptrs.push_back(t.data);
    host.push_back(std::move(t));
  }

  // Candidates, deduplicated by their rendered code, all in one translation unit.
  GpuRenderer renderer(dev.dialect());
  std::vector<std::vector<Cand>> cands(nk);
  std::vector<std::vector<std::string>> not_offered(nk);
  std::string source = renderer.Prelude();
  std::vector<std::string> functions;
  for (size_t k = 0; k < nk; ++k) {
    KernelProgram one = kp;
    one.kernels = {kp.kernels[k]};
    std::vector<GpuCandidate> list = GpuScheduleCandidates(kp, k, dev, &not_offered[k]);
    if (opts.extra)
      for (GpuCandidate& c : opts.extra(kp, k)) list.push_back(std::move(c));
    std::map<std::string, size_t> seen;  // rendered text -> candidate
    for (GpuCandidate& c : list) {
      Cand x;
      if (c.rendered) {
        GpuSource probe = renderer.Render(one, c.schedule, "t_");
        const GpuKernelPlan& pl = probe.kernels[0];
        std::string key = probe.functions_source + "|" + std::to_string(pl.threads) + "|" +
                          std::to_string(pl.max_groups) + "|" + std::to_string(pl.cooperative);
        if (auto it = seen.find(key); it != seen.end()) {
          cands[k][it->second].same_code_as.push_back(c.name);
          continue;
        }
        seen[key] = cands[k].size();
        GpuSource src = renderer.Render(
            one, c.schedule, "k" + std::to_string(k) + "c" + std::to_string(cands[k].size()) + "_");
        x.plan = src.kernels[0];
        c.source = src.functions_source;
        c.functions = src.functions;
      }
      x.c = std::move(c);
      auto known = x.c.rendered || x.c.functions.empty()
                       ? functions.end()
                       : std::find(functions.begin(), functions.end(), x.c.functions[0]);
      if (known != functions.end()) {  // the same hand-written function, for another kernel
        x.first_function = (int)(known - functions.begin());
      } else {
        x.first_function = (int)functions.size();
        source += x.c.source;
        functions.insert(functions.end(), x.c.functions.begin(), x.c.functions.end());
      }
      cands[k].push_back(std::move(x));
    }
  }
  auto t_compile = Clock::now();
  try {
    std::shared_ptr<GpuModule> module = dev.Compile(source, functions);
    for (auto& list : cands)
      for (Cand& x : list) x.module = module;
  } catch (const Error&) {  // some candidate does not build: each on its own, to find which
    for (auto& list : cands)
      for (Cand& x : list) {
        try {
          x.module = dev.Compile(renderer.Prelude() + x.c.source, x.c.functions);
          x.first_function = 0;
        } catch (const Error& e) {
          x.compile_error = e.what();
        }
      }
  }
  const double compile_seconds = Since(t_compile);

  auto run = [&](size_t k, Cand& x) {
    if (!x.c.rendered) {
      x.c.launch(dev, *x.module, x.first_function, bufs.mems, b);
      return;
    }
    GpuLaunchDims d = GpuLaunch(kp.kernels[k], x.plan, b);
    if (d.elements == 0) return;
    std::vector<GpuArg> args;
    for (int buf : x.plan.buffers) args.push_back(GpuArg::Buffer(bufs.mems[buf]));
    for (const std::string& s : kp.symbols) args.push_back(GpuArg::Int(b.at(s)));
    dev.Launch(*x.module, x.first_function, args, d.groups, d.threads);
  };

  res.per_kernel.assign(nk, GpuSchedule{});
  for (GpuSchedule& s : res.per_kernel) s.threads = std::min(s.threads, dev.max_threads_per_group());
  res.chosen.assign(nk, "");
  res.mma_gemm.assign(nk, false);
  res.library_gemm.assign(nk, false);
  for (size_t k = 0; k < nk; ++k) {
    const Kernel& kn = kp.kernels[k];
    const int out = kn.out_buffer;
    const DType out_t = kp.buffers[out].dtype;
    nlohmann::json r{{"kernel", kn.name},
                     {"sizes", sizes_json},
                     {"device", dev.name()},
                     {"timer", dev.device_timer() ? "device" : "host"},
                     {"compile_seconds", compile_seconds}};
    if (!not_offered[k].empty()) r["not_offered"] = not_offered[k];
    int64_t total = 1;
    for (const Expr& e : kn.extents) total *= e.Eval(b);
    if (total <= 0) {
      r.update({{"chosen", "default"}, {"reason", "no output elements at these sizes: default kept"}});
      res.receipts.push_back(r);
      continue;
    }
    if (Since(start) > opts.budget_seconds) {
      r.update({{"chosen", "default"}, {"reason", "search budget exhausted: default kept"}});
      res.receipts.push_back(r);
      continue;
    }
    // Reference values of sampled outputs (every output when there are few).
    std::vector<KernelElement> ref;
    double scale = 1e-6;
    const int64_t samples = std::min<int64_t>(total, std::max(opts.samples, 1));
    for (int64_t s = 0; s < samples; ++s) {
      int64_t flat = samples == total ? s : (int64_t)(rng() % (uint64_t)total);
      ref.push_back(EvalKernelElement(kp, kn, flat, ptrs.data(), b));
      scale = std::max(scale, std::fabs(ref.back().value));
    }
    const bool in_place = Reads(kn.value, out);  // must start from the same contents every run
    auto restore = [&] { dev.Upload(bufs.mems[out], host[out].data, (size_t)host[out].nbytes()); };
    HostTensor got_t = HostTensor::Zeros(out_t, host[out].shape);

    std::vector<Cand>& cs = cands[k];
    nlohmann::json tried = nlohmann::json::array();
    std::vector<size_t> passed;
    for (size_t ci = 0; ci < cs.size(); ++ci) {
      Cand& x = cs[ci];
      nlohmann::json t{{"candidate", x.c.name}};
      if (x.c.rendered)
        t["schedule"] = {{"threads", x.plan.threads},
                         {"reduce", x.plan.cooperative ? "cooperative" : "per-thread"},
                         {"requested", ReduceName(x.c.schedule.reduce)},
                         {"max_groups", x.plan.max_groups}};
      else
        t["schedule"] = "hand-written";
      if (!x.same_code_as.empty()) t["same_code_as"] = x.same_code_as;
      if (!x.module) {
        t.update({{"passed", false}, {"error", "does not compile: " + x.compile_error}});
        tried.push_back(t);
        continue;
      }
      double max_err = 0, max_bound = 0;
      bool ok = true;
      try {
        restore();  // the reference was computed from these contents; a kernel that skips outputs fails
        run(k, x);
        dev.Finish();
        dev.Download(got_t.data, bufs.mems[out], (size_t)got_t.nbytes());
        for (const KernelElement& e : ref) {
          double got = got_t.At(e.out_index), want = RoundToDType(e.value, out_t);
          if (std::isnan(got) != std::isnan(want)) ok = false;
          if (std::isnan(got) || std::isnan(want) || (std::isinf(got) && got == want)) continue;
          double err = std::fabs(got - want), bound = 0;
          if (x.c.error_bound) {
            bound = x.c.error_bound(ptrs, e.out_index);
            max_bound = std::max(max_bound, bound / scale);
          }
          ok = ok && err <= 2e-3 * scale + RelativeUlp(out_t) * std::fabs(want) + bound * 1.01;
          max_err = std::max(max_err, err / scale);
        }
      } catch (const Error& e) {
        ok = false;
        t["error"] = e.what();
      }
      t.update({{"passed", ok}, {"max_rel_error", max_err}});
      if (x.c.error_bound) t["rel_error_bound"] = max_bound;  // beyond the exact tiers' 2e-3
      tried.push_back(t);
      if (ok) passed.push_back(ci);
    }
    // Timing in rounds (round 0 warms up), one run of each passing candidate per round.
    std::vector<std::vector<double>> times(cs.size());
    for (int round = 0; round <= std::max(opts.repeats, 1); ++round)
      for (size_t ci : passed) {
        if (in_place) restore();
        double ms = dev.TimeMs([&] { run(k, cs[ci]); });
        if (round > 0) times[ci].push_back(ms * 1e3);
      }
    double best = INFINITY, best_rendered = INFINITY;
    size_t best_ci = cs.size();
    for (size_t ci : passed) {
      tried[ci].update(TimingSummary(times[ci]));
      const double med = tried[ci]["median_us"];
      if (med < best) {
        best = med;
        best_ci = ci;
      }
      if (cs[ci].c.rendered && med < best_rendered) {
        best_rendered = med;
        res.per_kernel[k] = cs[ci].c.schedule;
      }
    }
    restore();  // leave the buffer as the next kernels' references assume
    r["candidates"] = tried;
    if (best_ci == cs.size()) {
      r.update({{"chosen", ""}, {"reason", "no candidate passed the correctness check: default kept"}});
    } else {
      res.chosen[k] = cs[best_ci].c.name;
      res.mma_gemm[k] = res.chosen[k] == "mma-bf16";
      res.library_gemm[k] = res.chosen[k] == "cublas";
      r.update({{"chosen", cs[best_ci].c.name},
                {"median_us", best},
                {"reason", "fastest median of " + std::to_string(passed.size()) + " of " +
                               std::to_string(cs.size()) + " candidates that passed the check"}});
    }
    res.receipts.push_back(r);
  }
  return res;
}

}  // namespace prism
