// The CPU executable: plans kernels, JIT-compiles them, binds buffers and runs steps on a pool.
#include "backends/cpu/program.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <tuple>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_experts.h"
#include "backends/cpu/gemm_panels.h"
#include "backends/cpu/weight_memory.h"
#include "codegen/cpp_renderer.h"
#include "ir/error.h"

namespace prism {

using Clock = std::chrono::steady_clock;

static const int kDotPanelsForm = GemmFormIndex("dot-panels");
static const int kPanelsForm = GemmFormIndex("panels");
static const int kQ8KPanelsForm = GemmFormIndex("q8k-panels");
static const int kRoundedForm = GemmFormIndex("rounded");
static const int kQ8KForm = GemmFormIndex("q8k");
static const int kSlicesForm = GemmFormIndex("slices");
static const int kAmxForm = GemmFormIndex("amx");
static const int kInt8Avx2Form = GemmFormIndex("int8-avx2");

// Unsearched, a product of quantized weights takes the form a search picks for it on every CPU measured:
// int8 dot products against the activation rounded per 32 values (as llama.cpp rounds it), one row at a
// time for a few rows, int8 panels over more (from 2 rows for the formats they keep as nibbles; for the
// formats of 256-value super-blocks against the activation rounded per 256 values, as llama.cpp's Q8_K:
// 1.08-1.19x the per-32 panels' GOP/s at 128 rows of 8192 x 2048 on Zen 5, one thread, and chosen by the
// search for every prefill product of the 1B shape in Q4_K_M and Q6_K; at 2 to 32 rows from 8% behind
// (Q6_K, 16384 x 2048, out of the L3) to 22% ahead (Q6_K, 2048 x 8192), the serving bench unmoved). The
// rows form (exact products, the weights decoded to f32) streamed Q4_0 at half the bandwidth at one row
// (bench/gemm_forms.cpp: 17 against 35 GB/s on Zen 5) and ran 16 rows 3-4x slower than the panels. Each
// form's rounding stays within the bound the search checks (Gemm.*RoundingBound tests). Float weights over
// many rows take the panels where a panel's 32 columns are filled: on Zen 5 (bench/gemm_forms.cpp, one
// thread) 0.98-1.4x the rows form's GFLOP/s at 6 to 512 rows of a 2048-square product (1.3-1.4x at 6-12 and
// 128-512 rows, even at 16-32) and 1.2-4x over a convolution's (K = 27, 288, 576), the rows form ahead
// only over few columns (0.7x at N = 10). -1: the kernel's own default (the rows form), or no such form
// on this CPU. Without AVX-512, Q8_0, Q4_0, Q4_K and Q6_K take the AVX2 int8 tiles at every row count
// (Zen 3, bench/gemm_forms.cpp, N = K = 2048, against the slices: at 512 rows on two threads Q4_0 and Q4_K
// 1.6x, Q6_K 1.1x (1.6x on one since the broadcast tiles), Q8_0 1.2-1.4x on one; Q4_0 2.8x at 16 rows on one;
// Q4_K 2x the q8k form at one row; pp512 of the 1B shape in Q8_0 70-75 tok/s against the slices' 56-60), the
// other quantized types the slices from 16 rows, f32/bf16 the slices from 64 rows (1.1-1.3x the rows form at
// 16 rows of quantized weights and 1.6-1.9x at 512, 1.2-1.3x for f32/bf16 from 64 rows); f16's rows form
// stays ahead (1.05-1.2x the slices at 64-512 rows: its weights, half the bytes of f32's, stay in L1).
// With AMX, Q8_0 and Q4_0 over 32 rows or more take its int8 tiles (whole: the team shares one rounded
// activation, so not an expert's slabs), which round the activation as the panels do: on an Intel Xeon with
// AMX (bench/gemm_forms.cpp, 8192 x 2048, two threads) 1.14-1.27x the panels' GOP/s at 32 to 512 rows, 0.65x
// at 16 (its tiles take 32 rows at a time), and the search's choice for the 1B shape's prompt products there.
static int DefaultForm(int64_t m, DType wt, int64_t n, int64_t k, bool whole) {
  if (GemmForms()[kInt8Avx2Form].offered(wt, k)) return kInt8Avx2Form;
  if (whole && (wt == DType::Q8_0 || wt == DType::Q4_0) && m >= 32 && GemmForms()[kAmxForm].offered(wt, k))
    return kAmxForm;
  const bool many_rows = IsQuantized(wt) ? m >= 16 : wt != DType::F16 && m >= 64;
  if (many_rows && GemmForms()[kSlicesForm].offered(wt, k)) return kSlicesForm;
  const GemmForm& panels = GemmForms()[kPanelsForm];
  if (!IsQuantized(wt))
    return m >= MinRows(panels, wt) && n >= kPanelCols && panels.offered(wt, k) ? kPanelsForm : -1;
  if (m >= MinRows(panels, wt) && panels.offered(wt, k))
    return GemmForms()[kQ8KPanelsForm].offered(wt, k) ? kQ8KPanelsForm : kPanelsForm;
  for (int f : {kRoundedForm, kQ8KForm})
    if (GemmForms()[f].offered(wt, k)) return f;
  return -1;
}

namespace {

// A GEMM whose epilogue only adds an f32 vector along its columns (a bias): that vector's buffer; else -1.
int BiasOf(const KernelProgram& kp, const Kernel& kn) {
  if (!kn.gemm || !kn.gemm->epilogue || kn.gemm->index_buffer >= 0 || kn.vars.empty() ||
      !kn.extents.back().IsConst(kn.gemm->n))
    return -1;
  const KValue& v = *kn.value;
  if (v.kind != KValue::Kind::Op || v.op != Op::Add || v.args.size() != 2) return -1;
  for (int s = 0; s < 2; ++s) {
    const KValue &r = *v.args[s], &b = *v.args[1 - s];
    if (r.kind == KValue::Kind::Reduce && b.kind == KValue::Kind::Load && b.gathers.empty() &&
        b.dtype == DType::F32 && kp.buffers[b.buffer].dtype == DType::F32 &&
        b.index == Expr::Sym(kn.vars.back()))
      return b.buffer;
  }
  return -1;
}

}  // namespace

bool ActivationDominates(int64_t m, const GemmTemplate& gm, DType wt) {
  const double weight = (double)StorageBytes(wt, gm.n * gm.k), activation = 4.0 * (double)m * (double)gm.k;
  return activation > 32.0 * weight || (activation > 4.0 * weight && weight <= 512.0 * 1024);
}

// Every size PlanLaunches may evaluate for a kernel (a superset: its extents, reduction, GEMM rows and
// attention sizes), for the symbols they read.
static std::vector<const Expr*> LaunchSizeExprs(const Kernel& kn) {
  std::vector<const Expr*> out{&kn.reduce_size};
  for (const Expr& e : kn.extents) out.push_back(&e);
  if (kn.gemm) out.insert(out.end(), {&kn.gemm->m, &kn.gemm->a_group});
  if (kn.attention) {
    const AttentionTemplate& at = *kn.attention;
    out.insert(out.end(), {&at.seq, &at.total, &at.offset});
    for (const OperandLayout* l : {&at.q_layout, &at.k_layout, &at.v_layout, &at.mask_layout})
      out.insert(out.end(), {&l->row, &l->head, &l->offset});
  }
  return out;
}

// The values b gives the symbols, in the order of `symbols` (bound[i] false where b has none).
static void ResolveSymbols(const std::vector<std::string>& symbols, const SymbolBindings& b,
                           std::vector<int64_t>* values, std::vector<bool>* bound) {
  values->assign(symbols.size(), 0);
  bound->assign(symbols.size(), false);
  for (size_t i = 0; i < symbols.size(); ++i)
    if (auto it = b.find(symbols[i]); it != b.end()) (*values)[i] = it->second, (*bound)[i] = true;
}

static double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<Program> Program::Compile(const Graph& g, const CompileOptions& opts) {
  if (g.outputs().empty()) throw Error("compile: the graph has no outputs");
  auto t0 = Clock::now();
  KernelProgram kp = BuildKernelProgram(g, opts.fusion);
  std::string source = RenderCpp(kp);
  double plan = Seconds(t0);
  JitStats js;
  auto t1 = Clock::now();
  JitLibrary lib = [&] {
    if (opts.prebuilt_so.empty()) return JitLibrary::Load(source, &js);
    if (source != opts.prebuilt_source)
      throw Error(opts.prebuilt_so +
                  ": the artifact's kernels do not match this model and Prism version; compile it again");
    js.cache_hit = true;
    js.so_path = opts.prebuilt_so;
    return JitLibrary::LoadFile(opts.prebuilt_so);
  }();
  if (!opts.prebuilt_so.empty()) js.compile_seconds = Seconds(t1);
  int threads = opts.threads > 0 ? opts.threads : DefaultThreadCount();
  std::unique_ptr<Program> p(new Program(g, std::move(kp), std::move(source), std::move(lib), threads));
  p->exact_ = opts.exact;
  p->gemm_chunks_ = opts.gemm_chunks;
  p->stats_.graph_nodes = g.size();
  p->stats_.kernels = (int)p->kp_.kernels.size();
  p->stats_.plan_seconds = plan;
  p->stats_.compile_seconds = js.compile_seconds;
  p->stats_.cache_hit = js.cache_hit;
  p->stats_.so_path = js.so_path;
  return p;
}

Program::Program(const Graph& g, KernelProgram kp, std::string source, JitLibrary lib, int threads)
    : graph_(g),
      kp_(std::move(kp)),
      source_(std::move(source)),
      lib_(std::move(lib)),
      pool_(std::make_unique<ThreadPool>(threads)) {
  for (const Kernel& k : kp_.kernels) {
    fns_.push_back(reinterpret_cast<KernelFn>(lib_.Symbol(k.name)));
    fns_ro_.push_back(reinterpret_cast<KernelFn>(lib_.FindSymbol(k.name + "_ro")));
    fns_epi_.push_back(k.gemm && k.gemm->epilogue ? reinterpret_cast<KernelFn>(lib_.Symbol(k.name + "_epi"))
                                                  : nullptr);
    operands_.push_back(GeneratedOperands(k));
  }
  for (size_t k = 0; k < kp_.kernels.size(); ++k) unsearched_.push_back(UnsearchedChoice(k));
  storage_.resize(kp_.buffers.size());
  capacity_.assign(kp_.buffers.size(), 0);
  shapes_.resize(kp_.buffers.size());
  auto symbols_of = [&](const std::vector<const Expr*>& exprs) -> std::optional<std::vector<int>> {
    std::vector<std::string> names;
    for (const Expr* e : exprs) e->CollectSymbols(&names);
    std::vector<int> out;
    for (const std::string& name : names) {
      auto it = std::find(kp_.symbols.begin(), kp_.symbols.end(), name);
      if (it == kp_.symbols.end()) return std::nullopt;  // evaluated every time
      out.push_back((int)(it - kp_.symbols.begin()));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  };
  for (const Kernel& kn : kp_.kernels) size_symbols_.push_back(symbols_of(LaunchSizeExprs(kn)));
  for (const KBuffer& kb : kp_.buffers) {
    std::vector<const Expr*> dims;
    for (const Expr& d : kb.shape) dims.push_back(&d);
    size_symbols_.push_back(symbols_of(dims));
  }
  size_seen_.assign(size_symbols_.size(), {});
  size_branch_.assign(kp_.kernels.size(), -1);
  input_nodes_ = InputNodes(graph_);
  barrier_ = std::make_unique<SpinBarrier>(pool_->size());
  if (const char* mk = std::getenv("PRISM_MEGAKERNEL"); mk && std::string(mk) == "0") megakernel_ = false;
  // Static dependencies between kernels through the buffers they read and write.
  std::vector<std::set<int>> reads;
  for (const Kernel& k : kp_.kernels) reads.push_back(KernelReads(k));
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    touched_.push_back(reads[k]);
    touched_.back().insert(kp_.kernels[k].out_buffer);
    in_place_inputs_.push_back(InPlaceInputs(kp_, kp_.kernels[k]));
  }
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    producer_.push_back(ProducerOf(k, reads));
    consumer_first_.emplace_back();
    consumer_.push_back(ConsumerOf(k, reads, &consumer_first_.back()));
    bias_.push_back(BiasOf(kp_, kp_.kernels[k]));
  }
  fused_touched_.resize(kp_.kernels.size());
  consumer_plan_.resize(kp_.kernels.size());
  deps_.resize(kp_.kernels.size());
  for (size_t k = 0; k < kp_.kernels.size(); ++k)
    for (size_t j = 0; j < k; ++j) {
      int wj = kp_.kernels[j].out_buffer, wk = kp_.kernels[k].out_buffer;
      if (reads[k].count(wj) || reads[j].count(wk) || wj == wk) deps_[k].push_back((int)j);
    }
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
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return kernel_seconds_[a] > kernel_seconds_[b]; });
  double total = 0;
  for (double s : kernel_seconds_) total += s;
  std::string out = "kernel profile (" + std::to_string(kp_.kernels.size()) + " kernels, " +
                    std::to_string(total * 1e3) + " ms total)\n";
  char line[256];
  for (size_t i = 0; i < order.size() && i < 25; ++i) {
    size_t k = order[i];
    std::snprintf(line, sizeof line, "  %6.2f%%  %10.3f ms  %8lld calls  %s",
                  total > 0 ? 100 * kernel_seconds_[k] / total : 0, kernel_seconds_[k] * 1e3,
                  (long long)kernel_calls_[k], kp_.kernels[k].name.c_str());
    out += line;
    const int inside = ComputedInside(k);  // in the last step: its time is that product's
    out += (inside >= 0 ? "  (run inside " + kp_.kernels[inside].name + ")" : std::string()) + "\n";
  }
  // Then by kind (the kernel name without its index), where a model's layers add up.
  std::map<std::string, std::pair<double, int>> kinds;
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string& name = kp_.kernels[k].name;
    auto& [seconds, count] = kinds[name.substr(name.find('_') + 1)];
    seconds += kernel_seconds_[k];
    count++;
  }
  std::vector<std::pair<double, std::string>> by_kind;
  for (const auto& [kind, v] : kinds) by_kind.push_back({v.first, kind});
  std::sort(by_kind.rbegin(), by_kind.rend());
  out += "by kind:\n";
  for (const auto& [seconds, kind] : by_kind) {
    std::snprintf(line, sizeof line, "  %6.2f%%  %10.3f ms  %4d kernels  %s\n",
                  total > 0 ? 100 * seconds / total : 0, seconds * 1e3, kinds[kind].second, kind.c_str());
    out += line;
  }
  return out;
}

