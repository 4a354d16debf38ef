"""ATen's neural-network operators as Prism ops: matmuls and linear layers (in the GEMM templates'
x · Wᵀ form where the weight allows), embedding and indexing, softmax, norms, 2-d convolution, pooling."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from . import _prism
from .aten_common import (Expr, Lowering, Unsupported, _as_result, _bc, _not, _or, _packet, aten, prism_dtype,
                          shape_of, to_expr)

def _matmul(L: Lowering, node: Any, a: Any, b: Any) -> Any:
    """a @ b; where b is a transposed [N, K] matrix (a linear layer's weight), as x · Wᵀ over W as
    stored, the form Prism's GEMM templates match."""
    src = node.args[2] if _packet(node.target) is aten.addmm else node.args[1]
    if (isinstance(src, torch.fx.Node) and _packet(src.target) in (aten.permute, aten.t) and a.rank == 2
            and b.rank == 2 and (_packet(src.target) is aten.t or list(src.args[1]) in ([1, 0], [-1, -2]))):
        if a.dtype == "f32":
            return a.linear(L.env[src.args[0]])
        # half-precision activations: the product in f32 (as torch accumulates it), rounded once after
        return a.cast("f32").linear(L.env[src.args[0]]).cast(a.dtype)
    return a.matmul(b)

def _mm(L: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _matmul(L, node, a, b)

def _addmm(L: Lowering, node: Any, bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    p = _matmul(L, node, a, b)
    if alpha != 1:
        p = p.mul(alpha)
    return p.add(bias if beta == 1 else bias.mul(beta))

def _embedding(L: Lowering, node: Any, weight: Any, ids: Any, *a: Any) -> Any:
    return weight.embedding(ids if ids.dtype == "i32" else ids.cast("i32"))

def _index(L: Lowering, node: Any, x: Any, indices: Sequence[Any]) -> Any:
    """Advanced indexing x[..., i0, i1, ...] with index tensors (broadcast together) on some axes."""
    dims = [i for i, t in enumerate(indices) if t is not None]
    idxs = _bc(L, *[indices[d] if indices[d].dtype == "i32" else indices[d].cast("i32") for d in dims])
    rank = x.rank
    perm = dims + [i for i in range(rank) if i not in dims]
    xt = x.permute(perm) if perm != list(range(rank)) else x
    rest = list(xt.shape[len(dims):])
    lead: Any = 1
    for d in dims:
        lead = x.shape[d] * lead
    flat: Any = 1
    for r in rest:
        flat = r * flat
    lin = idxs[0]
    for d, ix in zip(dims[1:], idxs[1:]):  # row-major position among the indexed axes
        lin = lin.mul(L.g.value_of(x.shape[d], "i32") if not isinstance(x.shape[d], int) and
                      not x.shape[d].is_const else float(x.shape[d].value if isinstance(x.shape[d], Expr)
                                                         else x.shape[d])).add(ix)
    if lin.dtype != "i32":
        lin = lin.cast("i32")
    out = xt.reshape([lead, flat]).embedding(lin)  # idx.shape + [flat]
    k = lin.rank
    out = out.reshape(list(lin.shape) + rest)
    consecutive = dims == list(range(dims[0], dims[0] + len(dims)))
    if consecutive and dims[0] > 0:  # torch puts the indexed axes where the indices stood
        d = dims[0]
        order = list(range(k, k + d)) + list(range(k)) + list(range(k + d, k + len(rest)))
        out = out.permute(order)
    return out

def _gather(L: Lowering, node: Any, x: Any, dim: int, index: Any, **kw: Any) -> Any:
    return x.gather(index if index.dtype == "i32" else index.cast("i32"), dim)

def _softmax(log: bool) -> Callable:
    def h(L: Lowering, node: Any, x: Any, dim: int, half_to_float: bool = False) -> Any:
        y = x.log_softmax(dim) if log else x.softmax(dim)
        return _as_result(L, node, y)
    return h

def _gelu(L: Lowering, node: Any, x: Any, approximate: str = "none") -> Any:
    if approximate == "tanh":
        inner = x.add(x.mul(x).mul(x).mul(0.044715)).mul(math.sqrt(2 / math.pi))
        return x.mul(0.5).mul(inner.tanh().add(1.0))
    return x.mul(0.5).mul(x.mul(1 / math.sqrt(2)).erf().add(1.0))

def _layer_norm(L: Lowering, node: Any, x: Any, shape: Any, w: Any, b: Any, eps: float) -> Any:
    axes = list(range(x.rank - len(shape), x.rank))
    mean = x.mean(axes, True)
    d = x.sub(mean)
    var = d.mul(d).mean(axes, True)
    rstd = var.add(eps).rsqrt()
    y = d.mul(rstd)
    if w is not None:
        y = y.mul(w)
    if b is not None:
        y = y.add(b)
    return (y, mean, rstd)

def _batch_norm_inference(L: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any, var: Any, momentum: Any,
                          eps: float) -> Any:
    twin = L.nhwc.get(node.args[0])
    if twin is not None:
        x = twin
    shape = [1, 1, 1, x.shape[3]] if twin is not None else [1, x.shape[1]] + [1] * (x.rank - 2)
    scale = var.add(eps).rsqrt()
    if w is not None:
        scale = scale.mul(w)
    y = x.sub(mean.reshape(shape)).mul(scale.reshape(shape))
    if b is not None:
        y = y.add(b.reshape(shape))
    return (_twin_of(L, (node, 0), y) if twin is not None else y, None, None)

def _pair(v: Any, n: int = 2) -> List[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v

def _twin_of(L: Lowering, key: Any, t: Any) -> Any:
    """Records t [N, H, W, C] as key's channels-last twin; returns key's value, the [N, C, H, W] view of it."""
    L.nhwc[key] = t
    return t.permute([0, 3, 1, 2])

def _windows(L: Lowering, x: Any, k: Sequence[int], stride: Sequence[int], pad: Sequence[int],
             dil: Sequence[int], out_hw: Sequence[Any], fill: Optional[float] = None, hw: int = 2) -> List[Any]:
    """The kh * kw strided windows of x (padded) over its axes hw and hw + 1 (H and W: 2 for [N, C, H, W],
    1 for channels-last [N, H, W, C]) as views of x's shape with OH and OW there, row-major."""
    if pad[0] or pad[1]:
        xp = x.pad(hw, pad[0], pad[0]).pad(hw + 1, pad[1], pad[1])
        if fill is not None:  # padding reads as `fill` (max pooling pads with -inf)
            ones = L.full(1.0, "f32", x.shape).pad(hw, pad[0], pad[0]).pad(hw + 1, pad[1], pad[1])
            xp = _prism.where(*_bc(L, ones.less(0.5), L.full(fill, x.dtype, []), xp))
    else:
        xp = x
    out = []
    for i in range(k[0]):
        for j in range(k[1]):
            w = xp.slice(hw, i * dil[0], out_hw[0], stride[0]).slice(hw + 1, j * dil[1], out_hw[1], stride[1])
            out.append(w)
    return out

def _convolution(L: Lowering, node: Any, x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any,
                 transposed: bool, output_padding: Any, groups: int) -> Any:
    if transposed or x.rank != 4:
        raise Unsupported("convolution other than a 2-d forward one")
    wv = node.args[1].meta["val"]
    O, Cg, KH, KW = [int(d) for d in wv.shape]
    out = shape_of(node.meta["val"])
    N = x.shape[0]
    OH, OW = out[2], out[3]
    C = x.shape[1]
    twin = L.nhwc.get(node.args[0])
    if w.rank == 2:  # the weight bound as [O, C*KH*KW]: im2col rows times Wᵀ, the GEMM template's form
        # A channels-last input gives rows [N, OH, OW, KH*KW, C] as they are stored (no transpose), the
        # weight's columns taken in (KH, KW, C) order; one the user gave [N, C, H, W] keeps (C, KH, KW).
        if L.conv_weight_order.setdefault(node.args[1], "hwc" if twin is not None else "chw") == "hwc":
            src = twin if twin is not None else x.permute([0, 2, 3, 1])  # a weight another such conv reads
            wins = _windows(L, src, [KH, KW], _pair(stride), _pair(padding), _pair(dilation), [OH, OW], hw=1)
            rows = _prism.concat([v.reshape([N, OH, OW, 1, C]) for v in wins], 3)
        else:
            wins = _windows(L, x, [KH, KW], _pair(stride), _pair(padding), _pair(dilation), [OH, OW])
            cols = _prism.concat([v.reshape([N, C, 1, OH, OW]) for v in wins], 2)  # [N, C, KH*KW, OH, OW]
            rows = cols.permute([0, 3, 4, 1, 2])
        rows = rows.reshape([N, OH, OW, Cg * KH * KW])
        rows = rows if rows.dtype == "f32" else rows.cast("f32")
        y = rows.linear(w)                                                    # [N, OH, OW, O]
        if b is not None:
            y = y.add(b if b.dtype == "f32" else b.cast("f32"))
        want = prism_dtype(node.meta["val"].dtype)
        return _twin_of(L, node, y if y.dtype == want else y.cast(want))
    wins = _windows(L, x, [KH, KW], _pair(stride), _pair(padding), _pair(dilation), [OH, OW])
    cols = _prism.concat([v.reshape([N, C, 1, OH, OW]) for v in wins], 2)  # [N, C, KH*KW, OH, OW]
    G = groups
    cols = cols.reshape([N, G, Cg * KH * KW, OH * OW])          # per group: [Cg*K, OH*OW]
    wm = w.reshape([G, O // G, Cg * KH * KW])                   # [G, O/G, Cg*K]
    y = wm.reshape([1, G, O // G, Cg * KH * KW]).matmul(cols)  # [N, G, O/G, OH*OW]
    y = y.reshape([N, O, OH, OW])
    if b is not None:
        y = y.add(b.reshape([1, O, 1, 1]))
    return y

def _max_pool(L: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
              ceil_mode: bool = False) -> Any:
    k = _pair(kernel)
    s = _pair(stride) if stride else k
    out = shape_of(node.meta["val"][0])
    twin = L.nhwc.get(node.args[0])
    wins = _windows(L, x if twin is None else twin, k, s, _pair(padding), _pair(dilation), [out[2], out[3]],
                    fill=-math.inf, hw=2 if twin is None else 1)
    y = wins[0]
    for v in wins[1:]:
        y = y.maximum(v)
    return (y if twin is None else _twin_of(L, (node, 0), y), None)

def _avg_pool(L: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
              ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Any:
    k = _pair(kernel)
    s = _pair(stride) if stride else k
    p = _pair(padding)
    if (p[0] or p[1]) and not count_include_pad:
        raise Unsupported("avg_pool2d with count_include_pad=False")
    out = shape_of(node.meta["val"])
    twin = L.nhwc.get(node.args[0])
    wins = _windows(L, x if twin is None else twin, k, s, p, [1, 1], [out[2], out[3]], hw=2 if twin is None else 1)
    y = wins[0]
    for v in wins[1:]:
        y = y.add(v)
    y = y.div(float(divisor_override or k[0] * k[1]))
    return y if twin is None else _twin_of(L, node, y)

def _adaptive_avg_pool(L: Lowering, node: Any, x: Any, size: Any) -> Any:
    if list(size) != [1, 1]:
        raise Unsupported("adaptive_avg_pool2d to other than 1x1")
    twin = L.nhwc.get(node.args[0])
    if twin is not None and x.rank == 4:
        return _twin_of(L, node, twin.mean([1, 2], True))
    return x.mean([x.rank - 2, x.rank - 1], True)

def _one(d: Any) -> bool:
    return d == 1 or (isinstance(d, Expr) and d.is_const and d.value == 1)

def _same(a: Any, b: Any) -> bool:
    return str(to_expr(a)) == str(to_expr(b))

def _own_kv_heads(L: Lowering, src: Any) -> Any:
    """K or V as it was before transformers' repeat_kv (an expand of [B, Hk, 1, T, D] to [B, Hk, rep, T, D],
    copied, then viewed as [B, Hk * rep, T, D]): the tensor of its own heads, or None."""
    n = src
    while isinstance(n, torch.fx.Node) and _packet(n.target) in (aten.view, aten._unsafe_view, aten.reshape,
                                                                    aten.clone):
        n = n.args[0]
    if not (isinstance(n, torch.fx.Node) and _packet(n.target) is aten.expand and n.args[0] in L.env):
        return None
    inner, out, want = n.args[0].meta["val"], n.meta["val"], src.meta["val"]
    if inner.dim() != 5 or out.dim() != 5 or not _one(inner.shape[2]) or \
            any(not _same(inner.shape[i], out.shape[i]) for i in (0, 1, 3, 4)) or \
            not _same(want.shape[1], out.shape[1] * out.shape[2]):
        return None
    t = L.env[n.args[0]]
    return t.reshape([t.shape[0], t.shape[1], t.shape[3], t.shape[4]])

# PyTorch's fused attention operators: the CPU's, and CUDA's flash, memory-efficient and cuDNN ones (what
# scaled_dot_product_attention becomes for tensors on those devices). They differ only in argument order.
SDPA_OPS = (aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention,
            aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention)


def sdpa_args(op: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """A fused attention call's arguments by their schema names (defaults filled in), the mask named
    attn_mask whichever operator it is (the memory-efficient and cuDNN ones call it attn_bias)."""
    named = {}
    for i, a in enumerate(op._schema.arguments):
        if i < len(args):
            named[a.name] = args[i]
        elif a.name in kwargs:
            named[a.name] = kwargs[a.name]
        elif a.has_default_value():
            named[a.name] = a.default_value
    named.setdefault("attn_mask", named.pop("attn_bias", None))
    return named


def _sdpa(L: Lowering, node: Any, *args: Any, **kwargs: Any) -> Any:
    a = sdpa_args(node.target, args, kwargs)
    return _attention(L, node, a["query"], a["key"], a["value"], bool(a.get("is_causal", False)),
                      a.get("attn_mask"), a.get("scale"))


def _attention(L: Lowering, node: Any, q: Any, k: Any, v: Any, is_causal: bool, attn_mask: Any,
               scale: Any) -> Any:
    """scaled_dot_product_attention, q [B, Hq, S, D], k and v [B, Hk, T, D]. One sequence (B = 1) with a mask
    shared by its heads becomes Prism's attention over tensors, which the fused template runs (K and V
    taken before transformers repeats their heads); anything else, the same math unfused. A query that sees
    no key gets 0, as PyTorch gives."""
    B, Hq, S, D = q.shape
    Hk, T = k.shape[1], k.shape[2]
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(int(node.args[0].meta["val"].shape[-1]))
    maskf = attn_mask  # additive, in f32 (a bool mask: 0 where a key is seen, -inf where not)
    if attn_mask is not None and attn_mask.dtype == "bool":
        maskf = _prism.where(*_bc(L, attn_mask, L.full(0.0, "f32", []), L.full(-math.inf, "f32", [])))
    elif attn_mask is not None and attn_mask.dtype != "f32":
        maskf = attn_mask.cast("f32")
    want = prism_dtype(node.meta["val"][0].dtype)
    f32 = [x if x.dtype == "f32" else x.cast("f32") for x in (q, k, v)]
    # keys hidden from each query: by the mask (-inf, not NaN), or past it when causal
    hidden = None if maskf is None else maskf.less(L.full(-3.4e38, "f32", []))
    if is_causal:
        later = L.g.iota([S, T], 0, "i32").less(L.g.iota([S, T], 1, "i32"))
        hidden = later if hidden is None else _or(L, *_bc(L, hidden, later))
    const = all(isinstance(d, int) or d.is_const for d in (Hq, Hk, D))
    if const and _one(B) and (maskf is None or all(_one(d) for d in maskf.shape[:-2])):
        own = [_own_kv_heads(L, src) for src in node.args[1:3]]
        if all(o is not None for o in own):  # both or neither, or their heads would not pair up
            f32[1:] = [o if o.dtype == "f32" else o.cast("f32") for o in own]
        qs, ks, vs = (x.reshape(list(x.shape[1:])).permute([1, 0, 2]) for x in f32)
        m2 = None if maskf is None else maskf.reshape(list(maskf.shape[-2:])).broadcast_to([S, T])
        out = _prism.attention(qs, ks, vs, m2, sc, bool(is_causal))  # [S, Hq * D]
        out = out.reshape([S, Hq, D]).permute([1, 0, 2]).reshape([1, Hq, S, D])
    else:
        qf, kf, vf = f32
        if not _same(Hk, Hq):  # grouped heads: each K/V head serves Hq / Hk query heads
            if not const:
                raise Unsupported("grouped-query attention over a symbolic number of heads")
            rep = Hq // Hk
            kf, vf = (x.reshape([B, Hk, 1, T, D]).expand([B, Hk, rep, T, D]).reshape([B, Hq, T, D])
                      for x in (kf, vf))
        scores = qf.matmul(kf.permute([0, 1, 3, 2])).mul(sc)
        if maskf is not None:
            scores = scores.add(_bc(L, scores, maskf)[1])
        if is_causal:
            scores = _prism.where(*_bc(L, later, L.full(-math.inf, "f32", []), scores))
        out = scores.softmax(-1).matmul(vf)
    if hidden is not None:  # a query that sees no key: 0 (the unfused softmax gives NaN)
        seen = _not(L, hidden).cast("f32").sum([hidden.rank - 1], True)
        out = _prism.where(*_bc(L, L.full(0.5, "f32", []).less(seen), out, L.full(0.0, "f32", [])))
    return (out if out.dtype == want else out.cast(want), None)


NN_HANDLERS: Dict[Any, Callable] = {
    aten.mm: _mm, aten.bmm: _mm, aten.addmm: _addmm,
    aten.embedding: _embedding, aten.index: _index, aten.gather: _gather,
    aten._softmax: _softmax(False), aten._log_softmax: _softmax(True), aten.gelu: _gelu,
    aten.native_layer_norm: _layer_norm,
    aten._native_batch_norm_legit_no_training: _batch_norm_inference,
    aten.convolution: _convolution, aten.max_pool2d_with_indices: _max_pool, aten.avg_pool2d: _avg_pool,
    aten._adaptive_avg_pool2d: _adaptive_avg_pool,
    **{op: _sdpa for op in SDPA_OPS},
}
