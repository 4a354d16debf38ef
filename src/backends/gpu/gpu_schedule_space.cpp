// A GPU-style device's schedule space for the one search: every candidate of every timed kernel rendered
// into one build, run alone on device buffers of random values, timed with the device's own timer.
#include <algorithm>
#include <cstring>

#include "backends/gpu/gpu_program.h"
#include "backends/timing.h"
#include "compiler/kernel_eval.h"

namespace prism {

class GpuScheduleSpace : public ScheduleSpace {
 public:
  explicit GpuScheduleSpace(GpuProgram& p) : p_(p), dev_(*p.device_), kp_(p.kp_) {}
  ~GpuScheduleSpace() override { FreeBuffers(); }

  const KernelProgram& kernels() const override { return kp_; }
  std::string identity() const override { return dev_.name(); }

  void StartBucket(const std::string& bucket, const std::string& from, const SymbolBindings&) override {
    choices_[bucket] = from.empty() ? std::vector<GpuKernelChoice>(kp_.kernels.size()) : choices_.at(from);
  }

  SearchBuffers Prepare(const SymbolBindings& sizes, const std::vector<bool>& timed, bool whole_step,
                        uint64_t seed) override {
    (void)whole_step;  // no whole-step variants
    SymbolBindings b;
    for (const std::string& s : kp_.symbols) {
      auto it = sizes.find(s);
      if (it == sizes.end()) throw Error("gpu schedule search: no value for size symbol '" + s + "'");
      b[s] = it->second;
    }
    b_ = b;
    FreeBuffers();
    cands_.assign(kp_.kernels.size(), {});
    if (std::none_of(timed.begin(), timed.end(), [](bool t) { return t; })) return {b, {}};
    // Host and device copies of every buffer: bound weights as they are, everything else random.
    std::mt19937 rng((uint32_t)seed);
    for (size_t i = 0; i < kp_.buffers.size(); ++i) {
      const KBuffer& kb = kp_.buffers[i];
      HostTensor t = HostTensor::Zeros(kb.dtype, EvalShape(kb.shape, b));
      const GpuProgram::Slot& bound = p_.slots_[i];
      if (kb.kind == BufferKind::Weight && bound.allocated) {
        if (bound.shape != t.shape)
          throw Error("gpu schedule search: weight '" + kb.name + "' is bound as " +
                      HostTensor::Borrow(kb.dtype, bound.shape, nullptr).ShapeString() +
                      ", the graph expects " + ShapeStr(kb.shape));
        dev_.Download(t.data, bound.mem, (size_t)t.nbytes());
        mems_.push_back(bound.mem);
        owned_.push_back(false);
      } else {
        FillRandomNonZero(t.data, kb.dtype, t.numel(), rng);
        mems_.push_back(dev_.Alloc((size_t)t.nbytes()));
        owned_.push_back(true);
      }
      host_ptrs_.push_back(t.data);
      host_.push_back(std::move(t));
    }
    for (size_t k = 0; k < timed.size(); ++k)
      if (timed[k])
        DistinctScatterRows(
            kp_, kp_.kernels[k], b,
            [&](int i) {
              return std::pair<void*, int64_t>{host_[i].data, host_[i].numel()};
            },
            rng);
    for (size_t i = 0; i < kp_.buffers.size(); ++i)
      if (owned_[i]) dev_.Upload(mems_[i], host_[i].data, (size_t)host_[i].nbytes());
    Build(timed);
    return {b, host_ptrs_};
  }