void Program::BindWeight(const std::string& name, const HostTensor& weight) {
  HostTensor t = weight;
  for (size_t b = 0; b < kp_.buffers.size(); ++b) {
    const KBuffer& kb = kp_.buffers[b];
    if (kb.kind != BufferKind::Weight || kb.name != name) continue;
    CheckWeightDtype(name, t.dtype, kb.dtype);
    // Float GEMM weights of 2 MiB and more are copied onto huge pages: the decode step's row GEMVs
    // stream them from there (a file mapping's 4 KiB pages cost a TLB miss and a prefetcher restart
    // each; a 17 MB f16 GEMV on 2 threads read 21.5-24.5 GB/s from 4 KiB pages, 23-25 from 2 MiB).
    const bool gemm_weight = std::any_of(kp_.kernels.begin(), kp_.kernels.end(), [&](const Kernel& k) {
      return k.gemm && k.gemm->w_buffer == (int)b;
    });
    if (gemm_weight && IsFloat(t.dtype) && t.nbytes() >= (int64_t{2} << 20)) {
      const std::shared_ptr<const void> copy =
          SharedDerived(t.data, t.owner, "huge-page copy of " + std::to_string(t.nbytes()) + " bytes", [&] {
            WeightMemory m = AllocateWeightMemory((size_t)t.nbytes(), ("weight '" + name + "'").c_str());
            std::memcpy(m.get(), t.data, (size_t)t.nbytes());
            const auto unmap = m.get_deleter();
            return std::shared_ptr<const void>(m.release(), unmap);
          });
      t.owner = std::const_pointer_cast<void>(copy);  // never written: weights are read only
      t.data = t.owner.get();
    }
    storage_[b] = std::move(t);
    std::erase_if(packed_,
                  [&](const auto& e) { return e.first.second == (int)b; });  // repacked when next needed
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

// The state buffer named `name`, allocated (zeros) if no step has run since ResetState.
static HostTensor& StateStorage(const KernelProgram& kp, std::vector<HostTensor>& storage,
                                const std::string& name) {
  for (size_t b = 0; b < kp.buffers.size(); ++b) {
    const KBuffer& kb = kp.buffers[b];
    if (kb.kind != BufferKind::State || kb.name != name) continue;
    if (!storage[b].data) storage[b] = HostTensor::Zeros(kb.dtype, EvalShape(kb.shape, {}));
    return storage[b];
  }
  throw Error("state '" + name + "': the graph has no such state");
}

HostTensor Program::ReadStateRows(const std::string& name, int64_t first, int64_t rows) {
  const HostTensor& s = StateStorage(kp_, storage_, name);
  const int64_t axis = StateRowAxis(graph_, name);
  HostTensor out = StateRowsTensor(name, first, rows, s.shape, s.dtype, axis);
  const StateRowRuns r = RowRuns(s.shape, axis, first, rows);
  const size_t e = (size_t)BlockBytes(s.dtype);
  for (int64_t i = 0; i < r.pieces; ++i)
    std::memcpy(static_cast<char*>(out.data) + i * r.count * e,
                static_cast<const char*>(s.data) + (r.at + i * r.stride) * e, (size_t)r.count * e);
  return out;
}

void Program::WriteStateRows(const std::string& name, int64_t first, const HostTensor& rows) {
  HostTensor& s = StateStorage(kp_, storage_, name);
  const int64_t axis = StateRowAxis(graph_, name);
  CheckStateRows(name, first, rows, s.shape, s.dtype, axis);
  const StateRowRuns r = RowRuns(s.shape, axis, first, rows.shape[axis]);
  const size_t e = (size_t)BlockBytes(s.dtype);
  for (int64_t i = 0; i < r.pieces; ++i)
    std::memcpy(static_cast<char*>(s.data) + (r.at + i * r.stride) * e,
                static_cast<const char*>(rows.data) + i * r.count * e, (size_t)r.count * e);
}

KernelChoice Program::DefaultChoice(size_t k, const SymbolBindings& b) const {
  const Kernel& kn = kp_.kernels[k];
  if (!kn.gemm || unsearched_[k].form != 0 || exact_) return unsearched_[k];
  try {
    return DefaultChoiceForRows(k, kn.gemm->m.Eval(b));
  } catch (const Error&) {  // sizes that leave the rows unbound: the kernel's own default
    return unsearched_[k];
  }
}

KernelChoice Program::DefaultChoiceForRows(size_t k, int64_t m) const {
  KernelChoice c = unsearched_[k];
  const Kernel& kn = kp_.kernels[k];
  if (!kn.gemm || c.form != 0 || exact_) return c;
  // An expert GEMM runs each slab over its own rows: about m / experts of them (one each in decode).
  if (kn.gemm->index_buffer >= 0) m = std::max<int64_t>(1, m / kn.gemm->experts);
  if (const int f = DefaultForm(m, kp_.buffers[kn.gemm->w_buffer].dtype, kn.gemm->n, kn.gemm->k,
                                kn.gemm->index_buffer < 0);
      f >= 0)
    c.form = f;
  return c;
}

bool Program::RoundsActivation(size_t k, int form) const {
  const GemmTemplate& gm = *kp_.kernels[k].gemm;
  const DType wt = kp_.buffers[gm.w_buffer].dtype;
  const GemmForm& f = GemmForms()[form];
  return f.rounds && f.rounds(wt) && !(gm.a_bf16 && form == kDotPanelsForm);
}

KernelChoice Program::UnsearchedChoice(size_t k) const {
  KernelChoice c;
  const Kernel& kn = kp_.kernels[k];
  c.reduce_outer = fns_ro_[k] && PrefersReduceOuter(kn);
  // A bf16 product whose activation is bf16 already runs on bf16 dot products over packed panels: the
  // exact products of the rows form, twice as many per instruction (1.1x its speed at one row, 2.2x at 128
  // on Zen 5: bench/gemm_forms.cpp).
  const DType wt = kn.gemm ? kp_.buffers[kn.gemm->w_buffer].dtype : DType::F32;
  if (kn.gemm && kn.gemm->a_bf16 && wt == DType::BF16 && GemmForms()[kDotPanelsForm].offered(wt, kn.gemm->k))
    c.form = kDotPanelsForm;
  return c;
}

bool Program::SizesKept(size_t item, int branch, const std::vector<int64_t>& values,
                        const std::vector<bool>& bound) const {
  const std::optional<std::vector<int>>& syms = size_symbols_[item];
  const std::vector<int64_t>& seen = size_seen_[item];
  if (!syms || seen.empty() || (item < size_branch_.size() && size_branch_[item] != branch)) return false;
  for (size_t i = 0; i < syms->size(); ++i)
    if (!bound[(*syms)[i]] || seen[i] != values[(*syms)[i]]) return false;
  return true;
}

void Program::SizesEvaluated(size_t item, int branch, const std::vector<int64_t>& values) {
  std::vector<int64_t>& seen = size_seen_[item];
  seen.clear();
  if (!size_symbols_[item]) return;
  for (int s : *size_symbols_[item]) seen.push_back(values[s]);
  if (seen.empty()) seen.push_back(0);  // constant sizes: evaluated once
  if (item < size_branch_.size()) size_branch_[item] = branch;
}

void Program::PlanLaunches(const SymbolBindings& b, bool prepare) {
  launches_.resize(kp_.kernels.size());
  std::vector<int64_t> values;
  std::vector<bool> bound;
  ResolveSymbols(kp_.symbols, b, &values, &bound);
  const int threads = pool_->size();
  std::vector<int> epoch(kp_.kernels.size(), -1);            // barrier interval in which a kernel ran
  std::vector<std::pair<const GemmTemplate*, int>> to_pack;  // the forms this step reads, packed below
  int current = 0;
  auto chosen = choices_.find(BucketOf(b, choices_));
  auto choice = [&](size_t k) -> const KernelChoice* {
    return chosen != choices_.end() && k < chosen->second.size() ? &chosen->second[k] : nullptr;
  };
  // An attention kernel running its template makes the kernels of its pattern's interior unneeded.
  std::vector<bool> fused_attention(kp_.kernels.size(), false);
  for (size_t k = 0; k < kp_.kernels.size(); ++k)
    fused_attention[k] =
        kp_.kernels[k].attention && AttentionTemplateSupported() && (!choice(k) || choice(k)->use_template);
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    const Kernel& kn = kp_.kernels[k];
    KernelLaunch& st = launches_[k];
    st.skip = kn.covered_by >= 0 && fused_attention[kn.covered_by];
    const int branch = kn.gemm ? 0 : fused_attention[k] ? 1 : 2;
    if (!SizesKept(k, branch, values, bound)) {
      size_seen_[k].clear();  // until every size below has been evaluated
      st.total = 1;
      for (const Expr& e : kn.extents) st.total *= e.Eval(b);
      st.inner = kn.extents.empty() ? 1 : std::max<int64_t>(kn.extents.back().Eval(b), 1);
      int64_t& work = st.work;
      if (kn.gemm) {
        st.m = kn.gemm->m.Eval(b);
        st.a_group = kn.gemm->a_group.Eval(b);
        work = st.m * kn.gemm->n * kn.gemm->k;
      } else if (fused_attention[k]) {
        const AttentionTemplate& at = *kn.attention;
        st.attn = {at.heads_kv,      at.group,          at.head_dim,     at.seq.Eval(b),
                   at.total.Eval(b), at.offset.Eval(b), (float)at.scale, (float)at.exp_scale};
        std::tie(st.attn.q_row, st.attn.q_head) =
            std::pair(at.q_layout.row.Eval(b), at.q_layout.head.Eval(b));
        std::tie(st.attn.k_row, st.attn.k_head) =
            std::pair(at.k_layout.row.Eval(b), at.k_layout.head.Eval(b));
        std::tie(st.attn.v_row, st.attn.v_head) =
            std::pair(at.v_layout.row.Eval(b), at.v_layout.head.Eval(b));
        st.attn.mask_row = at.mask_layout.row.Eval(b);
        int i = 0;  // where each operand starts in its buffer
        for (const OperandLayout* l : {&at.q_layout, &at.k_layout, &at.v_layout, &at.mask_layout})
          st.attn_offset[i++] = l->offset.Eval(b);
        work = 2 * st.attn.heads_kv * st.attn.group * st.attn.seq * st.attn.total * st.attn.head_dim;
      } else {
        work = st.total * std::max<int64_t>(kn.reduce_size.Eval(b), 1);
      }
      SizesEvaluated(k, branch, values);
    }
    // Small kernels run on one thread: splitting them costs more in cache traffic than it saves.
    st.parallel = threads > 1 && st.work >= (kn.gemm ? 65536 : 32768);
    st.use_template = kn.gemm.has_value() || fused_attention[k];
    st.form = 0;
    st.param = 0;
    KernelChoice unsearched = kn.gemm ? DefaultChoiceForRows(k, st.m) : unsearched_[k];
    if (kn.gemm && st.a_group > 0) {  // a K-major activation: the form that reads it where it lies
      const GemmForm& panels = GemmForms()[kPanelsForm];
      const DType wt = kp_.buffers[kn.gemm->w_buffer].dtype;
      if (st.m >= MinRows(panels, wt) && panels.offered(wt, kn.gemm->k) && panels.reads_kmajor(wt))
        unsearched.form = kPanelsForm;
    }
    const KernelChoice* c = choice(k) ? choice(k) : &unsearched;
    // Exact: a decision loaded from a database or artifact made without it does not round either.
    if (exact_ && kn.gemm && c->use_template && RoundsActivation(k, c->form)) c = &unsearched;
    st.use_template = st.use_template && c->use_template;
    if (st.use_template && kn.gemm) {
      // A decided form this CPU does not offer (a database written where the table offered it) gives way to
      // the unsearched one, not to the exact rows form: a Q4_K product decided as q8k ran at a sixth of its
      // speed.
      const KernelChoice* f = PrepareForm(*kn.gemm, c->form, false) ? c : &unsearched;
      if (f == c || PrepareForm(*kn.gemm, f->form, false)) {
        st.form = f->form, st.param = f->param;
        if (prepare) to_pack.emplace_back(&*kn.gemm, f->form);
      }
    }
    st.reduce_outer = !st.use_template && c->reduce_outer && fns_ro_[k];
    if (c->threading != Threading::ByWorkSize) st.parallel = threads > 1 && c->threading == Threading::Team;
    const bool offloaded = k < offloaded_.size() && offloaded_[k];
    if (offloaded) st.parallel = false;  // thread 0 hands it over and waits
  }
  // A GEMM over many rows in chunks: the kernel that would store its activation is unneeded; the kernel
  // that reads its output is left the elements that read two threads' rows (unless it is some GEMM's
  // producer itself, then skipped).
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    launches_[k].producer = FusedProducer(k, launches_[k]);
    launches_[k].consumer = launches_[k].consumed_in = -1;
  }
  for (size_t k = 0; k < kp_.kernels.size(); ++k)
    if (launches_[k].producer >= 0) launches_[launches_[k].producer].skip = true;
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    KernelLaunch& st = launches_[k];
    bool free = consumer_[k] >= 0 && !launches_[consumer_[k]].skip;  // none of them run elsewhere already
    for (int i : consumer_first_[k]) free = free && !launches_[i].skip && launches_[i].consumed_in < 0;
    if (free) st.consumer = FusedConsumer(k, st, b);
    if (st.consumer >= 0) {
      launches_[st.consumer].consumed_in = (int)k;
      for (int i : consumer_first_[k]) launches_[i].skip = true;
    }
    FuseTouched(k);
  }
  // Barriers where data depends; a producer a GEMM runs is waited for as that GEMM, and the GEMM waits for
  // what the producer would have.
  std::vector<size_t> runs_in(kp_.kernels.size());
  for (size_t k = 0; k < kp_.kernels.size(); ++k) runs_in[k] = k;
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    if (launches_[k].producer >= 0) runs_in[launches_[k].producer] = k;
    for (int i : launches_[k].consumer >= 0 ? consumer_first_[k] : std::vector<int>{}) runs_in[i] = k;
  }
  for (size_t k = 0; k < kp_.kernels.size(); ++k) {
    KernelLaunch& st = launches_[k];
    st.barrier_before = false;
    if (st.skip) continue;
    auto wait_for = [&](const std::vector<int>& deps) {
      for (int j : deps)
        if (const size_t r = runs_in[j]; epoch[r] == current && (st.parallel || launches_[r].parallel))
          st.barrier_before = true;
    };
    wait_for(deps_[k]);
    if (st.producer >= 0) wait_for(deps_[st.producer]);
    if (st.consumer >= 0) wait_for(deps_[st.consumer]);
    for (int i : st.consumer >= 0 ? consumer_first_[k] : std::vector<int>{}) wait_for(deps_[i]);
    if (st.barrier_before) current++;
    epoch[k] = current;
  }
  PackForms(to_pack);
  int team = 0;
  for (size_t k = 0; k < launches_.size(); ++k) {
    KernelLaunch& st = launches_[k];
    if (kp_.kernels[k].gemm && st.use_template && GemmForms()[st.form].fit_team && st.parallel && !st.skip)
      st.team_slot = team++ % 2;
  }
  if (prepare) FitTeamActivations();
}

