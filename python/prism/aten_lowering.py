"""ATen core operators as Prism graph ops: one handler per operator over prism Tensors.

lower_graph() turns an FX graph of ATen core operators (torch's own decompositions applied) into a
prism.Graph. supported() says, node by node, whether a handler exists and accepts the node as typed
(the torch backend runs the other nodes in eager PyTorch). Sizes stay symbolic: torch's shape symbols
(s0, s1, ...) become Prism symbols of the same names.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from . import _prism
from ._prism import Expr, PrismError

aten = torch.ops.aten

# torch dtype -> Prism dtype. int64 computes as int32 in Prism (ids, positions, sizes; values beyond
# 2^31 are outside what it handles). float64 has no Prism type: a float64 scalar (Dynamo passes Python
# floats such as a norm's eps as 0-d float64 tensors) computes as f32; float64 arrays run in PyTorch.
DTYPES = {
    torch.float64: "f32", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32",
    torch.int64: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
}


class Unsupported(Exception):
    """A node Prism does not lower (its operator, or its arguments as given)."""


def prism_dtype(dt: torch.dtype) -> str:
    if dt not in DTYPES:
        raise Unsupported(f"dtype {dt}")
    return DTYPES[dt]


def to_expr(v: Any) -> Any:
    """An int, torch.SymInt or sympy expression as an int or prism Expr."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, Expr)):
        return v
    if isinstance(v, torch.SymInt):  # with what the shape environment learned (a size pinned by a guard)
        env = v.node.shape_env
        return sympy_to_expr(env.simplify(v.node.expr) if env is not None else v.node.expr)
    return sympy_to_expr(v)


def sympy_to_expr(e: Any) -> Any:
    import sympy

    from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

    if isinstance(e, sympy.Integer):
        return int(e)
    if isinstance(e, sympy.Symbol):
        return Expr.sym(e.name)
    if isinstance(e, sympy.Add):
        out: Any = 0
        for a in e.args:
            out = to_expr(a) + out
        return out
    if isinstance(e, sympy.Mul):
        out = 1
        for a in e.args:
            out = to_expr(a) * out
        return out
    if isinstance(e, FloorDiv):
        return to_expr(e.args[0]) // to_expr(e.args[1])
    if isinstance(e, (Mod, PythonMod)):
        return to_expr(e.args[0]) % to_expr(e.args[1])
    if isinstance(e, sympy.Max):
        return _prism.max(to_expr(e.args[0]), to_expr(e.args[1])) if len(e.args) == 2 else _unsup(e)
    if isinstance(e, sympy.Min):
        return _prism.min(to_expr(e.args[0]), to_expr(e.args[1])) if len(e.args) == 2 else _unsup(e)
    return _unsup(e)


def _unsup(e: Any) -> Any:
    raise Unsupported(f"size expression {e}")


def shape_of(val: Any) -> List[Any]:
    return [to_expr(d) for d in val.shape]


def same_size(a: Any, b: Any) -> bool:
    return str(a) == str(b)


class Lowering:
    """State while one FX graph is lowered: the Prism graph and the value of every FX node."""

    def __init__(self) -> None:
        self.g = _prism.Graph()
        self.env: Dict[Any, Any] = {}

    # helpers used by the handlers
    def full(self, value: float, dtype: str, shape: Sequence[Any]) -> Any:
        return self.g.constant(float(value), dtype, list(shape))

    def scalar_like(self, x: Any, value: Any) -> Any:
        if isinstance(value, _prism.Tensor):
            return value
        return self.g.constant(float(value), x.dtype if x.dtype != "bool" else "f32", [])