  std::vector<ScheduleCandidate> Candidates(size_t k, nlohmann::json& notes) override {
    notes.update(
        {{"sizes", b_}, {"timer", dev_.device_timer() ? "device" : "host"}, {"compile_seconds", compile_s_}});
    if (!not_offered_[k].empty()) notes["not_offered"] = not_offered_[k];
    std::vector<ScheduleCandidate> out;
    for (const Cand& x : cands_[k]) {
      ScheduleCandidate c;
      c.name = x.c.name;
      c.bounded = (bool)x.c.error_bound;
      c.broken = x.module ? "" : "does not compile: " + x.compile_error;
      if (x.c.rendered) {
        c.detail["schedule"] = {
            {"threads", x.plan.threads},
            {"reduce", x.plan.cooperative ? "cooperative" : "per-thread"},
            {"requested", GpuChoiceToJson({GpuKernelChoice::Tier::Rendered, x.c.schedule})["reduce"]},
            {"max_groups", x.plan.max_groups}};
        c.choice = GpuChoiceToJson({GpuKernelChoice::Tier::Rendered, x.c.schedule});
      } else {
        c.detail["schedule"] = "hand-written";
        const GpuKernelChoice::Tier tier = x.c.name == "mma-bf16" ? GpuKernelChoice::Tier::TensorCores
                                           : x.c.name == "cublas" ? GpuKernelChoice::Tier::Library
                                                                  : GpuKernelChoice::Tier::AsCompiled;
        c.choice = GpuChoiceToJson({tier, {}});  // other hand-written candidates are only ever checked
      }
      if (!x.same_code_as.empty()) c.detail["same_code_as"] = x.same_code_as;
      out.push_back(std::move(c));
    }
    return out;
  }

  std::vector<double> RunAndRead(size_t k, const ScheduleCandidate& c,
                                 const std::vector<int64_t>& at) override {
    const int out = kp_.kernels[k].out_buffer;
    Restore(out);  // the reference was computed from these contents; a kernel that skips outputs fails
    Launch(k, Find(k, c));
    dev_.Finish();
    HostTensor got = HostTensor::Zeros(host_[out].dtype, host_[out].shape);
    dev_.Download(got.data, mems_[out], (size_t)got.nbytes());
    Restore(out);  // as the next kernels' references assume
    std::vector<double> values;
    for (int64_t i : at) values.push_back(got.At(i));
    return values;
  }

  double ErrorBound(size_t k, const ScheduleCandidate& c, int64_t out_index) override {
    return Find(k, c).c.error_bound(host_ptrs_, out_index);
  }

  double TimeUs(size_t k, const ScheduleCandidate& c) override {
    const Kernel& kn = kp_.kernels[k];
    if (KernelReads(kn).count(kn.out_buffer))
      Restore(kn.out_buffer);  // in place: each run from the same contents
    Cand& x = Find(k, c);
    const double us = dev_.TimeMs([&] { Launch(k, x); }) * 1e3;
    Restore(kn.out_buffer);  // as the next kernels' references assume
    return us;
  }

  void Apply(const std::string& bucket, size_t k, const nlohmann::json& choice) override {
    choices_[bucket][k] = GpuChoiceFromJson(choice);
  }

  // Rebuilds the program with the choices made, unless every kernel stays as compiled.
  void Finish() override {
    FreeBuffers();
    for (const auto& [bucket, cs] : choices_)
      for (const GpuKernelChoice& c : cs)
        if (c.tier != GpuKernelChoice::Tier::AsCompiled) {
          p_.Reschedule(choices_);
          return;
        }
  }

 private:
  struct Cand {
    GpuCandidate c;
    std::vector<std::string> same_code_as;  // other candidates that rendered identically
    GpuKernelPlan plan;                     // rendered candidates
    std::shared_ptr<GpuModule> module;      // null: did not compile
    int first_function = 0;
    std::string compile_error;
  };

