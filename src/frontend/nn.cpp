// High-level neural-network ops, each a composition of primitives (no new IR ops).
#include "frontend/nn.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "ir/error.h"

namespace prism {

Tensor Matmul(const Tensor& a, const Tensor& b) {
  if (a.rank() < 2 || b.rank() < 2)
    throw Error("matmul: both operands need at least 2 axes, got " + a.graph()->Describe(a.id()) + " and " +
                b.graph()->Describe(b.id()));
  if (a.dim(-1) != b.dim(-2))
    throw Error("matmul: inner sizes differ, " + a.graph()->Describe(a.id()) + " x " + b.graph()->Describe(b.id()));
  // a [..., M, 1, K] * b^T [..., 1, N, K], summed over K: the reduction runs along contiguous K.
  Tensor bt = b.transpose(-1, -2);
  Tensor prod = a.unsqueeze(-2) * bt.unsqueeze(-3);
  return prod.sum({-1}, false);
}

Tensor Linear(const Tensor& x, const Tensor& weight) {
  if (weight.rank() != 2 || x.dim(-1) != weight.dim(1))
    throw Error("linear: input " + x.graph()->Describe(x.id()) + " does not match weight " +
                weight.graph()->Describe(weight.id()));
  Tensor prod = x.unsqueeze(-2) * weight;  // [..., 1, K] * [N, K] -> [..., N, K]
  return prod.sum({-1}, false);
}

Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return Linear(x, weight) + bias; }

Tensor Softmax(const Tensor& x, int64_t axis) {
  Tensor e = (x - x.max({axis})).exp();
  return e / e.sum({axis});
}

Tensor LogSoftmax(const Tensor& x, int64_t axis) {
  Tensor shifted = x - x.max({axis});
  return shifted - shifted.exp().sum({axis}).log();
}

Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps) {
  Tensor xf = x.cast(DType::F32);
  Tensor y = xf * (xf.square().mean({-1}) + eps).rsqrt();
  return (y * weight).cast(x.dtype());
}

static Tensor Normalized(const Tensor& x, double eps) {
  Tensor xf = x.cast(DType::F32);
  Tensor d = xf - xf.mean({-1});
  return d * (d.square().mean({-1}) + eps).rsqrt();
}

Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return (Normalized(x, eps) * weight + bias).cast(x.dtype());
}

Tensor LayerNorm(const Tensor& x, const Tensor& weight, double eps) {
  return (Normalized(x, eps) * weight).cast(x.dtype());
}

Tensor Silu(const Tensor& x) { return x * x.sigmoid(); }

Tensor GeluTanh(const Tensor& x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh());
}

Tensor Erf(const Tensor& x) {
  // erf(x) = sign(x) (1 - poly(t) exp(-x^2)), t = 1 / (1 + p|x|)
  const double p = 0.3275911, a1 = 0.254829592, a2 = -0.284496736, a3 = 1.421413741, a4 = -1.453152027,
               a5 = 1.061405429;
  Tensor ax = x.abs();
  Tensor t = (1.0 + p * ax).recip();
  Tensor poly = t * (a1 + t * (a2 + t * (a3 + t * (a4 + t * a5))));
  Tensor y = 1.0 - poly * (-(ax * ax)).exp();
  Tensor sign = Where(Less(x, Full(x.graph(), 0.0, x.shape(), x.dtype())), Full(x.graph(), -1.0, x.shape(), x.dtype()),
                      Full(x.graph(), 1.0, x.shape(), x.dtype()));
  return sign * y;
}

Tensor GeluErf(const Tensor& x) { return 0.5 * x * (1.0 + Erf(x * (1.0 / std::numbers::sqrt2))); }

