// The CPU's schedule space for the one search: per kernel, tier (a GEMM form's template, the fused
// attention template, generated code) x loop order x threading, and the team's split of the whole step.
#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string_view>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_experts.h"
#include "backends/cpu/gemm_forms.h"
#include "backends/cpu/gemm_int8.h"
#include "backends/cpu/machine_probe.h"
#include "backends/cpu/program.h"
#include "backends/timing.h"
#include "compiler/kernel_eval.h"

namespace prism {

class CpuScheduleSpace : public ScheduleSpace {
 public:
  // Candidates run kernels alone and out of order: every intermediate gets its own bytes meanwhile.
  explicit CpuScheduleSpace(Program& p) : p_(p), threads_(p.pool_->size()) { p_.share_scratch_ = false; }
  ~CpuScheduleSpace() override { p_.share_scratch_ = true; }

  const KernelProgram& kernels() const override { return p_.kp_; }
  // The tier names the micro-kernels the forms may use (lower under PRISM_GEMM_ISA): a decision made
  // with AVX-512 forms never reaches a run that lacks them.
  std::string identity() const override {
    return "cpu|" + CpuModelName() + "|t" + std::to_string(threads_) + "|" + GemmIsa() + "|r" +
           std::to_string(kTemplateRevision) + (p_.exact() ? "|exact" : "");
  }
  // A GEMM's products may run on any instruction this CPU has for its weight type (bf16 on AMX tiles,
  // int8 dot products for quantized weights); everything else on f32 FMAs.
  DeviceCeilings Ceilings(size_t k) const override {
    const MachinePeaks& peaks = ProbeMachine(threads_);
    const Kernel& kn = p_.kp_.kernels[k];
    if (!kn.gemm) return {peaks.fp32_gflops, "fp32_fma", peaks.read_gbps};
    const DType wt = p_.kp_.buffers[kn.gemm->w_buffer].dtype;
    return {peaks.GemmPeak(wt), peaks.GemmPeakBasis(wt), peaks.read_gbps};
  }

  void StartBucket(const std::string& bucket, const std::string& from, const SymbolBindings& sizes) override {
    chosen_ = &p_.choices_[bucket];
    if (from.empty()) {
      chosen_->clear();
      for (size_t k = 0; k < p_.kp_.kernels.size(); ++k) chosen_->push_back(p_.DefaultChoice(k, sizes));
    } else {
      *chosen_ = p_.choices_.at(from);
    }
  }

  SearchBuffers Prepare(const SymbolBindings& sizes, const std::vector<bool>& timed, bool whole_step,
                        uint64_t seed) override {
    std::mt19937 rng((uint32_t)seed);
    inputs_.clear();
    for (const Node* n : p_.input_nodes_) {
      HostTensor t = HostTensor::Zeros(n->dtype, EvalShape(n->shape, sizes));
      FillRandomNonZero(t.data, n->dtype, t.numel(), rng);
      inputs_[n->name] = t;
    }
    b_ = BindSymbols(p_.input_nodes_, p_.kp_.symbols, inputs_, sizes);
    syms_.clear();
    for (const std::string& s : p_.kp_.symbols) syms_.push_back(b_.at(s));
    ptrs_.clear();
    defaults_.clear();
    if (!whole_step && std::none_of(timed.begin(), timed.end(), [](bool t) { return t; })) return {b_, {}};
    // Scratch and state the timed kernels touch get random values too, so that a kernel run alone reads
    // realistic ones.
    ptrs_ = p_.PrepareBuffers(inputs_, b_);
    std::set<int> touched;
    for (size_t k = 0; k < timed.size(); ++k)
      if (timed[k]) {  // and what the producer and consumer a GEMM may run touch
        touched.insert(p_.touched_[k].begin(), p_.touched_[k].end());
        for (int j : {p_.producer_[k], p_.consumer_[k]})
          if (j >= 0) touched.insert(p_.touched_[j].begin(), p_.touched_[j].end());
      }
    for (int i : touched) {
      const BufferKind kind = p_.kp_.buffers[i].kind;
      if (kind != BufferKind::Intermediate && kind != BufferKind::Output && kind != BufferKind::State)
        continue;
      int64_t n = 1;
      for (int64_t d : p_.shapes_[i]) n *= d;
      FillRandomNonZero(ptrs_[i], p_.kp_.buffers[i].dtype, n, rng);
    }
    // Expert GEMMs' rows spread over the experts as a router spreads them: timed with every row on one or
    // two slabs (as small random integers put them), a form would be timed reading less than a step does.
    for (size_t k = 0; k < timed.size(); ++k)
      if (const auto& gm = p_.kp_.kernels[k].gemm; timed[k] && gm && gm->index_buffer >= 0) {
        int32_t* rows = static_cast<int32_t*>(ptrs_[gm->index_buffer]);
        for (int64_t r = 0, m = p_.shapes_[gm->index_buffer][0]; r < m; ++r)
          rows[r] = (int32_t)(r % gm->experts);
      }
    for (size_t k = 0; k < timed.size(); ++k)
      if (timed[k])
        DistinctScatterRows(
            p_.kp_, p_.kp_.kernels[k], b_,
            [&](int i) {
              int64_t n = 1;
              for (int64_t d : p_.shapes_[i]) n *= d;
              return std::pair<void*, int64_t>{ptrs_[i], n};
            },
            rng);
    p_.PlanLaunches(b_);
    defaults_ = p_.launches_;
    return {b_, ptrs_};
  }

