// Renders a kernel program as one C++ translation unit: an extern "C" function per distinct kernel text.
#include "codegen/cpp_renderer.h"

#include <algorithm>
#include <map>

#include "codegen/c_dialects.h"
#include "ir/error.h"
#include "ir/text_stream.h"

namespace prism {
namespace {

// The one reduction of a value that is elementwise ops (of constants and loads) over it; null when
// there is none or more than one.
const KValue* OuterReduce(const KValue& v) {
  if (v.kind == KValue::Kind::Reduce) return &v;
  if (v.kind != KValue::Kind::Op) return nullptr;
  const KValue* found = nullptr;
  for (const KValuePtr& a : v.args) {
    if (!HasReduce(a)) continue;
    if (found) return nullptr;
    found = OuterReduce(*a);
    if (!found) return nullptr;
  }
  return found;
}

// Elements between a load's reads at var = 2 and var = 3, every other variable and symbol held fixed
// (a typical size for symbols, 1 for gathered values); 0 where the index cannot be evaluated so.
int64_t StrideAlong(const KValue& load, const std::string& var, const std::vector<std::string>& others) {
  std::vector<std::string> syms;
  load.index.CollectSymbols(&syms);
  std::map<std::string, int64_t> at;
  for (const std::string& s : syms) at[s] = 64;
  for (const std::string& s : others) at[s] = 2;
  for (const GatherBinding& gb : load.gathers) at[gb.sym] = 1;
  try {
    at[var] = 2;
    const int64_t a = load.index.Eval(at);
    at[var] = 3;
    return load.index.Eval(at) - a;
  } catch (const Error&) {
    return 0;
  }
}

void CollectLoadValues(const KValuePtr& v, std::vector<const KValue*>* out) {
  if (v->kind == KValue::Kind::Load) out->push_back(v.get());
  for (const KValuePtr& a : v->args) CollectLoadValues(a, out);
}

// Each function computes output elements [begin, end): rows of all but the last loop variable,
// the last one as an inner loop the compiler vectorizes.
class CppKernelRenderer : public CKernelRenderer {
 public:
  explicit CppKernelRenderer(const KernelProgram& p) : CKernelRenderer(p, kCppDialect) {}

  // The functions rendered next are kernel k's (its own, reduce-outer, epilogue): they take its operands.
  void TakeOperandsOf(const Kernel& k) {
    slot_.clear();
    for (int b : GeneratedOperands(k)) slot_.emplace(b, slot_.size());
  }

  std::string Render(const Kernel& k) {
    if (std::string piecewise = RenderPiecewise(k); !piecewise.empty()) return piecewise;
    Reset();
    TextStream os;
    Header(k, "", os);
    size_t rank = k.vars.size();
    std::string inner = rank ? k.vars.back() : "unit";
    OuterLoop(k, os);
    std::string stmts;
    std::string value = Value(k.value, &stmts, "      ");
    const std::string at = k.out_index.Render(SymFn(&k.out_gathers, &stmts, "      "));
    // A plain expression per element vectorizes: -O2 alone does not for a loop of unknown trip count.
    if (stmts.empty()) os << "#pragma omp simd\n";
    os << "    for (int64_t " << inner << " = lo; " << inner << " < hi; ++" << inner << ") {\n";
    os << stmts;
    os << "      " << Store(k.out_buffer, at, value, k.value->dtype) << "\n";
    os << "    }\n  }\n}\n";
    return os.str();
  }