Tensor Concat(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw Error("concat: no tensors");
  axis = xs[0].NormAxis(axis);
  Expr total(0);
  for (const Tensor& x : xs) {
    if (x.rank() != xs[0].rank()) throw Error("concat: rank mismatch with " + x.graph()->Describe(x.id()));
    for (int64_t i = 0; i < x.rank(); ++i)
      if (i != axis && x.shape()[i] != xs[0].shape()[i])
        throw Error("concat: " + x.graph()->Describe(x.id()) + " differs from " +
                    xs[0].graph()->Describe(xs[0].id()) + " on axis " + std::to_string(i));
    total = total + x.shape()[axis];
  }
  // Each piece is zero-padded to the full extent at its place; the sum is the concatenation.
  Expr before(0);
  Tensor out;
  for (const Tensor& x : xs) {
    Tensor p = x.pad(axis, before, total - before - x.shape()[axis]);
    out = out.graph() ? out + p : p;
    before = before + x.shape()[axis];
  }
  return out;
}

Tensor Argmax(const Tensor& x, int64_t axis, bool keepdim) {
  axis = x.NormAxis(axis);
  Graph* g = x.graph();
  Expr n = x.shape()[axis];
  Tensor m = x.max({axis});
  Tensor idx{g, g->Iota(x.shape(), axis, DType::F32)};
  // Non-maximal positions get a large index; the smallest remaining index is the first maximum.
  Tensor big = Full(g, 1e30, x.shape(), DType::F32);
  Tensor cand = Where(Less(x, BroadcastTo(m, x.shape())), big, idx);
  Tensor first = -((-cand).max({axis}, keepdim));
  return first.cast(DType::I32);
}

TopKResult TopK(const Tensor& x, int64_t k) {
  const Expr n = x.dim(-1);
  if (k <= 0 || (n.IsConst() && k > n.value()))
    throw Error("top-k: k = " + std::to_string(k) + " does not fit " + x.graph()->Describe(x.id()));
  Graph* g = x.graph();
  Tensor iota{g, g->Iota(x.shape(), x.rank() - 1, DType::I32)};
  Tensor lowest = Full(g, -std::numeric_limits<float>::max(), x.shape(), x.dtype());
  Tensor rest = x;
  std::vector<Tensor> values, indices;
  for (int64_t j = 0; j < k; ++j) {
    values.push_back(rest.max({-1}));
    indices.push_back(Argmax(rest, -1, true));
    // The chosen position drops out of the running (every other one keeps its value).
    Tensor at = BroadcastTo(indices.back(), x.shape());
    rest = Where(Less(iota, at), rest, Where(Less(at, iota), rest, lowest));
  }
  return {Concat(values, -1), Concat(indices, -1)};
}

Tensor ExpertLinear(const Tensor& x, const Tensor& experts, const Tensor& expert) {
  if (experts.rank() != 3 || x.rank() != 2 || x.dim(1) != experts.dim(2) || expert.rank() != 1 ||
      expert.dim(0) != x.dim(0))
    throw Error("expert linear: input " + x.graph()->Describe(x.id()) + " and rows' experts " +
                x.graph()->Describe(expert.id()) + " do not match experts " +
                x.graph()->Describe(experts.id()));
  const std::vector<Expr> shape = {x.dim(0), experts.dim(1), experts.dim(2)};
  Graph* g = x.graph();
  Tensor at = expert.reshape({x.dim(0), Expr(1), Expr(1)}).expand(shape);
  Tensor rows{g, g->Gather(experts.id(), at.id(), 0)};  // [R, N, K]: row r's expert
  return (x.unsqueeze(-2) * rows).sum({-1}, false);
}

Tensor Embedding(const Tensor& table, const Tensor& ids) {
  if (table.rank() != 2) throw Error("embedding: table must be [vocab, dim], got " + table.graph()->Describe(table.id()));
  Expr d = table.dim(1);
  std::vector<Expr> flat_shape = {Product(ids.shape()), d};
  Tensor idx = ids.reshape({Product(ids.shape()), Expr(1)}).expand(flat_shape);
  Graph* g = table.graph();
  Tensor rows{g, g->Gather(table.id(), idx.id(), 0)};
  std::vector<Expr> out_shape = ids.shape();
  out_shape.push_back(d);
  return rows.reshape(out_shape);
}