void Program::RunChunk(size_t k, int t, int threads, void* const* bufs, const int64_t* syms) {
  const Kernel& kn = kp_.kernels[k];
  const KernelLaunch& st = launches_[k];
  if (st.total <= 0 || st.skip) return;
  if (k < offloaded_.size() && offloaded_[k]) return offload_(k, bufs, syms);
  if (st.use_template && kn.attention) {
    const AttentionTemplate& at = *kn.attention;
    if (at.table_buffer >= 0) {
      const PagedKv kv{static_cast<const int32_t*>(bufs[at.table_buffer]),
                       static_cast<const int32_t*>(bufs[at.positions_buffer]), st.attn.total / at.block,
                       at.block, kp_.buffers[at.k_buffer].shape[0].value()};
      PagedAttentionF32(
          static_cast<const float*>(bufs[at.q_buffer]), static_cast<const float*>(bufs[at.k_buffer]),
          static_cast<const float*>(bufs[at.v_buffer]), static_cast<float*>(bufs[kn.out_buffer]), st.attn, kv,
          st.parallel ? t : 0, st.parallel ? threads : 1);
      return;
    }
    auto operand = [&](int buffer, int i) {
      return static_cast<const float*>(bufs[buffer]) + st.attn_offset[i];
    };
    AttentionDims dims = st.attn;
    if (at.mask_buffer >= 0) dims.mask = operand(at.mask_buffer, 3);
    CausalAttentionF32(operand(at.q_buffer, 0), operand(at.k_buffer, 1), operand(at.v_buffer, 2),
                       static_cast<float*>(bufs[kn.out_buffer]), dims, st.parallel ? t : 0,
                       st.parallel ? threads : 1);
    return;
  }
  if (st.use_template) {
    const GemmTemplate& gm = *kn.gemm;
    if (st.m <= 0) return;
    if (st.consumer >= 0 && !consumer_first_[k].empty()) {  // what its consumer reads from kernels after it
      if (t == 0)
        for (int i : consumer_first_[k]) CallGenerated(fns_[i], i, bufs, syms, 0, launches_[i].total);
      if (st.parallel) barrier_->Wait();
    }
    const GemmForm& form = GemmForms()[st.form];
    int64_t nb = 0, ne = gm.n, mb = 0, me = st.m;
    // Threads split the weight rows in whole tiles: each weight byte is read once (an expert GEMM splits
    // its routed slabs' tiles itself).
    if (st.parallel && gm.index_buffer < 0) {
      const int64_t tile = form.split_tile, tiles = (gm.n + tile - 1) / tile;
      if ((tiles < threads || ActivationDominates(st.m, gm, kp_.buffers[gm.w_buffer].dtype)) &&
          !form.fit_team) {
        // Fewer tiles than threads, or an activation far larger than the weight (a convolution's few
        // output channels over many pixels), which each thread would read whole: the activation's rows
        // are split instead, in blocks every form's row tile divides.
        std::tie(mb, me) = RowShare(st.m, t, threads);
        if (mb >= me) return;
      } else {
        nb = std::min(gm.n, tiles * t / threads * tile);
        ne = std::min(gm.n, tiles * (t + 1) / threads * tile);
      }
    }
    GemmCall call;
    call.n = gm.n;
    call.k = gm.k;
    call.w = bufs[gm.w_buffer];
    call.wt = kp_.buffers[gm.w_buffer].dtype;
    call.packed = Packed(st.form, gm.w_buffer);
    call.param = st.param;
    call.nb = nb;
    call.ne = ne;
    if (bias_[k] >= 0 && form.adds_bias && form.adds_bias(call.wt))  // then the epilogue has nothing left
      call.bias = static_cast<const float*>(bufs[bias_[k]]);
    const bool epilogue = gm.epilogue && !call.bias;
    if (st.producer >= 0 || st.consumer >= 0)
      return RunGemmInChunks(k, st.parallel ? t : 0, call, mb, me, bufs, syms);
    call.a = static_cast<const float*>(bufs[gm.a_buffer]) + mb * gm.k;
    call.m = me - mb;
    if (st.a_group > 0) {  // a K-major activation: read where it lies, or its rows gathered for this form
      call.a = static_cast<const float*>(bufs[gm.a_buffer]);
      if (form.reads_kmajor && form.reads_kmajor(call.wt)) {
        call.a_group = st.a_group;
        call.a_first = mb;
      } else {
        static thread_local std::vector<float> rows;
        rows.resize((size_t)(call.m * gm.k));
        KMajorRowsToRowMajor(call.a, st.a_group, gm.k, mb, call.m, rows.data());
        call.a = rows.data();
      }
    }
    call.y = static_cast<float*>(bufs[kn.out_buffer]) + mb * gm.n;
    if (gm.index_buffer >= 0)
      return RunExpertGemm(form, call, static_cast<const int32_t*>(bufs[gm.index_buffer]), gm.experts,
                           st.parallel ? t : 0, st.parallel ? threads : 1);
    if (st.parallel && form.fit_team) {  // the team rounds the activation once
      call.thread = t;
      call.threads = threads;
      call.barrier = barrier_.get();
      call.team_act = &team_act_[st.team_slot];
    }
    form.run(call);
    // The epilogue over this thread's columns: one call where they are whole rows (a call per row cost a
    // convolution's product of 131072 rows x 32 columns 15% of its time), else one per row.
    if (epilogue && nb == 0 && ne == gm.n)
      CallGenerated(fns_epi_[k], k, bufs, syms, mb * gm.n, me * gm.n);
    else if (epilogue)
      for (int64_t i = mb; i < me && nb < ne; ++i)
        CallGenerated(fns_epi_[k], k, bufs, syms, i * gm.n + nb, i * gm.n + ne);
    return;
  }
  if (st.consumed_in >= 0) {  // what its GEMM left: elements reading two threads' rows
    if (t == 0) RunConsumerRest(k, bufs, syms);
    return;
  }
  int64_t begin = 0, end = st.total;
  if (st.parallel) {
    int64_t rows = st.total / st.inner;
    if (rows >= threads) {  // whole rows per thread keep the inner loop long
      begin = rows * t / threads * st.inner;
      end = rows * (t + 1) / threads * st.inner;
    } else {
      begin = st.total * t / threads;
      end = st.total * (t + 1) / threads;
    }
  }
  if (begin < end) CallGenerated(st.reduce_outer ? fns_ro_[k] : fns_[k], k, bufs, syms, begin, end);
}