  // Candidates of every timed kernel, deduplicated by their rendered code, in one translation unit.
  void Build(const std::vector<bool>& timed) {
    GpuRenderer renderer(dev_.dialect());
    not_offered_.assign(kp_.kernels.size(), {});
    std::string source = renderer.Prelude();
    std::vector<std::string> functions;
    for (size_t k = 0; k < kp_.kernels.size(); ++k) {
      if (!timed[k]) continue;
      KernelProgram one = kp_;
      one.kernels = {kp_.kernels[k]};
      std::vector<GpuCandidate> list = GpuScheduleCandidates(kp_, k, dev_, &not_offered_[k]);
      if (p_.extra_candidates_)
        for (GpuCandidate& c : p_.extra_candidates_(kp_, k)) list.push_back(std::move(c));
      std::map<std::string, size_t> seen;  // rendered text -> candidate
      for (GpuCandidate& c : list) {
        Cand x;
        if (c.rendered) {
          GpuSource probe = renderer.Render(one, c.schedule, "t_");
          const GpuKernelPlan& pl = probe.kernels[0];
          std::string key = probe.functions_source + "|" + std::to_string(pl.threads) + "|" +
                            std::to_string(pl.max_groups) + "|" + std::to_string(pl.cooperative);
          if (auto it = seen.find(key); it != seen.end()) {
            cands_[k][it->second].same_code_as.push_back(c.name);
            continue;
          }
          seen[key] = cands_[k].size();
          GpuSource src = renderer.Render(
              one, c.schedule, "k" + std::to_string(k) + "c" + std::to_string(cands_[k].size()) + "_");
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
        cands_[k].push_back(std::move(x));
      }
    }
    const auto t0 = Clock::now();
    try {
      std::shared_ptr<GpuModule> module = dev_.Compile(source, functions);
      for (auto& list : cands_)
        for (Cand& x : list) x.module = module;
    } catch (const Error&) {  // some candidate does not build: each on its own, to find which
      for (auto& list : cands_)
        for (Cand& x : list) {
          try {
            x.module = dev_.Compile(renderer.Prelude() + x.c.source, x.c.functions);
            x.first_function = 0;
          } catch (const Error& e) {
            x.compile_error = e.what();
          }
        }
    }
    compile_s_ = Since(t0);
  }

  Cand& Find(size_t k, const ScheduleCandidate& c) {
    for (Cand& x : cands_[k])
      if (x.c.name == c.name) return x;
    throw Error("gpu schedule search: kernel " + kp_.kernels[k].name + " has no candidate " + c.name);
  }

  void Launch(size_t k, Cand& x) {
    if (!x.c.rendered) {
      x.c.launch(dev_, *x.module, x.first_function, mems_, b_);
      return;
    }
    GpuLaunchDims d = GpuLaunch(kp_.kernels[k], x.plan, b_);
    if (d.elements == 0) return;
    std::vector<GpuArg> args;
    for (int buf : x.plan.buffers) args.push_back(GpuArg::Buffer(mems_[buf]));
    for (const std::string& s : kp_.symbols) args.push_back(GpuArg::Int(b_.at(s)));
    dev_.Launch(*x.module, x.first_function, args, d.groups, d.threads);
  }

  void Restore(int buffer) { dev_.Upload(mems_[buffer], host_[buffer].data, (size_t)host_[buffer].nbytes()); }

  void FreeBuffers() {
    for (size_t i = 0; i < mems_.size(); ++i) {
      try {
        if (owned_[i]) dev_.Free(mems_[i]);
      } catch (...) {  // a failing device at teardown must not terminate the process
      }
    }
    mems_.clear();
    owned_.clear();
    host_.clear();
    host_ptrs_.clear();
  }

  GpuProgram& p_;
  GpuDevice& dev_;
  const KernelProgram& kp_;
  SymbolBindings b_;
  std::vector<HostTensor> host_;  // per buffer, the contents references are taken from
  std::vector<void*> host_ptrs_;  // ... and their data
  std::vector<GpuMem> mems_;      // ... and on the device (bound weights are the program's own)
  std::vector<bool> owned_;
  std::vector<std::vector<Cand>> cands_;
  std::vector<std::vector<std::string>> not_offered_;
  double compile_s_ = 0;
  std::map<std::string, std::vector<GpuKernelChoice>> choices_;
};

std::unique_ptr<ScheduleSpace> GpuProgram::OpenSearch() { return std::make_unique<GpuScheduleSpace>(*this); }

}  // namespace prism