Tensor RopeInvFreq(Graph* g, int64_t head_dim, double theta, const RopeScaling& s) {
  int64_t half = head_dim / 2;
  Tensor i = Arange(g, Expr(half), DType::F32);
  Tensor inv = (i * (-2.0 * std::log2(theta) / (double)head_dim)).exp2();
  if (s.factor <= 0) return inv;
  // Llama 3.1 scaling: long wavelengths are divided by factor, short ones kept, smooth between.
  double low_wavelen = s.original_max_position / s.low_freq_factor;
  double high_wavelen = s.original_max_position / s.high_freq_factor;
  Tensor wavelen = inv.recip() * (2.0 * std::numbers::pi);
  Tensor smooth = (s.original_max_position * inv / (2.0 * std::numbers::pi) - s.low_freq_factor) *
                  (1.0 / (s.high_freq_factor - s.low_freq_factor));
  Tensor mid = (1.0 - smooth) * inv / s.factor + smooth * inv;
  Tensor shape_like = Full(g, 0.0, {Expr(half)});
  Tensor longw = Less(shape_like + high_wavelen, wavelen);  // wavelen > high_wavelen
  Tensor very_long = Less(shape_like + low_wavelen, wavelen);
  return Where(very_long, inv / s.factor, Where(longw, mid, inv));
}

Tensor ConstVector(Graph* g, const std::vector<double>& values) {
  if (values.empty()) throw Error("constant vector: no values");
  // A chain of selects on the index i, built from the last value back: out[i] = values[j] for the first j
  // with i < j + 1, which is j = i.
  const Expr n((int64_t)values.size());
  Tensor i = Arange(g, n, DType::F32);
  Tensor out = Full(g, values.back(), {n});
  for (size_t j = values.size() - 1; j-- > 0;)
    out = Where(Less(i, Full(g, (double)j + 1, {n})), Full(g, values[j], {n}), out);
  return out;
}

Tensor SoftCap(const Tensor& x, double cap) { return (x * (1.0 / cap)).tanh() * cap; }