void Program::CallGenerated(KernelFn f, size_t k, void* const* bufs, const int64_t* syms, int64_t begin,
                            int64_t end, int moved, void* moved_to) const {
  const std::vector<int>& ops = operands_[k];
  void* few[16];
  std::vector<void*> many(ops.size() > 16 ? ops.size() : 0);
  void** args = many.empty() ? few : many.data();
  for (size_t i = 0; i < ops.size(); ++i) args[i] = ops[i] == moved ? moved_to : bufs[ops[i]];
  f(args, syms, begin, end);
}

void Program::RunMegakernel(void* const* bufs, const int64_t* syms) {
  // A step whose kernels all run on thread 0 (a small model's decode) does not wake the team.
  const bool any_parallel =
      std::any_of(launches_.begin(), launches_.end(), [](const KernelLaunch& s) { return s.parallel; });
  const int threads = any_parallel ? pool_->size() : 1;
  // One parallel region for the whole step: every thread walks the kernel list, takes its share of
  // parallel kernels, leaves serial ones to thread 0, and meets the others only where data depends.
  pool_->ParallelFor(threads, [&](int t) {
    for (size_t k = 0; k < launches_.size(); ++k) {
      if (launches_[k].barrier_before) barrier_->Wait();
      if (launches_[k].parallel || t == 0) RunChunk(k, t, threads, bufs, syms);
    }
  });
}

