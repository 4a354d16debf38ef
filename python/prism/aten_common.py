"""What lowering ATen to Prism shares: dtypes, torch sizes as Prism sizes, the lowering state, and the
boolean and broadcasting helpers the operator handlers (aten_ops, aten_nn) are written with."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

import torch

from . import _prism
from ._prism import Expr

aten = torch.ops.aten

# torch dtype -> Prism dtype. int64 computes as int32 in Prism (ids, positions, sizes; values beyond
# 2^31 are outside what it handles). float64 has no Prism type: a float64 scalar (Dynamo passes Python
# floats such as a norm's eps as 0-d float64 tensors) computes as f32; float64 arrays run in PyTorch.

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

class Lowering:
    """State while one FX graph is lowered: the Prism graph and the value of every FX node."""

    def __init__(self) -> None:
        self.g = _prism.Graph()
        self.env: Dict[Any, Any] = {}
        # Channels-last twins: an FX node's 4-d value [N, C, H, W] also held as [N, H, W, C] (a
        # convolution's product comes out so; pointwise ops, norms and pooling keep it so), keyed by the
        # node, or by (node, i) for the i-th value of a tuple. The node's own value is then a view of it.
        self.nhwc: Dict[Any, Any] = {}
        self.conv_weight_order: Dict[Any, str] = {}  # a flat convolution weight's columns: "chw" or "hwc"

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

def _as_result(L: Lowering, node: Any, x: Any) -> Any:
    """Casts a handler's result to the dtype the node has in torch."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        want = prism_dtype(val.dtype)
        if x.dtype != want:
            x = x.cast(want)
    return x

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

def _packet(target: Any) -> Any:
    return getattr(target, "overloadpacket", target)