  // A sum of terms each under guards that hold or fail for a whole inner loop (a concatenation: its
  // pieces padded to the full size and added, the pieces along an outer axis): each term's inner loop
  // runs only where its guards hold, instead of every term's loads masked on every element. Dead terms
  // add exact zeros in the value tree, so skipping them changes nothing (but the sign of a zero sum).
  // "" when the kernel is not such a sum.
  std::string RenderPiecewise(const Kernel& k) {
    if (k.vars.empty() || !k.out_gathers.empty() || k.value->dtype != DType::F32 ||
        p_.buffers[k.out_buffer].dtype != DType::F32)
      return "";
    std::vector<KValuePtr> terms;  // a left-leaning chain of Adds: ((t0 + t1) + t2) + ...
    KValuePtr v = k.value;
    for (; v->kind == KValue::Kind::Op && v->op == Op::Add && v->args.size() == 2; v = v->args[0])
      terms.push_back(v->args[1]);
    terms.push_back(v);
    if (terms.size() < 2) return "";
    std::reverse(terms.begin(), terms.end());
    // A buffer of the output's size read at the output's own element could be given the output's bytes
    // (InPlaceInputs), which the terms after the first would then read overwritten: such kernels keep
    // the one loop.
    std::vector<const KValue*> loads;
    CollectLoadValues(k.value, &loads);
    const std::string at_text = k.out_index.str(), inner = k.vars.back();
    const Expr out_numel = Product(p_.buffers[k.out_buffer].shape);
    for (const KValue* l : loads)
      if (l->index.str() == at_text && Product(p_.buffers[l->buffer].shape) == out_numel) return "";
    auto uniform = [&](const KValue& g) {  // a guard that reads no inner index and no data
      std::vector<std::string> syms;
      g.index.CollectSymbols(&syms);
      return g.gathers.empty() && std::find(syms.begin(), syms.end(), inner) == syms.end();
    };
    Reset();
    TextStream os;
    Header(k, "", os);
    OuterLoop(k, os);
    const std::string at = k.out_index.Render(SymFn()), out = BufferName(k.out_buffer) + "[" + at + "]";
    auto loop = [&](const std::string& value) {
      return "#pragma omp simd\n        for (int64_t " + inner + " = lo; " + inner + " < hi; ++" + inner +
             ") " + Store(k.out_buffer, at, value, DType::F32) + "\n";
    };
    os << "    bool live = false;\n";
    for (KValuePtr t : terms) {
      std::vector<std::string> conds;
      for (; t->kind == KValue::Kind::Guard && uniform(*t); t = t->args[0])
        conds.push_back("(" + t->index.Render(SymFn()) + ")");
      if (conds.empty()) return "";
      std::string stmts;
      const std::string body = Value(t, &stmts, "        ");
      if (!stmts.empty()) return "";
      std::string all = conds[0];
      for (size_t c = 1; c < conds.size(); ++c) all += " && " + conds[c];
      os << "    if (" << all << ") {\n      if (live) {\n"
         << loop("(" + out + " + (" + body + "))") << "      } else {\n"
         << loop(body) << "      }\n      live = true;\n    }\n";
    }
    os << "    if (!live) {\n" << loop("0.0f") << "    }\n  }\n}\n";
    return os.str();
  }

  // The reduce-outer loop order, a second schedule for a reduction (under elementwise ops, a cast
  // say) whose innermost output axis is short and constant: the reduction loops run outside, the output
  // axis inside, accumulating a vector of results. Loads contiguous along the output axis then
  // vectorize (attention's P·V). Returns "" when the kernel does not qualify.
  std::string RenderReduceOuter(const Kernel& k) {
    const KValue* r = OuterReduce(*k.value);
    if (!r || k.vars.empty() || !k.out_gathers.empty() || !k.extents.back().IsConst() ||
        k.extents.back().value() > 256 || k.extents.back().value() < 2 || !IsFloat(r->dtype))
      return "";
    Reset();
    std::string body_stmts;
    std::string body = Value(r->args[0], &body_stmts, "");
    if (!body_stmts.empty()) return "";  // nested reductions: not this schedule
    const std::string iv = k.vars.back(), acc = "accv[" + iv + "]";
    ro_reduce_ = r, ro_acc_ = acc;
    std::string after_stmts;
    const std::string value = Value(k.value, &after_stmts, "");
    ro_reduce_ = nullptr;
    if (!after_stmts.empty()) return "";
    TextStream os;
    Header(k, "_ro", os);
    OuterLoop(k, os);
    os << "    float accv[" << k.extents.back().value() << "];\n";
    os << "    for (int64_t " << iv << " = lo; " << iv << " < hi; ++" << iv << ") " << acc << " = "
       << (r->op == Op::SumReduce ? "0.0f" : "(-PRISM_INF)") << ";\n";
    std::string ind = OpenLoops(r->rvars, r->rextents, "    ", os);
    os << "#pragma omp simd\n";
    os << ind << "for (int64_t " << iv << " = lo; " << iv << " < hi; ++" << iv << ") "
       << Combine(*r, acc, body) << "\n";
    CloseLoops(r->rvars.size(), ind, os);
    os << "    for (int64_t " << iv << " = lo; " << iv << " < hi; ++" << iv << ") "
       << Store(k.out_buffer, k.out_index.Render(SymFn()), value, k.value->dtype) << "\n  }\n}\n";
    return os.str();
  }

 protected:
  // While the reduce-outer epilogue renders, its reduction reads the accumulated vector.
  std::string Reduce(const KValue& v, std::string* stmts, const std::string& ind) override {
    return &v == ro_reduce_ ? ro_acc_ : LoopReduce(v, stmts, ind);
  }

 private:
  const KValue* ro_reduce_ = nullptr;
  std::string ro_acc_;
  std::map<int, size_t> slot_;  // buffer -> its place in the operands of the kernel being rendered

  // A buffer by its place among the kernel's operands: the same kernel over other buffers is the same text.
  std::string BufferName(int b) const override { return "b" + std::to_string(slot_.at(b)); }