void Program::RunPerKernel(void* const* bufs, const int64_t* syms) {
  const int threads = pool_->size();
  for (size_t k = 0; k < launches_.size(); ++k) {
    auto t0 = Clock::now();
    if (launches_[k].parallel)
      pool_->ParallelFor(threads, [&](int t) { RunChunk(k, t, threads, bufs, syms); });
    else
      RunChunk(k, 0, threads, bufs, syms);
    if (profile_) {
      kernel_seconds_[k] += Seconds(t0);
      kernel_calls_[k]++;
    }
  }
}

std::vector<void*> Program::PrepareBuffers(const std::map<std::string, HostTensor>& inputs,
                                           const SymbolBindings& b) {
  std::vector<void*> ptrs(kp_.buffers.size(), nullptr);
  std::vector<int64_t> scratch(kp_.buffers.size(), 0);
  std::vector<int64_t> values;
  std::vector<bool> bound;
  ResolveSymbols(kp_.symbols, b, &values, &bound);
  for (size_t i = 0; i < kp_.buffers.size(); ++i) {
    const KBuffer& kb = kp_.buffers[i];
    std::vector<int64_t>& shape = shapes_[i];
    if (!SizesKept(kp_.kernels.size() + i, 0, values, bound)) {
      size_seen_[kp_.kernels.size() + i].clear();
      shape = EvalShape(kb.shape, b);
      SizesEvaluated(kp_.kernels.size() + i, 0, values);
    }
    switch (kb.kind) {
      case BufferKind::Input: ptrs[i] = inputs.at(kb.name).data; break;
      case BufferKind::Weight:
        if (!storage_[i].data) throw Error("weight '" + kb.name + "' was not bound");
        if (storage_[i].shape != shape)
          throw Error("weight '" + kb.name + "': bound shape " + storage_[i].ShapeString() +
                      ", graph expects " + ShapeStr(kb.shape));
        ptrs[i] = storage_[i].data;
        break;
      case BufferKind::State:  // persistent: a new shape starts from zeros
        if (!storage_[i].data || storage_[i].shape != shape) storage_[i] = HostTensor::Zeros(kb.dtype, shape);
        ptrs[i] = storage_[i].data;
        break;
      case BufferKind::Intermediate:
        scratch[i] = StorageBytes(
            kb.dtype, std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()));
        break;
      case BufferKind::Output: {
        // Scratch is reused across steps and grows geometrically: decode steps change `past` each time.
        int64_t bytes = StorageBytes(
            kb.dtype, std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()));
        if (!storage_[i].data || bytes > capacity_[i]) {
          int64_t cap = std::max<int64_t>(bytes, capacity_[i] + capacity_[i] / 2);
          storage_[i] = HostTensor::Zeros(DType::U8, {cap});
          capacity_[i] = cap;
        }
        ptrs[i] = storage_[i].data;
        break;
      }
    }
  }
  PlanArena(scratch);
  for (size_t i = 0; i < kp_.buffers.size(); ++i)
    if (kp_.buffers[i].kind == BufferKind::Intermediate && arena_offset_[i] >= 0)
      ptrs[i] = static_cast<uint8_t*>(arena_.data) + arena_offset_[i];
  return ptrs;
}

