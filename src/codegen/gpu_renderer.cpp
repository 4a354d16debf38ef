// Renders a kernel program as CUDA C or OpenCL C: the C-style renderer's GPU dialects, mapped onto threads.
//
// Mapping. Each kernel's loop nest is flattened; element e decomposes into the loop variables
// by div/mod of the extents (innermost fastest, so neighbouring threads touch neighbouring
// outputs). Per-thread kernels give each thread elements gid, gid + grid, ... (a grid-stride
// loop, so the grid can be capped). Cooperative kernels give each work-group elements
// group, group + groups, ...; for each, the threads of the group stride over the flattened
// reduction space, then combine their partial results by a tree in local memory. Reductions
// nested inside a cooperative one stay per-thread loops.
#include "codegen/gpu_renderer.h"

#include <algorithm>
#include <map>

#include "codegen/c_dialects.h"
#include "ir/error.h"
#include "ir/text_stream.h"

namespace prism {
namespace {

int FloorPow2(int v) {
  int p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

void CollectBuffers(const KValuePtr& v, std::vector<int>* out) {
  if (v->kind == KValue::Kind::Load) {
    bool seen = false;
    for (int b : *out) seen = seen || b == v->buffer;
    if (!seen) out->push_back(v->buffer);
  }
  for (const GatherBinding& gb : v->gathers) CollectBuffers(gb.value, out);
  for (const KValuePtr& a : v->args) CollectBuffers(a, out);
}

// Every symbol an index, guard, gather limit or reduction extent of the value mentions.
void CollectSymbols(const KValuePtr& v, std::vector<std::string>* out) {
  if (v->kind == KValue::Kind::Load || v->kind == KValue::Kind::Index || v->kind == KValue::Kind::Guard)
    v->index.CollectSymbols(out);
  for (const GatherBinding& gb : v->gathers) {
    gb.limit.CollectSymbols(out);
    CollectSymbols(gb.value, out);
  }
  for (const Expr& e : v->rextents) e.CollectSymbols(out);
  for (const KValuePtr& a : v->args) CollectSymbols(a, out);
}

// Smallest extent among the reductions that are not nested in another reduction (0: none);
// -1 when one of them is symbolic.
int64_t OuterReduceExtent(const KValuePtr& v) {
  if (v->kind == KValue::Kind::Reduce) {
    Expr n = Product(v->rextents);
    return n.IsConst() ? n.value() : -1;
  }
  int64_t best = 0;
  auto merge = [&](int64_t x) {
    if (x == 0) return;
    if (best == 0 || x == -1 || (best != -1 && x < best)) best = x;
  };
  for (const GatherBinding& gb : v->gathers) merge(OuterReduceExtent(gb.value));
  for (const KValuePtr& a : v->args) merge(OuterReduceExtent(a));
  return best;
}

bool ChooseCooperative(const Kernel& k, const GpuSchedule& s) {
  if (!HasReduce(k.value)) return false;
  switch (s.reduce) {
    case GpuSchedule::Reduce::Cooperative: return true;
    case GpuSchedule::Reduce::PerThread: return false;
    case GpuSchedule::Reduce::Auto: break;
  }
  int64_t r = OuterReduceExtent(k.value);
  return r == -1 || r >= s.cooperative_min;
}

class GpuKernelRenderer : public CKernelRenderer {
 public:
  using CKernelRenderer::CKernelRenderer;

  // Renders the function body and signature after its name: "(args) { ... }".
  std::string Render(const Kernel& k, const GpuSchedule& s, GpuKernelPlan* plan) {
    Reset();
    need_redf_ = need_redi_ = false;
    plan->cooperative = coop_ = ChooseCooperative(k, s);
    threads_ = std::max(s.threads, 1);
    if (coop_) {
      threads_ = FloorPow2(threads_);
      // Auto: no more threads than a short constant reduction can use (down to a warp).
      int64_t r = OuterReduceExtent(k.value);
      if (s.reduce == GpuSchedule::Reduce::Auto && r > 0)
        while (threads_ > 32 && threads_ / 2 >= r) threads_ /= 2;
    }
    plan->threads = threads_;
    plan->max_groups = std::max<int64_t>(s.max_groups, 1);
    used_.clear();
    k.out_index.CollectSymbols(&used_);
    CollectSymbols(k.value, &used_);
    plan->buffers = {k.out_buffer};
    CollectBuffers(k.value, &plan->buffers);
    for (const GatherBinding& gb : k.out_gathers) {
      gb.limit.CollectSymbols(&used_);
      CollectSymbols(gb.value, &used_);
      CollectBuffers(gb.value, &plan->buffers);
    }
    arg_.clear();
    for (size_t a = 0; a < plan->buffers.size(); ++a) arg_[plan->buffers[a]] = "a" + std::to_string(a);

    TextStream sig;
    sig << "(";
    for (size_t a = 0; a < plan->buffers.size(); ++a) {
      int b = plan->buffers[a];
      sig << (a ? ", " : "") << d_.global << (a == 0 ? "" : "const ") << StorageType(p_.buffers[b].dtype)
          << "* " << d_.restrict_kw << " " << BufferName(b);
    }
    for (const std::string& sym : p_.symbols) sig << ", const int64_t s_" << sym;
    sig << ")";

    TextStream body;
    std::string ind = "    ";
    body << "  const int64_t total = " << Product(k.extents).Render(SymFn()) << ";\n";
    if (coop_) {
      body << "  const int64_t prism_lid = " << d_.group.local_id << ";\n";
      body << "  for (int64_t e = " << d_.group.group_id << "; e < total; e += " << d_.group.num_groups
           << ") {\n";
    } else {
      body << "  const int64_t stride = " << d_.group.num_groups << " * " << threads_ << ";\n";
      body << "  for (int64_t e = " << d_.group.group_id << " * " << threads_ << " + " << d_.group.local_id
           << "; e < total; e += stride) {\n";
    }
    Unravel("e", k.vars, k.extents, ind, body);
    std::string stmts;
    std::string value = Value(k.value, &stmts, ind);
    const std::string at = k.out_index.Render(SymFn(&k.out_gathers, &stmts, ind));
    body << stmts;
    std::string store = Store(k.out_buffer, at, value, k.value->dtype);
    body << ind << (coop_ ? "if (prism_lid == 0) " : "") << store << "\n";
    body << "  }\n}\n";

    TextStream os;
    os << sig.str() << " {\n";
    if (need_redf_) os << "  " << d_.group.shared << "float prism_redf[" << threads_ << "];\n";
    if (need_redi_) os << "  " << d_.group.shared << "int32_t prism_redi[" << threads_ << "];\n";
    for (const std::string& sym : p_.symbols) os << "  (void)s_" << sym << ";\n";
    os << body.str();
    return os.str();
  }

 private:
  std::string BufferName(int b) const override { return arg_.at(b); }

  std::string Reduce(const KValue& v, std::string* stmts, const std::string& ind) override {
    return coop_ && depth() == 0 ? CooperativeReduce(v, stmts, ind) : LoopReduce(v, stmts, ind);
  }

  bool Used(const std::string& var) const {
    return std::find(used_.begin(), used_.end(), var) != used_.end();
  }

  // Decomposes a flat index into variables (the last one fastest); unused ones are skipped.
  void Unravel(const std::string& flat, const std::vector<std::string>& vars,
               const std::vector<Expr>& extents, const std::string& ind, TextStream& os) {
    size_t first = 0;  // outermost variable the code needs
    while (first < vars.size() && !Used(vars[first])) ++first;
    if (first == vars.size()) return;
    std::string rest = "rest_" + flat;
    os << ind << "int64_t " << rest << " = " << flat << ";\n";
    for (size_t a = vars.size(); a-- > first;) {
      std::string ext = extents[a].Render(SymFn());
      bool last = a == first;
      if (!Used(vars[a])) {
        if (!extents[a].IsConst(1)) os << ind << rest << " /= " << ext << ";\n";
        continue;
      }
      if (a == 0 || extents[a].IsConst(1)) {  // the outermost needs no modulo; size-1 loops are 0
        os << ind << "const int64_t " << vars[a] << " = " << (extents[a].IsConst(1) ? "0" : rest) << ";\n";
        if (!extents[a].IsConst(1) && !last) os << ind << rest << " /= " << ext << ";\n";
        continue;
      }
      os << ind << "const int64_t " << vars[a] << " = " << rest << " % " << ext << ";";
      if (!last) os << " " << rest << " /= " << ext << ";";
      os << "\n";
    }
  }

  // Threads of the group stride over the flattened reduction space, then a tree in local memory.
  // Every thread of the group runs this code for the same element, so the barriers are uniform.
  std::string CooperativeReduce(const KValue& v, std::string* stmts, const std::string& ind) {
    std::string id = NewAcc();
    std::string acc = "acc" + id, flat = "rl" + id, count = "rn" + id;
    bool f = IsFloat(v.dtype);
    std::string red = f ? "prism_redf" : "prism_redi";
    (f ? need_redf_ : need_redi_) = true;
    std::string in = ind + "  ";
    TextStream os;
    os << ind << ComputeCType(v.dtype) << " " << acc << " = " << Init(v) << ";\n";
    os << ind << "const int64_t " << count << " = " << Product(v.rextents).Render(SymFn()) << ";\n";
    os << ind << "for (int64_t " << flat << " = prism_lid; " << flat << " < " << count << "; " << flat
       << " += " << threads_ << ") {\n";
    Unravel(flat, v.rvars, v.rextents, in, os);
    std::string body_stmts;
    std::string body = Body(v, &body_stmts, in);
    os << body_stmts << in << Combine(v, acc, body) << "\n";
    os << ind << "}\n";
    os << ind << red << "[prism_lid] = " << acc << ";\n";
    os << ind << d_.group.barrier << "\n";
    os << ind << "for (int prism_s = " << threads_ / 2 << "; prism_s > 0; prism_s >>= 1) {\n";
    os << in << "if (prism_lid < prism_s) " << Combine(v, red + "[prism_lid]", red + "[prism_lid + prism_s]")
       << "\n";
    os << in << d_.group.barrier << "\n";
    os << ind << "}\n";
    os << ind << acc << " = " << red << "[0];\n";
    os << ind << d_.group.barrier << "  // the scratch is reused by the next reduction or element\n";
    *stmts += os.str();
    return acc;
  }

  std::map<int, std::string> arg_;  // buffer index -> argument name
  std::vector<std::string> used_;   // symbols the kernel's expressions mention
  int threads_ = 1;
  bool coop_ = false, need_redf_ = false, need_redi_ = false;
};

const CDialect& DialectOf(GpuDialect d) { return d == GpuDialect::Cuda ? kCudaDialect : kOpenClDialect; }

}  // namespace

std::string_view GpuDialectName(GpuDialect d) { return d == GpuDialect::Cuda ? "cuda" : "opencl"; }

std::string GpuRenderer::Prelude() const { return CPrelude(DialectOf(dialect_)); }

GpuSource GpuRenderer::Render(const KernelProgram& p, const GpuSchedule& schedule,
                              const std::string& prefix) const {
  return Render(p, std::vector<GpuSchedule>(p.kernels.size(), schedule), prefix);
}

GpuSource GpuRenderer::Render(const KernelProgram& p, const std::vector<GpuSchedule>& schedules,
                              const std::string& prefix) const {
  if (schedules.size() != p.kernels.size())
    throw Error("gpu renderer: " + std::to_string(schedules.size()) + " schedules for " +
                std::to_string(p.kernels.size()) + " kernels");
  const CDialect& d = DialectOf(dialect_);
  GpuSource out;
  out.dialect = dialect_;
  TextStream os;
  GpuKernelRenderer r(p, d);
  std::map<std::string, std::string> seen;  // rendered function -> its name
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    GpuKernelPlan plan;
    std::string body = r.Render(k, schedules[i], &plan);
    // Attributes carry the group size: it is fixed by the scratch arrays and lets compilers specialize.
    std::string head = FillPlaceholders(d.kernel_head, {{"${threads}", std::to_string(plan.threads)}});
    std::string key = head + body;
    auto it = seen.find(key);
    if (it != seen.end()) {
      plan.function = it->second;
    } else {
      plan.function = prefix + k.name;
      seen[key] = plan.function;
      out.functions.push_back(plan.function);
      os << "\n" << head << " " << plan.function << body;
    }
    out.kernels.push_back(std::move(plan));
  }
  out.functions_source = os.str();
  out.source = Prelude() + out.functions_source;
  return out;
}

GpuLaunchDims GpuLaunch(const Kernel& k, const GpuKernelPlan& plan, const SymbolBindings& b) {
  GpuLaunchDims d;
  d.elements = 1;
  for (const Expr& e : k.extents) d.elements *= e.Eval(b);
  d.threads = plan.threads;
  if (d.elements <= 0) {
    d.elements = 0;
    return d;
  }
  int64_t wanted = plan.cooperative ? d.elements : (d.elements + plan.threads - 1) / plan.threads;
  d.groups = std::min(wanted, plan.max_groups);
  return d;
}

}  // namespace prism