  // Signature, symbols and the buffers this kernel touches (only those: smaller, faster to compile).
  void Header(const Kernel& k, const char* suffix, TextStream& os) {
    os << d_.kernel_head << " " << k.name << suffix
       << "(void* const* bufs, const int64_t* syms, int64_t begin, int64_t end) {\n";
    for (size_t s = 0; s < p_.symbols.size(); ++s)
      os << "  const int64_t s_" << p_.symbols[s] << " = syms[" << s << "]; (void)s_" << p_.symbols[s]
         << ";\n";
    const std::vector<int> used = GeneratedOperands(k);  // this function's (an epilogue reads fewer)
    // A kernel that maps elements may get its output in the bytes of an input (the arena writes in place),
    // so its pointers may alias: no __restrict there (its loop is vectorized by `omp simd` anyway).
    const std::string ptr = HasReduce(k.value) ? std::string("* ") + d_.restrict_kw + " " : "* ";
    for (int b : used) {
      const char* t = StorageType(p_.buffers[b].dtype);
      const char* c = b == k.out_buffer ? "" : "const ";
      os << "  " << c << t << ptr << BufferName(b) << " = (" << c << t << "*)bufs[" << slot_.at(b) << "];\n";
    }
  }

  // Walks the rows of [begin, end) over all but the last loop variable; defines lo/hi of the last.
  void OuterLoop(const Kernel& k, TextStream& os) {
    size_t rank = k.vars.size();
    std::string inner_extent = rank ? k.extents.back().Render(SymFn()) : "1";
    os << "  const int64_t inner = " << inner_extent << ";\n";
    os << "  if (inner <= 0) return;\n";
    os << "  for (int64_t o = begin / inner; o * inner < end; ++o) {\n";
    if (rank > 1) {
      os << "    int64_t rest = o;\n";
      for (size_t a = rank - 1; a-- > 0;) {
        std::string ext = k.extents[a].Render(SymFn());
        os << "    const int64_t " << k.vars[a] << " = " << (a == 0 ? "rest" : "rest % " + ext) << ";";
        if (a) os << " rest /= " << ext << ";";
        os << "\n";
      }
    }
    os << "    const int64_t lo = begin - o * inner > 0 ? begin - o * inner : 0;\n";
    os << "    const int64_t hi = end - o * inner < inner ? end - o * inner : inner;\n";
  }
};

}  // namespace

bool PrefersReduceOuter(const Kernel& k) {
  const KValue* r = OuterReduce(*k.value);
  if (!r || k.vars.empty() || r->rvars.empty()) return false;
  const KValue& v = *r;
  std::vector<const KValue*> loads;
  CollectLoadValues(v.args[0], &loads);
  std::vector<std::string> vars = k.vars;
  vars.insert(vars.end(), v.rvars.begin(), v.rvars.end());
  int strided_r = 0, strided_i = 0;
  for (const KValue* l : loads) {
    const int64_t si = StrideAlong(*l, k.vars.back(), vars), sr = StrideAlong(*l, v.rvars.back(), vars);
    strided_i += si != 0 && si != 1;
    strided_r += sr != 0 && sr != 1;
  }
  return strided_r > strided_i;
}

std::string RenderCpp(const KernelProgram& p) {
  TextStream os;
  os << CPrelude(kCppDialect);
  CppKernelRenderer r(p);
  // A function whose text another kernel's already has (the same kernel in another layer, over its own
  // buffers) is that function under a second name: compiled once.
  std::map<std::string, std::string> first;  // text with the name taken out -> the kernel it was written for
  auto emit = [&](const std::string& text, const std::string& name) {
    if (text.empty()) return;
    std::string key = text;
    const size_t at = key.find(" " + name + "(");
    if (at == std::string::npos) throw Error("internal: generated kernel " + name + " has another name");
    key.replace(at + 1, name.size(), "@");
    auto [it, fresh] = first.emplace(std::move(key), name);
    if (fresh)
      os << "\n" << text;
    else
      os << kCppDialect.kernel_head << " " << name << "(void* const*, const int64_t*, int64_t, int64_t) "
         << "__attribute__((alias(\"" << it->second << "\")));\n";
  };
  // Template-matched kernels are rendered too: the search compares both tiers.
  for (const Kernel& k : p.kernels) {
    r.TakeOperandsOf(k);
    emit(r.Render(k), k.name);
    emit(r.RenderReduceOuter(k), k.name + "_ro");
    if (k.gemm && k.gemm->epilogue) {  // what the template leaves to do once the product is stored
      Kernel e = k;
      e.name += "_epi";
      e.value = EpilogueValue(k);
      emit(r.Render(e), e.name);
    }
  }
  return os.str();
}

}  // namespace prism
