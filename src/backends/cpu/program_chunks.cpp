// A GEMM over many rows run in chunks of rows, in cache: the kernel that would store its activation (a
// convolution's im2col) computes each chunk into a thread's own buffer, so the activation never reaches
// memory; and the kernel that alone reads its output (batch norm, ReLU and pooling) runs on each chunk's
// rows right after, while they are in cache.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/program.h"

namespace prism {
namespace {

bool Mentions(const Expr& e, const std::vector<std::string>& vars) {
  std::vector<std::string> syms;
  e.CollectSymbols(&syms);
  for (const std::string& s : syms)
    if (std::find(vars.begin(), vars.end(), s) != vars.end()) return true;
  return false;
}

// e is a sum of products in which at most one factor holds the loop variables, itself such a sum.
bool AffineIn(const Expr& e, const std::vector<std::string>& vars) {
  switch (e.kind()) {
    case Expr::Kind::Const:
    case Expr::Kind::Sym: return true;
    case Expr::Kind::Add:
      return std::all_of(e.args().begin(), e.args().end(), [&](const Expr& a) { return AffineIn(a, vars); });
    case Expr::Kind::Mul: {
      int holding = 0;
      for (const Expr& a : e.args())
        if (Mentions(a, vars)) holding++;
      return holding <= 1 &&
             std::all_of(e.args().begin(), e.args().end(), [&](const Expr& a) { return AffineIn(a, vars); });
    }
    default: return !Mentions(e, vars);
  }
}

// Every load of `buffer` in v's tree (false where one is data-dependent, through a gather).
bool LoadsOf(const KValuePtr& v, int buffer, std::vector<Expr>* out) {
  if (v->kind == KValue::Kind::Load && v->buffer == buffer) {
    if (!v->gathers.empty()) return false;
    out->push_back(v->index);
  }
  for (const GatherBinding& gb : v->gathers)
    if (!LoadsOf(gb.value, buffer, out)) return false;
  for (const KValuePtr& a : v->args)
    if (!LoadsOf(a, buffer, out)) return false;
  return true;
}

// Rows of a product's activation per chunk: about 256 KiB (which stay in L2 for the product), whole row
// tiles.
int64_t ChunkRows(int64_t k) { return std::max<int64_t>(48, 65536 / k / 48 * 48); }

// p shifted back by `flat` floats: element `flat` of a buffer moved there lands at p[0].
void* MovedTo(float* p, int64_t flat) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) - flat * sizeof(float));
}

}  // namespace

int64_t Program::ConsumerPlan::Read(int64_t o, bool highest) const {
  std::vector<int64_t> at(extents.size());
  for (size_t a = extents.size(); a-- > 0;) at[a] = o % extents[a], o /= extents[a];
  int64_t out = highest ? INT64_MIN : INT64_MAX;
  for (size_t l = 0; l < base.size(); ++l) {
    int64_t i = base[l];
    for (size_t a = 0; a < at.size(); ++a) i += coef[l][a] * at[a];
    out = highest ? std::max(out, i) : std::min(out, i);
  }
  return out;
}