  // The space: the template in each GEMM form this CPU and weight type have (some pay off only over many
  // activation rows) or the fused attention template, generated code in either loop order; each on
  // thread 0 alone and split across the team.
  std::vector<ScheduleCandidate> Candidates(size_t k, nlohmann::json& notes) override {
    const Kernel& kn = p_.kp_.kernels[k];
    const DType wt = kn.gemm ? p_.kp_.buffers[kn.gemm->w_buffer].dtype : DType::F32;
    std::vector<ScheduleCandidate> out;
    auto add = [&](const std::string& name, bool use_template, bool reduce_outer, int form,
                   int64_t param = 0) {
      const GemmForm& f = GemmForms()[form];
      const bool rounds = use_template && kn.gemm && f.rounds && f.rounds(wt);
      for (Threading t : {Threading::OneThread, Threading::Team}) {
        if (t == Threading::Team && threads_ < 2) continue;
        KernelChoice c{use_template, t, reduce_outer, form, param};
        out.push_back(
            {name + (t == Threading::Team ? "/parallel" : "/serial"), ChoiceToJson(c), nullptr, rounds, ""});
      }
    };
    if (kn.attention && AttentionTemplateSupported()) {
      add("template-attention", true, false, 0);
      // The unfused form's kernels: skipped when the template is chosen, timed with it when not.
      notes["unfused_kernels"] = nlohmann::json::array();
      for (size_t j : Covered(k)) notes["unfused_kernels"].push_back(p_.kp_.kernels[j].name);
    }
    for (size_t f = 0; f < GemmForms().size() && kn.gemm; ++f) {
      const GemmForm& form = GemmForms()[f];
      const bool slabs = kn.gemm->index_buffer < 0 || form.on_slabs;
      if (defaults_[k].m >= MinRows(form, wt) && form.offered(wt, kn.gemm->k) && slabs &&
          !(p_.exact() && p_.RoundsActivation(k, (int)f))) {
        add(form.label(wt), true, false, (int)f);
        if (form.param_values)  // the form's template parameter: each value a candidate of its own
          for (int64_t v : form.param_values(wt, defaults_[k].m, kn.gemm->k))
            add(form.label(wt) + "/" + (form.param_name_of ? form.param_name_of(wt) : form.param) + "=" +
                    std::to_string(v),
                true, false, (int)f, v);
      }
    }
    add("generated", false, false, 0);
    if (p_.fns_ro_[k]) add("generated-reduce-outer", false, true, 0);
    return out;
  }

  // The unfused form's kernels write what the attention kernel's value tree reads; the producer a GEMM may
  // run itself writes the activation the GEMM's value tree reads.
  void BeforeReference(size_t k) override {
    for (size_t j : Covered(k)) RunAlone(j);
    if (p_.producer_[k] >= 0) RunAlone(p_.producer_[k]);
  }

