// Reference evaluation of single kernel outputs from the kernel IR, in double: checks search candidates
// (and the search's random inputs made as a step's are where random values would race).
#include "compiler/kernel_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ir/error.h"

namespace prism {
namespace {

class Evaluator {
 public:
  Evaluator(const KernelProgram& p, void* const* bufs, const SymbolBindings& syms)
      : p_(p), bufs_(bufs), env_(syms) {}

  double Value(const KValuePtr& v) {
    switch (v->kind) {
      case KValue::Kind::Load: {
        BindGathers(v->gathers);
        int64_t i = v->index.Eval(env_);
        return LoadAsDouble(bufs_[v->buffer], p_.buffers[v->buffer].dtype, i);
      }
      case KValue::Kind::Const: return v->constant;
      case KValue::Kind::Index: BindGathers(v->gathers); return (double)v->index.Eval(env_);
      case KValue::Kind::Guard: BindGathers(v->gathers); return v->index.Eval(env_) ? Value(v->args[0]) : 0.0;
      case KValue::Kind::Reduce: return Reduce(*v, 0);
      case KValue::Kind::Op: return OpValue(*v);
    }
    return 0;
  }

  SymbolBindings& env() { return env_; }

  void BindGathers(const std::vector<GatherBinding>& gathers) {
    for (const GatherBinding& gb : gathers) {
      int64_t limit = gb.limit.Eval(env_);
      env_[gb.sym] = std::clamp((int64_t)Value(gb.value), int64_t{0}, limit - 1);
    }
  }

 private:
  double Reduce(const KValue& v, size_t axis) {
    if (axis == v.rvars.size()) return Value(v.args[0]);
    bool is_sum = v.op == Op::SumReduce;
    double acc = is_sum ? 0.0 : -std::numeric_limits<double>::infinity();
    int64_t n = v.rextents[axis].Eval(env_);
    for (int64_t r = 0; r < n; ++r) {
      env_[v.rvars[axis]] = r;
      double x = Reduce(v, axis + 1);
      acc = is_sum ? acc + x : (std::isnan(x) || std::isnan(acc) ? NAN : std::max(acc, x));
    }
    return acc;
  }

  double OpValue(const KValue& v) {
    std::vector<double> a;
    for (const auto& x : v.args) a.push_back(Value(x));
    switch (v.op) {
      case Op::Exp2:
      case Op::Log2:
      case Op::Sin:
      case Op::Sqrt:
      case Op::Recip: return ApplyUnary(v.op, a[0]);
      case Op::Cast: return RoundToDType(a[0], v.dtype);
      case Op::Add:
      case Op::Mul:
      case Op::Mod:
      case Op::LessThan:
      case Op::Max: return ApplyBinary(v.op, a[0], a[1]);
      case Op::Where: return a[0] != 0 ? a[1] : a[2];
      default: throw Error("kernel evaluator: unsupported op " + std::string(OpName(v.op)));
    }
  }

  const KernelProgram& p_;
  void* const* bufs_;
  SymbolBindings env_;
};

}  // namespace

KernelElement EvalKernelElement(const KernelProgram& p, const Kernel& k, int64_t flat, void* const* bufs,
                                const SymbolBindings& syms) {
  Evaluator ev(p, bufs, syms);
  std::vector<int64_t> ext;
  for (const Expr& e : k.extents) ext.push_back(e.Eval(syms));
  for (size_t a = ext.size(); a-- > 0;) {
    ev.env()[k.vars[a]] = ext[a] ? flat % ext[a] : 0;
    flat = ext[a] ? flat / ext[a] : 0;
  }
  KernelElement out;
  ev.BindGathers(k.out_gathers);
  out.out_index = k.out_index.Eval(ev.env());
  out.value = ev.Value(k.value);
  if (k.gemm && k.gemm->epilogue && k.value->op == Op::Mul)
    for (const KValuePtr& a : k.value->args)
      if (a->kind != KValue::Kind::Reduce) out.product_factor = std::fabs(ev.Value(a));
  return out;
}

void DistinctScatterRows(const KernelProgram& p, const Kernel& k, const SymbolBindings& syms,
                         const std::function<std::pair<void*, int64_t>(int)>& buffer, std::mt19937& rng) {
  for (const GatherBinding& g : k.out_gathers) {
    if (g.value->kind != KValue::Kind::Load || p.buffers[g.value->buffer].dtype != DType::I32) continue;
    const auto [data, n] = buffer(g.value->buffer);
    std::vector<int32_t> rows((size_t)g.limit.Eval(syms));
    if ((int64_t)rows.size() < n) continue;  // fewer rows than writes: no permutation covers them
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    std::copy_n(rows.begin(), n, static_cast<int32_t*>(data));
  }
}

}  // namespace prism
