"""ATen core operators as Prism graph ops: the elementwise, reduction, view and creation handlers, the
table of every handler (with aten_nn's), the support check and the per-node lowering.

lower_node() gives an FX node of ATen core operators (torch's own decompositions applied) its value in a
prism.Graph. supported() says, node by node, whether a handler exists and accepts the node as typed (the
torch backend runs the other nodes in eager PyTorch). Sizes stay symbolic: torch's shape symbols (s0,
s1, ...) become Prism symbols of the same names.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Dict, List, Sequence

import torch

from . import _prism
from .aten_common import (DTYPES, Expr, Lowering, Unsupported, _and, _as_result, _axes, _bc, _isnan, _norm_axis,
                          _not, _or, _packet, _sym_operand, _t, aten, prism_dtype, shape_of, to_expr)
from .aten_nn import NN_HANDLERS, SDPA_OPS, _pair, sdpa_args

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
    try:
        return x.expand(out)
    except _prism.PrismError as e:  # sizes equal only under PyTorch's guards (Hk * (Hq // Hk) to Hq)
        raise Unsupported(f"sizes Prism cannot prove equal: {e}") from e

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

def _constant_pad_nd(L: Lowering, node: Any, x: Any, pad: Sequence[Any], value: Any = 0) -> Any:
    """F.pad's constant mode: pad[2i] and pad[2i + 1] widen axis rank - 1 - i before and after (a negative
    amount crops); the new cells read `value` (CUDA's memory-efficient attention pads its mask so)."""
    marks = None if not value else L.full(1.0, "f32", x.shape)  # x's own cells, under a nonzero fill
    for i in range(len(pad) // 2):
        axis = x.rank - 1 - i
        lo, hi = (p if isinstance(p, (int, Expr)) else to_expr(p) for p in pad[2 * i:2 * i + 2])
        crop = [-p if isinstance(p, int) and p < 0 else 0 for p in (lo, hi)]
        if crop[0] or crop[1]:
            size = x.shape[axis] - crop[0] - crop[1]
            x, marks = (t if t is None else t.slice(axis, crop[0], size, 1) for t in (x, marks))
        lo, hi = (0 if c else p for p, c in zip((lo, hi), crop))
        x, marks = (t if t is None else t.pad(axis, lo, hi) for t in (x, marks))
    if marks is not None:
        x = _prism.where(*_bc(L, marks.less(0.5), L.full(value, x.dtype, []), x))
    return x

def _to_copy(L: Lowering, node: Any, x: Any, *a: Any, **kw: Any) -> Any:
    want = prism_dtype(node.meta["val"].dtype)
    return x if x.dtype == want else x.cast(want)

def _identity(L: Lowering, node: Any, x: Any, *a: Any, **kw: Any) -> Any:
    return x

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

def _int_pow(x: Any, n: int) -> Any:
    """x ** n for an integer n >= 1 by repeated squaring: exact signs for negative bases."""
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else result.mul(base)
        n >>= 1
        if n:
            base = base.mul(base)
    return result

def _pow(L: Lowering, node: Any, x: Any, p: Any) -> Any:
    if _t(p):
        raise Unsupported("pow with a tensor exponent")
    if p == 0.5:
        return x.sqrt()
    if p == -0.5:
        return x.rsqrt()
    if isinstance(p, (int, float)) and float(p).is_integer():
        n = int(p)
        if n == 0:  # torch: x ** 0 is 1 everywhere, NaN included
            val = node.meta["val"]
            return L.full(1, prism_dtype(val.dtype), shape_of(val))
        if abs(n) <= 64:
            out = _int_pow(x, abs(n))
        else:  # |x| ** n through exp2/log2, negated for a negative base and an odd n
            mag = x.abs().pow(float(abs(n)))
            out = _prism.where(*_bc(L, x.less(L.full(0, x.dtype, [])), mag.neg(), mag)) if n % 2 else mag
        return _as_result(L, node, out if n > 0 else out.recip())
    return x.pow(float(p))  # a negative base gives NaN, as in torch

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

def _getitem(L: Lowering, node: Any, xs: Any, i: int) -> Any:
    v = xs[i]
    if v is None:
        raise Unsupported("an output Prism does not compute (pooling indices, batch statistics)")
    if (node.args[0], i) in L.nhwc:
        L.nhwc[node] = L.nhwc[(node.args[0], i)]
    return v

def _split_with_sizes(L: Lowering, node: Any, x: Any, sizes: Sequence[Any], dim: int = 0) -> Any:
    dim = _norm_axis(dim, x.rank)
    out, start = [], 0
    for s in sizes:
        e = to_expr(s)
        out.append(x.slice(dim, start, e, 1))
        start = e + start
    return out


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

HANDLERS: Dict[Any, Callable] = {
    aten.add: _binary("add"), aten.sub: _binary("sub"), aten.mul: _binary("mul"), aten.div: _div,
    aten.true_divide: _div, aten.maximum: _binary("maximum"), aten.minimum: _binary("minimum"),
    aten.neg: lambda L, n, x: x.neg(), aten.pow: _pow_any, aten.clamp: _clamp,
    aten.exp: _unary(lambda x: x.exp()), aten.log: _unary(lambda x: x.log()),
    aten.sqrt: _unary(lambda x: x.sqrt()), aten.rsqrt: _unary(lambda x: x.rsqrt()),
    aten.reciprocal: _unary(lambda x: x.recip()), aten.sin: _unary(lambda x: x.sin()),
    aten.cos: _unary(lambda x: x.cos()), aten.tanh: _unary(lambda x: x.tanh()),
    aten.sigmoid: _unary(lambda x: x.sigmoid()), aten.erf: _unary(lambda x: x.erf()),
    aten.abs: lambda L, n, x: x.abs(), aten.relu: lambda L, n, x: x.maximum(0.0),
    aten.lt: _compare("lt"), aten.gt: _compare("gt"), aten.le: _compare("le"), aten.ge: _compare("ge"),
    aten.eq: _compare("eq"), aten.ne: _compare("ne"),
    aten.logical_not: lambda L, n, x: _not(L, x), aten.bitwise_not: lambda L, n, x: _not(L, x),
    aten.logical_and: lambda L, n, a, b: _and(L, a, b), aten.bitwise_and: lambda L, n, a, b: _and(L, a, b),
    aten.logical_or: lambda L, n, a, b: _or(L, a, b), aten.bitwise_or: lambda L, n, a, b: _or(L, a, b),
    aten.where: _where,
    aten.sum: _reduce("sum"), aten.mean: _reduce("mean"), aten.amax: _reduce("amax"), aten.amin: _reduce("amin"),
    aten.var: _var, aten.any: _any, aten.cumsum: _cumsum,
    aten.view: _view, aten._unsafe_view: _view, aten.reshape: _view, aten.permute: _permute,
    aten.expand: _expand, aten.slice: _slice, aten.select: _select, aten.unsqueeze: _unsqueeze,
    aten.squeeze: _squeeze, aten.cat: _cat, aten.split_with_sizes: _split_with_sizes,
    aten.constant_pad_nd: _constant_pad_nd,
    aten._to_copy: _to_copy, torch.ops.prims.convert_element_type: _to_copy, aten.clone: _identity,
    aten.alias: _identity, aten.lift_fresh_copy: _identity, aten.detach: _identity,
    aten.full: _full, aten.full_like: _full_like, aten.scalar_tensor: _scalar_tensor, aten.arange: _arange,
    operator.getitem: _getitem,
    **NN_HANDLERS,
}


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
                and not (_packet(src.target) is aten._native_batch_norm_legit_no_training and node.args[1] > 0)
                and not (_packet(src.target) in SDPA_OPS and node.args[1] > 0))
    if p in SDPA_OPS:
        a = sdpa_args(node.target, node.args, node.kwargs)
        q, k = a["query"].meta["val"], a["key"].meta["val"]
        if a.get("dropout_p", 0) != 0 or q.dim() != 4:
            return False  # dropout, or not [batch, heads, seq, head_dim]
        if not (isinstance(q.shape[1], int) and isinstance(k.shape[1], int)) and str(q.shape[1]) != str(k.shape[1]):
            return False  # grouped heads whose counts are symbolic
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
    handler = HANDLERS[_packet(node.target)]
    if _packet(node.target) in POINTWISE:
        twin = _channels_last(L, node, handler, args, kwargs)
        if twin is not None:
            L.nhwc[node] = twin
            return twin.permute([0, 3, 1, 2])
    return handler(L, node, *args, **kwargs)

# Elementwise operators: over channels-last operands they give the channels-last result.
POINTWISE = {aten.add, aten.sub, aten.mul, aten.div, aten.true_divide, aten.maximum, aten.minimum, aten.neg,
             aten.pow, aten.clamp, aten.exp, aten.log, aten.sqrt, aten.rsqrt, aten.reciprocal, aten.sin, aten.cos,
             aten.tanh, aten.sigmoid, aten.erf, aten.abs, aten.relu, aten.where, aten.gelu, aten._to_copy,
             torch.ops.prims.convert_element_type, aten.clone, aten.alias, aten.detach}

def _channels_last(L: Lowering, node: Any, handler: Callable, args: Any, kwargs: Dict[str, Any]) -> Any:
    """A pointwise node with a 4-d result, one of whose operands has a channels-last twin, computed over
    the twins (the other tensors viewed channels-last: [1, C, 1, 1] as [1, 1, 1, C]); None otherwise."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 4:
        return None
    if not any(isinstance(a, torch.fx.Node) and a in L.nhwc for a in node.args):
        return None
    twins = []
    for a, v in zip(node.args, args):
        if isinstance(a, torch.fx.Node) and a in L.nhwc:
            twins.append(L.nhwc[a])
        elif _t(v) and v.rank > 4:
            return None
        elif _t(v) and v.rank > 0:  # broadcast as torch does: leading 1s to rank 4, then channels last
            twins.append(v.reshape([1] * (4 - v.rank) + list(v.shape)).permute([0, 2, 3, 1]))
        else:
            twins.append(v)
    return handler(L, node, *twins, **kwargs)