Tensor Rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeStyle style) {
  if (x.rank() != 3) throw Error("rope: expected [seq, heads, head_dim], got " + x.graph()->Describe(x.id()));
  Expr seq = x.dim(0), heads = x.dim(1), d = x.dim(2);
  if (!d.IsConst() || d.value() % 2) throw Error("rope: head_dim must be a constant even size");
  Expr half(d.value() / 2);
  // angle[s, 1, i] = pos[s] * inv_freq[i]
  Tensor angle = positions.cast(DType::F32).reshape({seq, Expr(1), Expr(1)}) * inv_freq.reshape({Expr(1), Expr(1), half});
  Tensor cos = angle.cos(), sin = angle.sin();
  Tensor xf = x.cast(DType::F32);
  Tensor a, b;
  if (style == RopeStyle::HalfSplit) {
    a = xf.slice(2, 0, half);
    b = xf.slice(2, half, half);
  } else {
    a = xf.slice(2, 0, half, 2);
    b = xf.slice(2, 1, half, 2);
  }
  Tensor ra = a * cos - b * sin, rb = b * cos + a * sin;
  Tensor out;
  if (style == RopeStyle::HalfSplit) {
    out = Concat({ra, rb}, 2);
  } else {
    out = Concat({ra.unsqueeze(3), rb.unsqueeze(3)}, 3).reshape({seq, heads, d});
  }
  return out.cast(x.dtype());
}

Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                       const Tensor& v_cache, const Expr& past, double scale, const AttentionVariant& variant) {
  Graph* g = q.graph();
  Expr seq = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
  if (!hq.IsConst() || !hkv.IsConst() || hq.value() % hkv.value())
    throw Error("attention: query heads " + hq.str() + " must be a multiple of key/value heads " + hkv.str());
  int64_t group = hq.value() / hkv.value();
  // The caches are head-major: one head's keys lie together, so attention reads each head's as one stream.
  auto write = [&](const Tensor& cache, const Tensor& x) {
    return Tensor{g, g->StateWrite(cache.id(), x.cast(cache.dtype()).permute({1, 0, 2}).id(), 1, past)};
  };
  Tensor kc = write(k_cache, k), vc = write(v_cache, v);
  // Keys [first, past + seq): a windowed layer's first query sees none before past + 1 - window.
  const bool windowed = variant.window > 0;
  Expr first = windowed && !variant.bidirectional ? Max(Expr(0), past + Expr(1 - variant.window)) : Expr(0);
  Expr total = past + seq, keys_n = windowed ? total - first : total;
  Tensor keys = kc.slice(1, first, keys_n).cast(DType::F32);  // [Hkv, T, D]
  Tensor vals = vc.slice(1, first, keys_n).cast(DType::F32);
  // Queries grouped by their key/value head: [Hkv, group, seq, D]
  Tensor qg = q.cast(DType::F32).reshape({seq, hkv, Expr(group), d}).permute({1, 2, 0, 3});
  Tensor kt = keys.unsqueeze(1);                             // [Hkv, 1, T, D]
  Tensor scores = Matmul(qg, kt.transpose(-1, -2)) * scale;  // [Hkv, group, seq, T]
  if (variant.softcap > 0) scores = SoftCap(scores, variant.softcap);
  // Query s sits at absolute position past + s and sees keys first + t <= past + s (and, windowed,
  // first + t > past + s - window).
  std::vector<Expr> sshape = {hkv, Expr(group), seq, keys_n};
  Tensor t_idx{g, g->Iota(sshape, 3, DType::I32)};
  Tensor s_idx{g, g->Iota(sshape, 2, DType::I32)};
  auto shifted = [&](const Expr& by) { return s_idx + BroadcastTo(ExprValue(g, by, DType::I32), sshape); };
  const Expr offset = variant.bidirectional ? total : windowed ? past + Expr(1) - first : past + Expr(1);
  if (windowed) {  // t + window < limit: before the window (compared so, no operand is negative), as an
                   // additive -inf over [seq, keys] shared by the heads, which the fused template takes
    const std::vector<Expr> ms = {seq, keys_n};
    Tensor t_key{g, g->Iota(ms, 1, DType::I32)}, s_query{g, g->Iota(ms, 0, DType::I32)};
    const Tensor window = Full(g, (double)variant.window, ms, DType::I32);
    Tensor bias;
    if (variant.bidirectional) {  // and keys window or more positions after the query's (an encoder's)
      const Tensor at = s_query + BroadcastTo(ExprValue(g, past, DType::I32), ms), one = Full(g, 1, ms, DType::I32);
      bias = Where(Less(t_key + window, at + one), Full(g, -INFINITY, ms),
                   Where(Less(at + window, t_key + one), Full(g, -INFINITY, ms), Full(g, 0.0, ms)));
    } else {
      Tensor before = Less(t_key + window, s_query + BroadcastTo(ExprValue(g, offset, DType::I32), ms));
      bias = Where(before, Full(g, -INFINITY, ms), Full(g, 0.0, ms));
    }
    scores = scores + BroadcastTo(bias.reshape({Expr(1), Expr(1), seq, keys_n}), sshape);
  }
  Tensor masked = Where(Less(t_idx, shifted(offset)), scores, Full(g, -INFINITY, sshape));
  Tensor p = Softmax(masked, -1);
  Tensor vt = vals.unsqueeze(1);  // [Hkv, 1, T, D]
  Tensor out = Matmul(p, vt);     // [Hkv, group, seq, D]
  return out.permute({2, 0, 1, 3}).reshape({seq, hq * d}).cast(q.dtype());
}

Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask,
                 double scale, bool causal) {
  Graph* g = q.graph();
  if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3)
    throw Error("attention: q " + g->Describe(q.id()) + ", k " + g->Describe(k.id()) + ", v " +
                g->Describe(v.id()) + " must be [seq, heads, head_dim]");
  Expr seq = q.dim(0), hq = q.dim(1), d = q.dim(2), total = k.dim(0), hkv = k.dim(1);
  if (!hq.IsConst() || !hkv.IsConst() || hq.value() % hkv.value() || k.dim(2) != d || v.dim(0) != total ||
      v.dim(1) != hkv)
    throw Error("attention: q " + g->Describe(q.id()) + ", k " + g->Describe(k.id()) + ", v " +
                g->Describe(v.id()) +
                ": query heads must be a multiple of key/value heads, of one head size");
  const int64_t group = hq.value() / hkv.value();
  Tensor qg = q.cast(DType::F32).reshape({seq, hkv, Expr(group), d}).permute({1, 2, 0, 3});
  Tensor kt = k.cast(DType::F32).permute({1, 0, 2}).unsqueeze(1);  // [Hkv, 1, T, D]
  Tensor scores = Matmul(qg, kt.transpose(-1, -2)) * scale;        // [Hkv, group, S, T]
  std::vector<Expr> sshape = {hkv, Expr(group), seq, total};
  if (mask) {
    if (mask->rank() != 2 || mask->dim(0) != seq || mask->dim(1) != total)
      throw Error("attention: mask " + g->Describe(mask->id()) + " must be [" + seq.str() + ", " +
                  total.str() + "]");
    scores = scores + BroadcastTo(mask->cast(DType::F32).reshape({Expr(1), Expr(1), seq, total}), sshape);
  }
  if (causal) {
    Tensor t_idx{g, g->Iota(sshape, 3, DType::I32)}, s_idx{g, g->Iota(sshape, 2, DType::I32)};
    scores = Where(Less(t_idx, s_idx + Full(g, 1, sshape, DType::I32)), scores, Full(g, -INFINITY, sshape));
  }
  Tensor out =
      Matmul(Softmax(scores, -1), v.cast(DType::F32).permute({1, 0, 2}).unsqueeze(1));  // [Hkv, G, S, D]
  return out.permute({2, 0, 1, 3}).reshape({seq, hq * d});
}