def _t(x: Any) -> bool:
    return isinstance(x, _prism.Tensor)


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _axes(dims: Any, rank: int) -> List[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return [_norm_axis(d, rank) for d in dims]


def _sym_operand(L: Lowering, v: Any, like: Any) -> Any:
    """A symbolic size used as an operand: its run-time value as a 0-d tensor."""
    if isinstance(v, Expr) and not v.is_const:
        t = L.g.value_of(v, "i32")
        return t if like is None or like.dtype == "i32" else t.cast(like.dtype if like.dtype != "bool" else "f32")
    if isinstance(v, Expr):
        return v.value
    return v


def _binary(op: str) -> Callable:
    def h(L: Lowering, node: Any, a: Any, b: Any, alpha: Any = 1, **kw: Any) -> Any:
        a = _sym_operand(L, a, b if _t(b) else None)
        b = _sym_operand(L, b, a if _t(a) else None)
        if not _t(a) and not _t(b):
            raise Unsupported("a binary op on two scalars")
        if not _t(a):  # scalar op tensor
            a = L.g.constant(float(a), b.dtype if b.dtype != "bool" else "f32", [])
        if _t(b) and alpha != 1:
            b = b.mul(alpha)
        elif not _t(b) and alpha != 1:
            b = b * alpha
        out = getattr(a, op)(b)
        return _as_result(L, node, out)
    return h


def _as_result(L: Lowering, node: Any, x: Any) -> Any:
    """Casts a handler's result to the dtype the node has in torch."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        want = prism_dtype(val.dtype)
        if x.dtype != want:
            x = x.cast(want)
    return x


def _unary(fn: Callable) -> Callable:
    def h(L: Lowering, node: Any, x: Any, *a: Any, **kw: Any) -> Any:
        if x.dtype not in ("f32", "f16", "bf16"):
            x = x.cast("f32")
        return _as_result(L, node, fn(x))
    return h


def _compare(kind: str) -> Callable:
    def h(L: Lowering, node: Any, a: Any, b: Any) -> Any:
        a = _sym_operand(L, a, b if _t(b) else None)
        b = _sym_operand(L, b, a if _t(a) else None)
        if not _t(a):
            a = L.scalar_like(b, a)
        if not _t(b):
            b = L.scalar_like(a, b)
        if a.dtype != b.dtype:
            a, b = a.cast("f32"), b.cast("f32")
        if kind == "lt":
            return a.less(b)
        if kind == "gt":
            return b.less(a)
        if kind == "le":
            return _not(L, b.less(a))
        if kind == "ge":
            return _not(L, a.less(b))
        # eq / ne: neither is less, and neither is NaN (NaN == NaN is False, NaN != NaN True)
        eq = _and(L, _not(L, a.less(b)), _not(L, b.less(a)))
        if a.dtype in ("f32", "f16", "bf16"):
            eq = _and(L, eq, _and(L, _not(L, _isnan(L, a)), _not(L, _isnan(L, b))))
        return eq if kind == "eq" else _not(L, eq)
    return h


def _isnan(L: Lowering, x: Any) -> Any:
    inf = L.g.constant(math.inf, x.dtype, [])
    return _not(L, _or(L, x.less(inf), inf.neg().less(x)))


def _bool_const(L: Lowering, v: bool) -> Any:
    return L.g.constant(1.0 if v else 0.0, "bool", [])


def _not(L: Lowering, c: Any) -> Any:
    c = c if c.dtype == "bool" else c.cast("bool")
    return _prism.where(*_bc(L, c, _bool_const(L, False), _bool_const(L, True)))


def _and(L: Lowering, a: Any, b: Any) -> Any:
    a = a if a.dtype == "bool" else a.cast("bool")
    b = b if b.dtype == "bool" else b.cast("bool")
    return _prism.where(*_bc(L, a, b, _bool_const(L, False)))


def _or(L: Lowering, a: Any, b: Any) -> Any:
    a = a if a.dtype == "bool" else a.cast("bool")
    b = b if b.dtype == "bool" else b.cast("bool")
    return _prism.where(*_bc(L, a, _bool_const(L, True), b))


def _bc(L: Lowering, *xs: Any) -> List[Any]:
    """Broadcasts tensors to their common shape (where() wants equal shapes)."""
    rank = max(x.rank for x in xs)
    shape: List[Any] = [1] * rank
    for x in xs:
        for i, d in enumerate(x.shape):
            j = rank - x.rank + i
            if not (isinstance(d, Expr) and d.is_const and d.value == 1):
                shape[j] = d
    return [x.broadcast_to(shape) for x in xs]


def _where(L: Lowering, node: Any, c: Any, a: Any, b: Any) -> Any:
    val = node.meta["val"]
    dt = prism_dtype(val.dtype)
    a = a if _t(a) else L.g.constant(float(a), dt, [])
    b = b if _t(b) else L.g.constant(float(b), dt, [])
    a, b = (a if a.dtype == dt else a.cast(dt)), (b if b.dtype == dt else b.cast(dt))
    c = c if c.dtype == "bool" else c.cast("bool")
    return _prism.where(*_bc(L, c, a, b))


def _reduce(kind: str) -> Callable:
    def h(L: Lowering, node: Any, x: Any, dims: Any = None, keepdim: bool = False, **kw: Any) -> Any:
        axes = _axes(dims, x.rank)
        if kind == "amin":
            out = x.neg().max(axes, keepdim).neg()
        else:
            if kind in ("sum", "mean") and x.dtype not in ("f32", "f16", "bf16"):
                x = x.cast("f32")
            out = getattr(x, kind if kind != "amax" else "max")(axes, keepdim)
        return _as_result(L, node, out)
    return h


def _var(L: Lowering, node: Any, x: Any, dims: Any = None, correction: Any = None, keepdim: bool = False,
         **kw: Any) -> Any:
    axes = _axes(dims, x.rank)
    mean = x.mean(axes, True)
    d = x.sub(mean)
    n: Any = 1
    for a in axes:
        n = x.shape[a] * n
    corr = 1 if correction is None else correction
    ss = d.mul(d).sum(axes, keepdim)
    denom = L.g.value_of(n - corr if corr else n, "f32") if not isinstance(n, int) else float(n - corr)
    return ss.div(denom)


def _sizes(L: Lowering, x: Any, sizes: Sequence[Any]) -> List[Any]:
    """A view's or expand's size arguments as Prism sizes (ints, or Exprs from the graph's size nodes)."""
    return [to_expr(v) if isinstance(v, torch.SymInt) else v for v in sizes]


def _view(L: Lowering, node: Any, x: Any, shape: Any) -> Any:
    sizes = _sizes(L, x, shape)
    if any(isinstance(v, int) and v == -1 for v in sizes):
        total: Any = 1
        for d in x.shape:
            total = d * total
        known: Any = 1
        for v in sizes:
            if not (isinstance(v, int) and v == -1):
                known = v * known
        sizes = [total // known if isinstance(v, int) and v == -1 else v for v in sizes]
    return x.reshape(sizes)


def _permute(L: Lowering, node: Any, x: Any, perm: Sequence[int]) -> Any:
    return x.permute([_norm_axis(p, x.rank) for p in perm])


def _expand(L: Lowering, node: Any, x: Any, sizes: Any, **kw: Any) -> Any:
    out = _sizes(L, x, sizes)
    if x.rank < len(out):
        x = x.reshape([1] * (len(out) - x.rank) + list(x.shape))
    out = [x.shape[i] if isinstance(v, int) and v == -1 else v for i, v in enumerate(out)]
    return x.expand(out)


def _slice(L: Lowering, node: Any, x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    dim = _norm_axis(dim, x.rank)
    out = shape_of(node.meta["val"])
    size = out[dim]
    in_val = node.args[0].meta["val"]
    s = 0 if start is None else start
    if isinstance(s, int) and s < 0:
        s = to_expr(in_val.shape[dim]) + s
        s = _prism.max(s, 0)
    elif not isinstance(s, int):
        s = to_expr(s)
    if isinstance(size, int) and size == 0:
        raise Unsupported("an empty slice")
    return x.slice(dim, s, size, step)


def _select(L: Lowering, node: Any, x: Any, dim: int, index: Any) -> Any:
    dim = _norm_axis(dim, x.rank)
    i = to_expr(index)
    if isinstance(i, int) and i < 0:
        i = to_expr(node.args[0].meta["val"].shape[dim]) + i
    y = x.slice(dim, i, 1, 1)
    return y.reshape(shape_of(node.meta["val"]))


def _unsqueeze(L: Lowering, node: Any, x: Any, dim: int) -> Any:
    shape = list(x.shape)
    shape.insert(_norm_axis(dim, x.rank + 1), 1)
    return x.reshape(shape)


def _squeeze(L: Lowering, node: Any, x: Any, dims: Any = None) -> Any:
    dims = _axes(dims, x.rank) if dims is not None else list(range(x.rank))
    keep = [d for i, d in enumerate(x.shape) if not (i in dims and isinstance(d, Expr) and d.is_const and d.value == 1)]
    return x.reshape(keep)


def _cat(L: Lowering, node: Any, xs: Sequence[Any], dim: int = 0) -> Any:
    xs = [x for x in xs if not (x.rank == 1 and isinstance(x.shape[0], Expr) and x.shape[0].is_const
                                and x.shape[0].value == 0)]
    dt = prism_dtype(node.meta["val"].dtype)
    xs = [x if x.dtype == dt else x.cast(dt) for x in xs]
    return _prism.concat(xs, _norm_axis(dim, xs[0].rank))


def _to_copy(L: Lowering, node: Any, x: Any, *a: Any, **kw: Any) -> Any:
    want = prism_dtype(node.meta["val"].dtype)
    return x if x.dtype == want else x.cast(want)


def _identity(L: Lowering, node: Any, x: Any, *a: Any, **kw: Any) -> Any:
    return x


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


def _full(L: Lowering, node: Any, size: Any, value: Any, **kw: Any) -> Any:
    val = node.meta["val"]
    return L.full(value, prism_dtype(val.dtype), shape_of(val))


def _scalar_tensor(L: Lowering, node: Any, value: Any, **kw: Any) -> Any:
    return L.full(value, prism_dtype(node.meta["val"].dtype), [])


def _arange(L: Lowering, node: Any, *args: Any, **kw: Any) -> Any:
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
    val = node.meta["val"]
    n = shape_of(val)[0]
    dt = prism_dtype(val.dtype)
    idx = L.g.iota([n], 0, "i32" if dt in ("i32", "i8", "u8") else "f32")
    if not isinstance(step, int) or step != 1:
        idx = idx.mul(float(step))
    if _is_sym(start) or (isinstance(start, (int, float)) and start != 0):
        s = L.g.value_of(to_expr(start), idx.dtype) if _is_sym(start) else float(start)
        idx = idx.add(s if isinstance(s, float) else s.broadcast_to([n]))
    return idx if idx.dtype == dt else idx.cast(dt)


def _is_sym(v: Any) -> bool:
    return isinstance(v, (torch.SymInt, Expr))


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


def _cumsum(L: Lowering, node: Any, x: Any, dim: int, **kw: Any) -> Any:
    """Prefix sums as a masked sum over the axis (j <= i): exact for the masks and counts it meets."""
    dim = _norm_axis(dim, x.rank)
    n = x.shape[dim]
    xf = x if x.dtype in ("f32",) else x.cast("f32")
    last = [i for i in range(x.rank) if i != dim] + [dim]
    xl = xf.permute(last) if dim != x.rank - 1 else xf            # [..., n]
    i = L.g.iota([n, n], 0, "i32")
    j = L.g.iota([n, n], 1, "i32")
    tri = _not(L, i.less(j)).cast("f32")                          # [i, j]: j <= i
    s = xl.reshape(list(xl.shape[:-1]) + [1, n]).mul(tri).sum([-1], False)  # [..., n(i)]
    if dim != x.rank - 1:
        inv = [0] * x.rank
        for k, a in enumerate(last):
            inv[a] = k
        s = s.permute(inv)
    return _as_result(L, node, s)


def _any(L: Lowering, node: Any, x: Any, dims: Any = None, keepdim: bool = False) -> Any:
    m = x.cast("f32").max(_axes(dims, x.rank), keepdim)
    return L.full(0.5, "f32", []).less(m)


def _full_like(L: Lowering, node: Any, x: Any, value: Any, **kw: Any) -> Any:
    val = node.meta["val"]
    return L.full(value, prism_dtype(val.dtype), shape_of(val))


def _gather(L: Lowering, node: Any, x: Any, dim: int, index: Any, **kw: Any) -> Any:
    return x.gather(index if index.dtype == "i32" else index.cast("i32"), dim)


def _softmax(log: bool) -> Callable:
    def h(L: Lowering, node: Any, x: Any, dim: int, half_to_float: bool = False) -> Any:
        y = x.log_softmax(dim) if log else x.softmax(dim)
        return _as_result(L, node, y)
    return h


def _pow(L: Lowering, node: Any, x: Any, p: Any) -> Any:
    if _t(p):
        raise Unsupported("pow with a tensor exponent")
    if isinstance(p, (int, float)) and float(p).is_integer() and 1 <= p <= 4:
        out = x
        for _ in range(int(p) - 1):
            out = out.mul(x)
        return _as_result(L, node, out)
    if p == 0.5:
        return x.sqrt()
    if p == -0.5:
        return x.rsqrt()
    if p == -1:
        return x.recip()
    return x.pow(float(p))


def _pow_scalar_base(L: Lowering, node: Any, base: Any, x: Any) -> Any:
    if base <= 0:
        raise Unsupported("pow of a non-positive base")
    return x.mul(math.log(base)).exp()


def _clamp(L: Lowering, node: Any, x: Any, lo: Any = None, hi: Any = None) -> Any:
    if lo is not None:
        x = x.maximum(lo)
    if hi is not None:
        x = x.minimum(hi)
    return x


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
    shape = [1, x.shape[1]] + [1] * (x.rank - 2)
    scale = var.add(eps).rsqrt()
    if w is not None:
        scale = scale.mul(w)
    y = x.sub(mean.reshape(shape)).mul(scale.reshape(shape))
    if b is not None:
        y = y.add(b.reshape(shape))
    return (y, None, None)


def _pair(v: Any, n: int = 2) -> List[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _windows(L: Lowering, x: Any, k: Sequence[int], stride: Sequence[int], pad: Sequence[int],
             dil: Sequence[int], out_hw: Sequence[Any], fill: Optional[float] = None) -> List[Any]:
    """The kh * kw strided windows of x [N, C, H, W] (padded) as [N, C, OH, OW] views, row-major."""
    if pad[0] or pad[1]:
        xp = x.pad(2, pad[0], pad[0]).pad(3, pad[1], pad[1])
        if fill is not None:  # padding reads as `fill` (max pooling pads with -inf)
            ones = L.full(1.0, "f32", x.shape).pad(2, pad[0], pad[0]).pad(3, pad[1], pad[1])
            xp = _prism.where(*_bc(L, ones.less(0.5), L.full(fill, x.dtype, []), xp))
    else:
        xp = x
    out = []
    for i in range(k[0]):
        for j in range(k[1]):
            w = xp.slice(2, i * dil[0], out_hw[0], stride[0]).slice(3, j * dil[1], out_hw[1], stride[1])
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
    wins = _windows(L, x, [KH, KW], _pair(stride), _pair(padding), _pair(dilation), [OH, OW])
    C = x.shape[1]
    if w.rank == 2:  # the weight bound as [O, C*KH*KW]: im2col rows times Wᵀ, the GEMM template's form
        cols = _prism.concat([v.reshape([N, C, 1, OH, OW]) for v in wins], 2)  # [N, C, KH*KW, OH, OW]
        rows = cols.permute([0, 3, 4, 1, 2]).reshape([N, OH, OW, Cg * KH * KW])
        rows = rows if rows.dtype == "f32" else rows.cast("f32")
        y = rows.linear(w)                                                    # [N, OH, OW, O]
        if b is not None:
            y = y.add(b if b.dtype == "f32" else b.cast("f32"))
        y = y.permute([0, 3, 1, 2])
        return _as_result(L, node, y)
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
    wins = _windows(L, x, k, s, _pair(padding), _pair(dilation), [out[2], out[3]], fill=-math.inf)
    y = wins[0]
    for v in wins[1:]:
        y = y.maximum(v)
    return (y, None)


def _avg_pool(L: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
              ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Any:
    k = _pair(kernel)
    s = _pair(stride) if stride else k
    p = _pair(padding)
    if (p[0] or p[1]) and not count_include_pad:
        raise Unsupported("avg_pool2d with count_include_pad=False")
    out = shape_of(node.meta["val"])
    wins = _windows(L, x, k, s, p, [1, 1], [out[2], out[3]])
    y = wins[0]
    for v in wins[1:]:
        y = y.add(v)
    return y.div(float(divisor_override or k[0] * k[1]))


def _adaptive_avg_pool(L: Lowering, node: Any, x: Any, size: Any) -> Any:
    if list(size) != [1, 1]:
        raise Unsupported("adaptive_avg_pool2d to other than 1x1")
    return x.mean([x.rank - 2, x.rank - 1], True)


def _getitem(L: Lowering, node: Any, xs: Any, i: int) -> Any:
    v = xs[i]
    if v is None:
        raise Unsupported("an output Prism does not compute (pooling indices, batch statistics)")
    return v


def _split_with_sizes(L: Lowering, node: Any, x: Any, sizes: Sequence[Any], dim: int = 0) -> Any:
    dim = _norm_axis(dim, x.rank)
    out, start = [], 0
    for s in sizes:
        e = to_expr(s)
        out.append(x.slice(dim, start, e, 1))
        start = e + start
    return out


HANDLERS: Dict[Any, Callable] = {
    aten.add: _binary("add"), aten.sub: _binary("sub"), aten.mul: _binary("mul"),
    aten.maximum: _binary("maximum"), aten.minimum: _binary("minimum"),
    aten.neg: lambda L, n, x: x.neg(),
    aten.exp: _unary(lambda x: x.exp()), aten.log: _unary(lambda x: x.log()),
    aten.sqrt: _unary(lambda x: x.sqrt()), aten.rsqrt: _unary(lambda x: x.rsqrt()),
    aten.reciprocal: _unary(lambda x: x.recip()), aten.sin: _unary(lambda x: x.sin()),
    aten.cos: _unary(lambda x: x.cos()), aten.tanh: _unary(lambda x: x.tanh()),
    aten.sigmoid: _unary(lambda x: x.sigmoid()), aten.erf: _unary(lambda x: x.erf()),
    aten.abs: lambda L, n, x: x.abs(), aten.relu: lambda L, n, x: x.maximum(0.0),
    aten.gelu: _gelu, aten.pow: None, aten.clamp: _clamp,
    aten.lt: _compare("lt"), aten.gt: _compare("gt"), aten.le: _compare("le"), aten.ge: _compare("ge"),
    aten.eq: _compare("eq"), aten.ne: _compare("ne"),
    aten.logical_not: lambda L, n, x: _not(L, x), aten.bitwise_not: lambda L, n, x: _not(L, x),
    aten.logical_and: lambda L, n, a, b: _and(L, a, b), aten.bitwise_and: lambda L, n, a, b: _and(L, a, b),
    aten.logical_or: lambda L, n, a, b: _or(L, a, b), aten.bitwise_or: lambda L, n, a, b: _or(L, a, b),
    aten.where: _where,
    aten.sum: _reduce("sum"), aten.mean: _reduce("mean"), aten.amax: _reduce("amax"), aten.amin: _reduce("amin"),
    aten.var: _var,
    aten.view: _view, aten._unsafe_view: _view, aten.reshape: _view, aten.permute: _permute,
    aten.expand: _expand, aten.slice: _slice, aten.select: _select, aten.unsqueeze: _unsqueeze,
    aten.squeeze: _squeeze, aten.cat: _cat, aten.split_with_sizes: _split_with_sizes,
    aten._to_copy: _to_copy, aten.clone: _identity, aten.alias: _identity, aten.lift_fresh_copy: _identity,
    aten.detach: _identity,
    aten.mm: _mm, aten.bmm: _mm, aten.addmm: _addmm,
    aten.full: _full, aten.scalar_tensor: _scalar_tensor, aten.arange: _arange,
    aten.cumsum: _cumsum, aten.any: _any, aten.full_like: _full_like,
    torch.ops.prims.convert_element_type: _to_copy,
    aten.embedding: _embedding, aten.index: _index, aten.gather: _gather,
    aten._softmax: _softmax(False), aten._log_softmax: _softmax(True),
    aten.native_layer_norm: _layer_norm,
    aten._native_batch_norm_legit_no_training: _batch_norm_inference,
    aten.convolution: _convolution, aten.max_pool2d_with_indices: _max_pool, aten.avg_pool2d: _avg_pool,
    aten._adaptive_avg_pool2d: _adaptive_avg_pool,
    operator.getitem: _getitem,
}


def _div(L: Lowering, node: Any, a: Any, b: Any, rounding_mode: Any = None) -> Any:
    if rounding_mode is not None:
        raise Unsupported(f"div with rounding_mode={rounding_mode}")
    if _t(a) and a.dtype not in ("f32", "f16", "bf16"):
        a = a.cast("f32")
    if _t(b) and b.dtype not in ("f32", "f16", "bf16"):
        b = b.cast("f32")
    return _as_result(L, node, _binary("div")(L, node, a, b))


def _pow_any(L: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _pow(L, node, a, b) if _t(a) else _pow_scalar_base(L, node, a, b)


HANDLERS[aten.div] = _div
HANDLERS[aten.true_divide] = _div
HANDLERS[aten.pow] = _pow_any


def _packet(target: Any) -> Any:
    return getattr(target, "overloadpacket", target)


def _vals(x: Any) -> List[Any]:
    return [v for v in (x if isinstance(x, (list, tuple)) else [x]) if isinstance(v, torch.Tensor)]


def supported(node: Any) -> bool:
    """Whether the node lowers: a handler for its operator, and types Prism computes in."""
    if node.op != "call_function" or _packet(node.target) not in HANDLERS:
        return False
    vals = _vals(node.meta.get("val"))
    for a in node.all_input_nodes:
        vals += _vals(a.meta.get("val"))
    if any(v.dtype not in DTYPES or (v.dtype == torch.float64 and v.dim() > 0) for v in vals):
        return False
    if any(v.is_complex() for v in vals):
        return False
    p = _packet(node.target)
    if p is aten.div and node.kwargs.get("rounding_mode") is not None:
        return False
    if p is aten.convolution and (node.args[6] or len(node.meta["val"].shape) != 4):
        return False
    if p is operator.getitem:
        src = node.args[0]
        return (supported(src) and not (_packet(src.target) in (aten.max_pool2d_with_indices,)
                                        and node.args[1] == 1)
                and not (_packet(src.target) is aten._native_batch_norm_legit_no_training and node.args[1] > 0))
    if p is aten.pow and isinstance(node.args[0], (int, float)) and node.args[0] <= 0:
        return False
    if p is aten.pow and len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node):
        return False
    if p is aten._adaptive_avg_pool2d and list(node.args[1]) != [1, 1]:
        return False
    if p is aten.avg_pool2d and len(node.args) > 5 and node.args[5] is False and any(_pair(node.args[3])):
        return False
    if p is aten.full and node.kwargs.get("dtype") not in (None,) + tuple(DTYPES):
        return False
    return True


def lower_node(L: Lowering, node: Any) -> Any:
    """The node's value in the Prism graph; raises Unsupported or PrismError (a shape Prism rejects)."""
    def arg(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return L.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        return a

    args = arg(node.args)
    kwargs = {k: arg(v) for k, v in node.kwargs.items()
              if k not in ("dtype", "layout", "device", "pin_memory", "memory_format", "non_blocking")}
    return HANDLERS[_packet(node.target)](L, node, *args, **kwargs)