std::vector<HostTensor> Program::Run(const std::map<std::string, HostTensor>& inputs,
                                     const SymbolBindings& syms) {
  SymbolBindings b = BindSymbols(input_nodes_, kp_.symbols, inputs, syms);
  std::vector<int64_t> sym_values;
  for (const std::string& s : kp_.symbols) sym_values.push_back(b.at(s));
  PlanLaunches(b);  // before the buffers: the arena places them by the step's barrier intervals
  std::vector<void*> ptrs = PrepareBuffers(inputs, b);
  CheckStateWrites(graph_, kp_, b);  // here, not in the kernels
  if (megakernel_ && !profile_)
    RunMegakernel(ptrs.data(), sym_values.data());
  else
    RunPerKernel(ptrs.data(), sym_values.data());
  std::vector<HostTensor> outs;
  results_.resize(kp_.output_buffers.size());
  for (size_t o = 0; o < kp_.output_buffers.size(); ++o) {
    const int ob = kp_.output_buffers[o];
    DType src_t = kp_.buffers[ob].dtype, t = IsFloat(src_t) ? DType::F32 : DType::I32;
    auto& [memory, bytes] = results_[o];
    HostTensor r;
    r.dtype = t, r.shape = shapes_[ob];
    if (memory && memory.use_count() == 1 && bytes >= r.nbytes()) {
      r.owner = memory, r.data = memory.get();
    } else {
      r = HostTensor::Uninitialized(t, shapes_[ob]);  // every element is written below
      memory = r.owner, bytes = r.nbytes();
    }
    if (src_t == t) {
      std::memcpy(r.data, ptrs[ob], r.nbytes());
    } else if (src_t == DType::BF16) {  // widened in a loop that vectorizes: logits are large
      const uint16_t* from = static_cast<const uint16_t*>(ptrs[ob]);
      uint32_t* to = static_cast<uint32_t*>(r.data);
      for (int64_t i = 0, n = r.numel(); i < n; ++i) to[i] = (uint32_t)from[i] << 16;
    } else {
      for (int64_t i = 0; i < r.numel(); ++i) StoreFromDouble(r.data, t, i, LoadAsDouble(ptrs[ob], src_t, i));
    }
    outs.push_back(std::move(r));
  }
  return outs;
}

}  // namespace prism