  std::vector<double> RunAndRead(size_t k, const ScheduleCandidate& c,
                                 const std::vector<int64_t>& at) override {
    const KernelChoice choice = Select(k, c);
    p_.launches_[k].whole_output = true;  // a GEMM running its output's reader keeps none of it otherwise
    RunOnce(k, choice);
    const int out = p_.kp_.kernels[k].out_buffer;
    std::vector<double> got;
    for (int64_t i : at) got.push_back(LoadAsDouble(ptrs_[out], p_.kp_.buffers[out].dtype, i));
    return got;
  }

  double ErrorBound(size_t k, const ScheduleCandidate& c, int64_t out_index) override {
    const GemmTemplate& gm = *p_.kp_.kernels[k].gemm;
    const DType wt = p_.kp_.buffers[gm.w_buffer].dtype;
    const int64_t row = out_index / gm.n;
    const float* a_row = static_cast<const float*>(ptrs_[gm.a_buffer]) + row * gm.k;
    std::vector<float> gathered;
    if (const int64_t group = p_.launches_[k].a_group; group > 0) {  // a K-major activation's row, gathered
      gathered.resize((size_t)gm.k);
      KMajorRowsToRowMajor(static_cast<const float*>(ptrs_[gm.a_buffer]), group, gm.k, row, 1,
                           gathered.data());
      a_row = gathered.data();
    }
    const void* w = gm.index_buffer < 0
                        ? ptrs_[gm.w_buffer]
                        : ExpertSlab(ptrs_[gm.w_buffer], wt, gm.n, gm.k,
                                     static_cast<const int32_t*>(ptrs_[gm.index_buffer]), gm.experts, row);
    return GemmForms()[ChoiceFromJson(c.choice).form].error_bound(a_row, w, wt, gm.k, out_index % gm.n);
  }

  // A step reads each weight once, from memory: timing a GEMM with its weights left in cache by the
  // previous run favoured compute-light single-thread forms that lose in the step. And in the step the team
  // is awake (spinning at its barriers): a team candidate timed just after the eviction, which outlasts
  // the workers' spin, paid their wake-up from sleep (tens of microseconds), which kept small GEMMs on one
  // thread while the other waited for them in the step.
  double TimeUs(size_t k, const ScheduleCandidate& c) override {
    const KernelChoice choice = Select(k, c);
    if (const auto& gm = p_.kp_.kernels[k].gemm) p_.EvictWeights(*gm);
    if (choice.threading == Threading::Team) p_.pool_->ParallelFor(threads_, [](int) {});
    const auto t0 = Clock::now();
    RunOnce(k, choice);
    return Since(t0) * 1e6;
  }

  // A GEMM decided: the weights its other candidates repacked are freed now, not when the search ends (a
  // 1B model's f16 GEMMs each packed in panels and AMX tiles, kept until then, took the search past 24 GB).
  void Apply(const std::string& bucket, size_t k, const nlohmann::json& choice) override {
    p_.choices_[bucket][k] = ChoiceFromJson(choice);
    if (k < defaults_.size()) p_.launches_[k] = defaults_[k];
    if (const auto& gm = p_.kp_.kernels[k].gemm) FreeUnusedPacks(gm->w_buffer);
  }

  bool Runs(const std::string& bucket, size_t k) const override {
    const int by = p_.kp_.kernels[k].covered_by;
    return by < 0 || !p_.choices_.at(bucket)[by].use_template || !AttentionTemplateSupported();
  }