Tensor PagedAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_pool,
                      const Tensor& v_pool, const Tensor& slots, const Tensor& table, const Tensor& positions,
                      int64_t block, double scale, const AttentionVariant& variant) {
  Graph* g = q.graph();
  Expr seq = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1), nblocks = table.dim(1);
  if (!hq.IsConst() || !hkv.IsConst() || hq.value() % hkv.value())
    throw Error("attention: query heads " + hq.str() + " must be a multiple of key/value heads " + hkv.str());
  if (block < 1 || table.rank() != 2 || positions.rank() != 1)
    throw Error("paged attention: table " + g->Describe(table.id()) +
                " must be [tokens, blocks], positions " + g->Describe(positions.id()) +
                " [tokens], block size " + std::to_string(block) + " >= 1");
  const int64_t group = hq.value() / hkv.value();
  Tensor kp{g, g->StateScatter(k_pool.id(), k.cast(k_pool.dtype()).id(), slots.id())};
  Tensor vp{g, g->StateScatter(v_pool.id(), v.cast(v_pool.dtype()).id(), slots.id())};
  // Key j of token i is at position first[i] + j: first = 0 over the whole table, or, windowed, the start
  // of the block holding the window's first key, over just enough blocks to hold the window.
  Expr nb = nblocks;
  Tensor blocks = table, first;
  if (variant.window > 0) {
    const int64_t w = variant.window;
    nb = Min(Expr((w + block - 2) / block + 1), nblocks);
    Tensor start = Maximum(positions + (double)(1 - w), Full(g, 0, {seq}, DType::I32));
    // start / block (exact: a multiple of block divided in f32, rounded to the nearest integer)
    Tensor b0 = ((start - Mod(start, Full(g, (double)block, {seq}, DType::I32))).cast(DType::F32) * (1.0 / block) + 0.5)
                    .cast(DType::I32);
    Tensor cols = b0.reshape({seq, Expr(1)}).expand({seq, nb}) + Tensor{g, g->Iota({seq, nb}, 1, DType::I32)};
    blocks = Tensor{g, g->Gather(table.id(), cols.id(), 1)};
    first = b0 * (double)block;
  }
  // Pool row of key j for token i: blocks[i, j / block] * block + j % block, over j < nb * block.
  const Expr ctx = nb * Expr(block);
  std::vector<Expr> rshape = {seq, nb, Expr(block)};
  Tensor base = blocks.reshape({seq, nb, Expr(1)}).expand(rshape) * Full(g, (double)block, rshape, DType::I32);
  Tensor rows = (base + Tensor{g, g->Iota(rshape, 2, DType::I32)}).reshape({seq, ctx});
  // Gathered along the pool's rows with each token's own index row: [T, ctx, Hkv * D], no flattening of
  // symbolic sizes (the index arithmetic stays one multiply-add per key).
  const Expr hd = hkv * d;
  Tensor index = rows.reshape({seq, ctx, Expr(1)}).expand({seq, ctx, hd});
  auto gathered = [&](const Tensor& pool) {  // [T, ctx, Hkv, D] in f32
    Tensor src = pool.reshape({Expr(1), pool.dim(0), hd}).expand({seq, pool.dim(0), hd});
    return Tensor{g, g->Gather(src.id(), index.id(), 1)}.reshape({seq, ctx, hkv, d}).cast(DType::F32);
  };
  Tensor keys = gathered(kp), vals = gathered(vp);
  // As CausalAttention, with queries grouped by their key/value head [Hkv, G, T, D], except that each
  // query has keys of its own: the products are written out (the template tier matches this form too).
  Tensor qg = q.cast(DType::F32).reshape({seq, hkv, Expr(group), d}).permute({1, 2, 0, 3});
  Tensor kt = keys.permute({2, 0, 1, 3}).unsqueeze(1);                  // [Hkv, 1, T, ctx, D]
  Tensor scores = (qg.unsqueeze(3) * kt).sum({4}, false) * scale;       // [Hkv, G, T, ctx]
  if (variant.softcap > 0) scores = SoftCap(scores, variant.softcap);
  std::vector<Expr> sshape = {hkv, Expr(group), seq, ctx};
  Tensor j{g, g->Iota(sshape, 3, DType::I32)};
  // Visible: first[i] + j <= positions[i] (and, windowed, > positions[i] - window).
  auto per_token = [&](const Tensor& t) { return t.reshape({Expr(1), Expr(1), seq, Expr(1)}).expand(sshape); };
  Tensor limit = per_token(positions) + Full(g, 1, sshape, DType::I32);
  if (variant.window > 0) limit = limit - per_token(first);
  Tensor masked = Where(Less(j, limit), scores, Full(g, -INFINITY, sshape));
  if (variant.window > 0)  // j + window < limit: before the window
    masked = Where(Less(j + Full(g, (double)variant.window, sshape, DType::I32), limit), Full(g, -INFINITY, sshape),
                   masked);
  Tensor p = Softmax(masked, -1);
  Tensor vt = vals.permute({2, 0, 3, 1}).unsqueeze(1);  // [Hkv, 1, T, D, ctx]
  Tensor out = (p.unsqueeze(3) * vt).sum({4}, false);    // [Hkv, G, T, D]
  return out.permute({2, 0, 1, 3}).reshape({seq, hq * d}).cast(q.dtype());
}

}  // namespace prism