int64_t Program::ConsumerPlan::First(int64_t lo, int64_t hi, int64_t element, bool highest) const {
  while (lo < hi) {  // Read is non-decreasing in o
    const int64_t mid = lo + (hi - lo) / 2;
    if (Read(mid, highest) >= element)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

std::pair<int64_t, int64_t> Program::RowShare(int64_t m, int t, int threads) {
  constexpr int64_t kRowBlock = 48;  // a multiple of every form's row tile
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  return {std::min(m, blocks * t / threads * kRowBlock), std::min(m, blocks * (t + 1) / threads * kRowBlock)};
}

int Program::ProducerOf(size_t k, const std::vector<std::set<int>>& reads) const {
  const Kernel& kn = kp_.kernels[k];
  if (!kn.gemm || kn.gemm->index_buffer >= 0) return -1;
  const int a = kn.gemm->a_buffer;
  const KBuffer& ab = kp_.buffers[a];
  if (ab.kind != BufferKind::Intermediate || ab.dtype != DType::F32) return -1;
  int j = -1;
  for (size_t i = 0; i < kp_.kernels.size(); ++i) {
    if (kp_.kernels[i].out_buffer == a) {
      if (j >= 0) return -1;
      j = (int)i;
    } else if (i != k && reads[i].count(a)) {
      return -1;  // read by another kernel too: it is stored anyway
    }
  }
  if (j < 0 || j > (int)k) return -1;
  for (size_t i = j + 1; i < k; ++i)  // what it reads, as it was when it would have run
    if (reads[j].count(kp_.kernels[i].out_buffer)) return -1;
  // Element by element at its own flat index (a plain loop nest over its output: no reduction, no
  // data-dependent store), so that any range of elements can be computed into any buffer.
  const Kernel& p = kp_.kernels[j];
  if (p.gemm || p.attention || p.covered_by >= 0 || !p.out_gathers.empty() || HasReduce(p.value) || !fns_[j])
    return -1;
  return j;
}

int Program::ConsumerOf(size_t k, const std::vector<std::set<int>>& reads, std::vector<int>* first) const {
  const Kernel& kn = kp_.kernels[k];
  if (!kn.gemm || kn.gemm->index_buffer >= 0) return -1;
  const int y = kn.out_buffer;
  if (kp_.buffers[y].kind != BufferKind::Intermediate) return -1;
  int c = -1;
  for (size_t i = 0; i < kp_.kernels.size(); ++i) {
    if (i == k) continue;
    if (kp_.kernels[i].out_buffer == y) return -1;
    if (reads[i].count(y)) {
      if (c >= 0) return -1;  // read twice: each reader would need its own chunks
      c = (int)i;
    }
  }
  if (c <= (int)k) return -1;
  const Kernel& ck = kp_.kernels[c];
  if (ck.gemm || ck.attention || ck.covered_by >= 0 || !ck.out_gathers.empty() || HasReduce(ck.value) ||
      !fns_[c])
    return -1;
  const BufferKind out = kp_.buffers[ck.out_buffer].kind;
  if (out != BufferKind::Intermediate && out != BufferKind::Output) return -1;
  // It runs early, inside the product: nothing in between may touch what it writes, and what it reads from
  // a kernel in between (batch norm's scale, from the weights) must come from one that could have run before
  // the product (reading nothing written from the product on), which the product then runs first.
  for (size_t i = k + 1; i < (size_t)c; ++i) {
    const int w = kp_.kernels[i].out_buffer;
    if (w == ck.out_buffer || reads[i].count(ck.out_buffer)) return -1;
    if (!reads[c].count(w)) continue;
    const Kernel& ik = kp_.kernels[i];
    if (ik.gemm || ik.attention || ik.covered_by >= 0 || !ik.out_gathers.empty() || !fns_[i]) return -1;
    for (size_t m = k; m < i; ++m)
      if (reads[i].count(kp_.kernels[m].out_buffer)) return -1;
    first->push_back((int)i);
  }
  // Its reads of the product at affine indices of its loop variables: the rows an element needs follow.
  std::vector<Expr> loads;
  if (!LoadsOf(ck.value, y, &loads) || loads.empty()) return -1;
  for (const Expr& e : loads)
    if (!AffineIn(e, ck.vars)) return -1;
  return c;
}

int Program::FusedProducer(size_t k, const KernelLaunch& st) const {
  const int j = k < producer_.size() ? producer_[k] : -1;
  return j >= 0 && RowsInChunks(k, st) && !Offloaded((size_t)j) ? j : -1;
}

bool Program::RowsInChunks(size_t k, const KernelLaunch& st) const {
  if (!gemm_chunks_ || !st.use_template || st.skip || Offloaded(k)) return false;
  const GemmTemplate& gm = *kp_.kernels[k].gemm;
  // Only where the activation outweighs the weight: the team then splits the rows (each computed once),
  // and chunks of rows cost no second read of the weight. A team rounding the activation together (AMX)
  // works on it whole.
  return !GemmForms()[st.form].fit_team && ActivationDominates(st.m, gm, kp_.buffers[gm.w_buffer].dtype);
}

int Program::FusedConsumer(size_t k, const KernelLaunch& st, const SymbolBindings& b) {
  const int c = k < consumer_.size() ? consumer_[k] : -1;
  if (c < 0 || !RowsInChunks(k, st) || Offloaded((size_t)c)) return -1;
  const Kernel& ck = kp_.kernels[c];
  // Kept while the rows, the team and the sizes are the same (decided once per step otherwise).
  ConsumerPlan& p = consumer_plan_[k];
  std::vector<int64_t> key{st.m, st.parallel ? pool_->size() : 1};
  for (const std::string& s : kp_.symbols) {
    const auto it = b.find(s);
    key.push_back(it == b.end() ? INT64_MIN : it->second);
  }
  if (p.key == key) return p.result;
  p = ConsumerPlan{};
  p.key = std::move(key);
  SymbolBindings at = b;
  for (size_t a = 0; a < ck.vars.size(); ++a) {
    p.extents.push_back(ck.extents[a].Eval(b));
    at[ck.vars[a]] = 0;
  }
  p.total = 1;
  for (int64_t e : p.extents) p.total *= e;
  if (p.total <= 0) return -1;
  std::vector<Expr> loads;
  LoadsOf(ck.value, kp_.kernels[k].out_buffer, &loads);
  for (const Expr& e : loads) {
    p.base.push_back(e.Eval(at));
    std::vector<int64_t> coef;
    for (const std::string& v : ck.vars) {
      at[v] = 1;
      coef.push_back(e.Eval(at) - p.base.back());
      at[v] = 0;
    }
    // Non-decreasing in the element's flat index: each variable's step outweighs all the inner ones' span.
    int64_t inner = 0;
    for (size_t a = coef.size(); a-- > 0;) {
      if (coef[a] < inner) return -1;
      inner += coef[a] * (p.extents[a] - 1);
    }
    p.coef.push_back(std::move(coef));
  }
  // Each thread's rows of the product; the consumer's elements reading only those rows it computes inside
  // the product, the rest (elements reading two threads' rows) the consumer's own launch does.
  const int threads = st.parallel ? pool_->size() : 1;
  const int64_t n = kp_.kernels[k].gemm->n;
  for (int t = 0; t < threads; ++t) {
    const auto [mb, me] = RowShare(st.m, t, threads);
    const int64_t lo = p.First(0, p.total, mb * n, false);
    p.inside.push_back({lo, mb < me ? std::max(lo, p.First(lo, p.total, me * n, true)) : lo});
  }
  // The rows one element reads, at most (its reads' spread is largest at a corner of its loop box): the rows
  // a thread's buffer keeps behind its next chunk for elements not complete yet.
  int64_t spread = 0;
  if (ck.vars.size() <= 12)
    for (int64_t corner = 0; corner < (int64_t{1} << ck.vars.size()); ++corner) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (size_t l = 0; l < p.base.size(); ++l) {
        int64_t i = p.base[l];
        for (size_t a = 0; a < ck.vars.size(); ++a)
          i += (corner >> a & 1) ? p.coef[l][a] * (p.extents[a] - 1) : 0;
        lo = std::min(lo, i), hi = std::max(hi, i);
      }
      spread = std::max(spread, hi / n - lo / n + 1);
    }
  p.local = ck.vars.size() <= 12 && spread <= ChunkRows(kp_.kernels[k].gemm->k);
  // Thread t's rows the leftovers read: below the highest row an element before its inside ones reads, and
  // from the lowest one an element after them reads (both monotone in the element).
  for (int t = 0; t < threads; ++t) {
    const auto [mb, me] = RowShare(st.m, t, threads);
    const auto [lo, hi] = p.inside[t];
    if (lo >= hi) {
      p.stored.push_back({me, me});
      continue;
    }
    const int64_t below = lo > 0 ? std::clamp(p.Read(lo - 1, true) / n + 1, mb, me) : mb;
    const int64_t from = hi < p.total ? std::clamp(p.Read(hi, false) / n, mb, me) : me;
    p.stored.push_back({below, std::max(below, from)});
  }
  return p.result = c;
}

int Program::ComputedInside(size_t k) const {
  for (size_t i = 0; i < launches_.size(); ++i) {
    const KernelLaunch& st = launches_[i];
    const std::vector<int>& first = consumer_first_[i];
    if (st.producer == (int)k || st.consumer == (int)k ||
        (st.consumer >= 0 && std::find(first.begin(), first.end(), (int)k) != first.end()))
      return (int)i;
  }
  return -1;
}

int64_t Program::StoredRows(size_t k) const {
  const KernelLaunch& st = launches_.at(k);
  if (st.consumer < 0 || !consumer_plan_[k].local || st.whole_output) return st.m;
  const ConsumerPlan& p = consumer_plan_[k];
  int64_t rows = 0;
  for (size_t t = 0; t < p.stored.size(); ++t) {
    const auto [mb, me] = RowShare(st.m, (int)t, (int)p.stored.size());
    rows += p.stored[t].first - mb + me - p.stored[t].second;
  }
  return rows;
}

void Program::FuseTouched(size_t k) {
  const KernelLaunch& st = launches_[k];
  if (st.producer < 0 && st.consumer < 0) return;
  std::set<int>& t = fused_touched_[k];
  t = touched_[k];
  if (st.producer >= 0) {  // what the producer reads, not the activation's buffer (which gets no bytes)
    t.insert(touched_[st.producer].begin(), touched_[st.producer].end());
    t.erase(kp_.kernels[k].gemm->a_buffer);
  }
  if (st.consumer >= 0) t.insert(touched_[st.consumer].begin(), touched_[st.consumer].end());
  for (int i : st.consumer >= 0 ? consumer_first_[k] : std::vector<int>{})
    t.insert(touched_[i].begin(), touched_[i].end());
}

void Program::RunGemmInChunks(size_t k, int t, GemmCall call, int64_t mb, int64_t me, void* const* bufs,
                              const int64_t* syms) {
  const Kernel& kn = kp_.kernels[k];
  const GemmTemplate& gm = *kn.gemm;
  const KernelLaunch& st = launches_[k];
  const GemmForm& form = GemmForms()[st.form];
  const bool kmajor_read = form.reads_kmajor && form.reads_kmajor(call.wt);
  // The producer's elements [flat, flat + count) into dst: its generated function over that range, its
  // output operand moved so that element `flat` lands at dst[0].
  auto produce = [&](int64_t flat, int64_t count, float* dst) {
    const size_t j = (size_t)st.producer;
    CallGenerated(fns_[j], j, bufs, syms, flat, flat + count, kp_.kernels[j].out_buffer, MovedTo(dst, flat));
  };
  // Chunks of ChunkRows; a K-major activation's chunk stays within one group (an image: K rows of `group`
  // pixels each).
  const int64_t K = gm.k, n = gm.n, group = st.a_group;
  const int64_t chunk = ChunkRows(K);
  static thread_local std::vector<float> act, rows, out;
  if (st.producer >= 0) act.resize((size_t)(chunk * K));
  const float* stored = static_cast<const float*>(bufs[gm.a_buffer]);
  float* y = static_cast<float*>(bufs[kn.out_buffer]);
  const ConsumerPlan* cp = st.consumer >= 0 ? &consumer_plan_[k] : nullptr;
  int64_t done = cp ? cp->inside[t].first : 0;
  // The output in `out` (rows [base, r1): the chunk's, behind those an element not complete yet reads),
  // stored only where the leftovers read it; or in place.
  const bool local = cp && cp->local && !st.whole_output;
  const auto [below, from] = local ? cp->stored[t] : std::pair<int64_t, int64_t>{me, me};
  int64_t base = mb;
  for (int64_t r0 = mb; r0 < me;) {
    const int64_t r1 = std::min(group > 0 ? (r0 / group + 1) * group : me, std::min(me, r0 + chunk)),
                  m = r1 - r0;
    if (local) out.resize((size_t)((r1 - base) * n));
    float* yc = local ? out.data() + (r0 - base) * n : y + r0 * n;
    call.m = m;
    call.y = yc;
    call.a_group = call.a_first = 0;
    if (st.producer < 0) {  // the activation as stored
      call.a = stored + r0 * K;
      if (group > 0) {
        call.a = stored;
        call.a_group = group;
        call.a_first = r0;
      }
    } else if (group > 0) {  // K rows of m values each: a K-major chunk of one group
      for (int64_t kk = 0, g = r0 / group, p = r0 % group; kk < K; ++kk)
        produce((g * K + kk) * group + p, m, act.data() + kk * m);
      call.a = act.data();
      call.a_group = m;
    } else {
      produce(r0 * K, m * K, act.data());
      call.a = act.data();
    }
    if (call.a_group > 0 && !kmajor_read) {  // gathered into rows for a form that reads only those
      rows.resize((size_t)(m * K));
      KMajorRowsToRowMajor(call.a, call.a_group, K, call.a_first, m, rows.data());
      call.a = rows.data();
      call.a_group = call.a_first = 0;
    }
    form.run(call);
    const int moved = local ? kn.out_buffer : -1;
    void* moved_to = MovedTo(yc, r0 * n);
    if (gm.epilogue && !call.bias) CallGenerated(fns_epi_[k], k, bufs, syms, r0 * n, r1 * n, moved, moved_to);
    if (local)  // the rows the leftovers read
      for (const auto& [s0, s1] : {std::pair{r0, std::min(r1, below)}, std::pair{std::max(r0, from), r1}})
        if (s0 < s1) std::copy(yc + (s0 - r0) * n, yc + (s1 - r0) * n, y + s0 * n);
    if (cp) {  // the consumer's elements whose rows are all done
      const int64_t upto = cp->First(done, cp->inside[t].second, r1 * n, true);
      if (upto > done) CallGenerated(fns_[st.consumer], st.consumer, bufs, syms, done, upto, moved, moved_to);
      done = std::max(done, upto);
    }
    if (local) {  // keep the rows elements not complete yet read
      const int64_t keep = done < cp->inside[t].second ? std::clamp(cp->Read(done, false) / n, base, r1) : r1;
      std::copy(out.begin() + (keep - base) * n, out.begin() + (r1 - base) * n, out.begin());
      base = keep;
    }
    r0 = r1;
  }
}

void Program::RunConsumerRest(size_t c, void* const* bufs, const int64_t* syms) {
  const ConsumerPlan& p = consumer_plan_[launches_[c].consumed_in];
  int64_t from = 0;
  for (const auto& [lo, hi] : p.inside) {
    if (from < lo) CallGenerated(fns_[c], c, bufs, syms, from, lo);
    from = std::max(from, hi);
  }
  if (from < p.total) CallGenerated(fns_[c], c, bufs, syms, from, p.total);
}

}  // namespace prism