  // The whole step on the team (with its barriers) against thread 0 alone: for a small model the barriers
  // can cost more than splitting gains. Splitting every GEMM is tried too: a GEMM timed alone wakes the
  // team for each run, which favours keeping small ones on one thread.
  // A form's step parameter (GemmForm::step_param_values: the int8 GEMMs' prefetch distance) is a step's
  // choice too: timed alone, each GEMM's distances came out within a few percent of one another (and the
  // search chose by that noise), while in the step, its kernels back to back, no prefetching decoded the 1B
  // Q4_K_M shape 8% slower than the default.
  std::vector<std::string> StepVariants(const std::string& bucket) override {
    std::vector<std::string> names = {"team"};
    if (threads_ >= 2) {
      if (Variant("team, every GEMM split", p_.choices_[bucket]) != p_.choices_[bucket])
        names.push_back("team, every GEMM split");
      names.push_back("one thread");
    }
    for (int64_t ahead : PrefetchChoices(bucket))
      names.push_back(std::string(kPrefetchVariant) + Int8PrefetchName(ahead));
    return names.size() > 1 ? names : std::vector<std::string>{};
  }
  double TimeStepUs(const std::string& bucket, const std::string& variant) override {
    std::vector<KernelChoice>& chosen = p_.choices_[bucket];
    const std::vector<KernelChoice> own = chosen;
    chosen = Variant(variant, own);
    p_.PlanLaunches(b_);
    const auto t0 = Clock::now();
    p_.RunMegakernel(ptrs_.data(), syms_.data());
    const double us = Since(t0) * 1e6;
    chosen = own;
    return us;
  }
  void ApplyStep(const std::string& bucket, const std::string& variant) override {
    p_.choices_[bucket] = Variant(variant, p_.choices_[bucket]);
  }

  void Finish() override {
    FreeUnusedPacks(-1);
    p_.ResetState();  // the search ran kernels on random data
  }

 private:
  // Repacked weights (of weight buffer w_buffer; -1: of every one, once the search is done) that no bucket's
  // choice reads were made for candidates only: free them. While the search runs, keep too those of a launch
  // whose form fits the team's activation to its packed weights: a decided kernel's launch goes back to its
  // default form (Apply), and every candidate's run fits the team's activations to every launch (an AMX
  // default freed so had been read through null).
  void FreeUnusedPacks(int w_buffer) {
    std::set<std::pair<int, int>> used;
    for (const auto& [bucket, cs] : p_.choices_)
      for (size_t k = 0; k < cs.size() && k < p_.kp_.kernels.size(); ++k)
        if (p_.kp_.kernels[k].gemm && cs[k].use_template)
          used.insert({cs[k].form, p_.kp_.kernels[k].gemm->w_buffer});
    for (size_t k = 0; k < p_.launches_.size() && k < p_.kp_.kernels.size() && w_buffer >= 0; ++k) {
      const Program::KernelLaunch& l = p_.launches_[k];
      if (p_.kp_.kernels[k].gemm && l.use_template && GemmForms()[l.form].fit_team)
        used.insert({l.form, p_.kp_.kernels[k].gemm->w_buffer});
    }
    std::erase_if(p_.packed_, [&](const auto& e) {
      return (w_buffer < 0 || e.first.second == w_buffer) && !used.count(e.first);
    });
  }

  // The kernels whose unfused form an attention kernel k covers (empty for other kernels).
  std::vector<size_t> Covered(size_t k) const {
    std::vector<size_t> out;
    for (size_t j = 0; j < k && p_.kp_.kernels[k].attention; ++j)
      if (p_.kp_.kernels[j].covered_by == (int)k) out.push_back(j);
    return out;
  }

  // The step's choices under a whole-step variant: the kernels' own on the team; the same with every
  // template GEMM split across the team; every kernel on thread 0 alone; or the kernels' own with every
  // GEMM whose form takes a step parameter at that value (the int8 GEMMs' prefetch distance in bytes, as
  // Int8PrefetchName writes it).
  std::vector<KernelChoice> Variant(const std::string& name, std::vector<KernelChoice> cs) const {
    // A name the database holds that does not parse leaves the kernels' own.
    const std::optional<int64_t> ahead =
        name.starts_with(kPrefetchVariant)
            ? Int8PrefetchFromName(std::string_view(name).substr(kPrefetchVariant.size()))
            : std::nullopt;
    for (size_t k = 0; k < cs.size() && k < p_.kp_.kernels.size(); ++k) {
      if (name == "one thread") cs[k].threading = Threading::OneThread;
      if (name == "team, every GEMM split" && p_.kp_.kernels[k].gemm && cs[k].use_template)
        cs[k].threading = Threading::Team;
      if (ahead && !PrefetchChoicesOf(k, cs[k]).empty()) cs[k].param = *ahead;
    }
    return cs;
  }

  // (The name predates int8-avx2's distance and is kept for the databases that hold it.)
  static constexpr std::string_view kPrefetchVariant = "team, int8 rows prefetch=";
  // The step parameter's values kernel k's GEMM offers under choice c (none for another kernel or form).
  std::vector<int64_t> PrefetchChoicesOf(size_t k, const KernelChoice& c) const {
    const auto& gm = p_.kp_.kernels[k].gemm;
    if (!gm || !c.use_template || c.form < 0 || c.form >= (int)GemmForms().size()) return {};
    const GemmForm& form = GemmForms()[c.form];
    return form.step_param_values ? form.step_param_values(p_.kp_.buffers[gm->w_buffer].dtype, gm->k)
                                  : std::vector<int64_t>{};
  }
  // The distances worth timing: those of the first kernel of the step that offers any.
  std::vector<int64_t> PrefetchChoices(const std::string& bucket) const {
    const std::vector<KernelChoice>& cs = p_.choices_.at(bucket);
    for (size_t k = 0; k < cs.size() && k < p_.kp_.kernels.size(); ++k)
      if (std::vector<int64_t> c = PrefetchChoicesOf(k, cs[k]); !c.empty()) return c;
    return {};
  }

  KernelChoice Select(size_t k, const ScheduleCandidate& c) {
    const KernelChoice choice = ChoiceFromJson(c.choice);
    Program::KernelLaunch& l = p_.launches_[k];
    l = defaults_[k];
    l.skip = false;  // a kernel an attention template covers is searched for its unfused form
    l.use_template = choice.use_template;
    l.parallel = choice.threading == Threading::Team;
    l.reduce_outer = choice.reduce_outer;
    l.form = choice.form;
    l.team_slot = 0;
    if (choice.use_template && p_.kp_.kernels[k].gemm) p_.PrepareForm(*p_.kp_.kernels[k].gemm, choice.form);
    // As the step would: a GEMM's candidate runs its producer and consumer, a consumer all its elements.
    l.producer = p_.FusedProducer(k, l);
    l.consumer = p_.consumer_[k] >= 0 ? p_.FusedConsumer(k, l, b_) : -1;
    l.consumed_in = -1;
    p_.FuseTouched(k);
    p_.FitTeamActivations();
    return choice;
  }

  void RunOnce(size_t k, const KernelChoice& c) {
    if (!c.use_template)
      for (size_t j : Covered(k)) RunAlone(j);
    Dispatch(k, c.threading == Threading::Team);
  }

  // Runs kernel j alone as the step would (its own choice if already made), even where a fused attention
  // kernel covers it.
  void RunAlone(size_t j) {
    Program::KernelLaunch& l = p_.launches_[j];
    const KernelChoice& c = (*chosen_)[j];
    l = defaults_[j];
    l.skip = false;
    l.use_template = false;
    l.consumed_in = -1;
    if (c.threading != Threading::ByWorkSize) l.parallel = threads_ > 1 && c.threading == Threading::Team;
    l.reduce_outer = c.reduce_outer && p_.fns_ro_[j];
    Dispatch(j, l.parallel);
    l = defaults_[j];
  }

  void Dispatch(size_t k, bool team) {
    if (team)
      p_.pool_->ParallelFor(threads_,
                            [&](int t) { p_.RunChunk(k, t, threads_, ptrs_.data(), syms_.data()); });
    else
      p_.RunChunk(k, 0, threads_, ptrs_.data(), syms_.data());
  }

  Program& p_;
  const int threads_;
  std::vector<KernelChoice>* chosen_ = nullptr;  // the bucket's
  std::map<std::string, HostTensor> inputs_;
  SymbolBindings b_;
  std::vector<int64_t> syms_;
  std::vector<void*> ptrs_;
  std::vector<Program::KernelLaunch> defaults_;  // the bucket's launches under its starting choices
};

std::unique_ptr<ScheduleSpace> Program::OpenSearch() { return std::make_unique<CpuScheduleSpace>(*this); }

}  // namespace prism
