"""torch.compile(model, backend="prism"): PyTorch graphs compiled and run by Prism.

Dynamo captures the model, AOTAutograd lowers it to ATen's core operators with PyTorch's own
decompositions, and each graph becomes one Prism graph of primitives (prism.aten_lowering), compiled
for the device and run on the inputs' memory. Dynamic sizes (dynamic=True, mark_dynamic) stay Prism
symbols, so one compiled program serves every size. Operators Prism does not lower run in eager
PyTorch for their part of the graph (one warning lists them); the rest still runs in Prism.

Options (torch.compile(..., options={...})): device ("cpu", "cuda", "opencl", "interp", "systolic[:NAME]"; default: cpu,
or cuda for CUDA inputs), threads (0: every core), search_budget (seconds of schedule search per graph
at its first sizes; default none: the tuning database's decisions and the defaults).

The package registers the backend through the torch_dynamo_backends entry point; from a build tree
call prism.torch_backend.register() first (or pass prism_backend itself as the backend).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import _prism
from .aten_common import DTYPES, Lowering, Unsupported, _packet, prism_dtype, shape_of, to_expr
from .aten_lowering import lower_node, supported
from .aten_nn import SDPA_OPS

# How many graphs this process handed to Prism (the tests count recompiles with it).
stats = {"graphs": 0, "programs": 0, "fallback_nodes": 0}

_SYM_OPS = {"sym_size", "sym_numel", "sym_stride"}


def _is_sym_node(node: torch.fx.Node) -> bool:
    """A node computing a size (an int or SymInt), not a tensor."""
    return node.op == "call_function" and isinstance(node.meta.get("val"), (int, torch.SymInt)) and not \
        isinstance(node.meta.get("val"), bool)


def _node_supported(node: torch.fx.Node) -> bool:
    return _is_sym_node(node) or supported(node)


def _conv_weight_only(n: torch.fx.Node) -> bool:
    """A 4-d parameter read only as the weight of 2-d convolutions without groups."""
    conv = torch.ops.aten.convolution
    return len(n.meta["val"].shape) == 4 and len(n.users) > 0 and all(
        getattr(u.target, "overloadpacket", None) is conv and u.args[1] is n and u.args[8] == 1 and not u.args[6]
        for u in n.users)


def _size_value(L: Lowering, n: torch.fx.Node) -> Any:
    """A size node's value: a tensor's size as Prism has it, or arithmetic on such sizes."""
    import operator

    def v(a: Any) -> Any:
        return L.env[a] if isinstance(a, torch.fx.Node) else a

    if n.target is torch.ops.aten.sym_size.int and isinstance(v(n.args[0]), _prism.Tensor):
        return v(n.args[0]).shape[n.args[1]]
    ops = {operator.add: lambda a, b: a + b, operator.mul: lambda a, b: a * b, operator.sub: lambda a, b: a - b,
           operator.floordiv: lambda a, b: a // b, operator.mod: lambda a, b: a % b}
    if n.target in ops and len(n.args) == 2:
        a, b = (v(x) for x in n.args)
        if all(isinstance(x, (int, _prism.Expr)) for x in (a, b)):
            return ops[n.target](a, b)
    val = n.meta["val"]
    return to_expr(val) if isinstance(val, torch.SymInt) else val


def _one_kv_length(graph: torch.fx.Graph) -> None:
    """Tells PyTorch's shape environment that attention's keys and values have one length (a guard, as the
    decomposed attention's matmul would have made), so every size derived from either is one symbol."""
    for n in graph.nodes:
        if n.op == "call_function" and _packet(n.target) in SDPA_OPS:
            k, v = (a.meta["val"] for a in n.args[1:3])
            if not bool(k.shape[-2] == v.shape[-2]):
                raise Unsupported("attention whose keys and values differ in length")


class PrismGraph(torch.nn.Module):
    """One FX graph of ATen core operators compiled by Prism, called with the graph's inputs."""

    def __init__(self, graph: torch.fx.Graph, weights: Sequence[bool], constants: Dict[str, torch.Tensor],
                 device: str, threads: int, search_budget: Optional[float]):
        super().__init__()
        L = Lowering()
        self.in_names: List[Optional[str]] = []    # Prism input (or weight) name per placeholder
        self.in_dtypes: List[Optional[str]] = []
        self.weight_of: Dict[str, int] = {}         # weight name -> placeholder index
        self.flat_weights: set = set()              # convolution weights bound as matrices
        self.sym_dims: List[Tuple[str, int, int]] = []  # (symbol, placeholder, axis) bound from shapes
        self.sym_args: List[Tuple[str, int]] = []       # (symbol, placeholder) passed as ints
        self.constants: Dict[str, torch.Tensor] = {}
        self.outputs: List[Tuple[str, Any]] = []        # ("prism", dtype) | ("input", i) | ("value", v)
        self.out_tree: Any = None
        _one_kv_length(graph)
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for i, n in enumerate(placeholders):
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor):
                dt = prism_dtype(val.dtype)
                shape = shape_of(val)
                name = f"w{i}" if i < len(weights) and weights[i] else f"in{i}"
                if name[0] == "w" and _conv_weight_only(n):  # bound as [O, C*KH*KW]: the GEMM's weight
                    shape = [shape[0], shape[1] * shape[2] * shape[3]]
                    self.flat_weights.add(name)
                L.env[n] = (L.g.weight if name[0] == "w" else L.g.input)(name, dt, shape)
                if name[0] == "w":
                    self.weight_of[name] = i
                for axis, d in enumerate(shape):
                    if isinstance(d, _prism.Expr) and not d.is_const and str(d) == d.symbols()[0]:
                        self.sym_dims.append((str(d), i, axis))
                self.in_names.append(name)
                self.in_dtypes.append(dt)
            else:
                e = to_expr(val) if isinstance(val, torch.SymInt) else None
                if isinstance(e, _prism.Expr) and not e.is_const and str(e) == e.symbols()[0]:
                    self.sym_args.append((str(e), i))
                L.env[n] = e if e is not None else val
                self.in_names.append(None)
                self.in_dtypes.append(None)
        for n in graph.nodes:
            if n.op == "get_attr":
                t = constants[n.target]  # bound at the first call (here, fake tensors are being traced)
                if t.numel() <= 1:  # an empty or one-element constant is a Prism constant
                    value = float(t.reshape(-1)[0]) if t.numel() else 0.0
                    L.env[n] = L.full(value, prism_dtype(t.dtype), list(t.shape))
                    continue
                name = f"c{len(self.constants)}"
                L.env[n] = L.g.weight(name, prism_dtype(t.dtype), list(t.shape))
                self.constants[name] = t
            elif n.op == "call_function":
                L.env[n] = _size_value(L, n) if _is_sym_node(n) else lower_node(L, n)
            elif n.op == "output":
                self.out_tree = n.args[0]
        flat = self.out_tree if isinstance(self.out_tree, (list, tuple)) else [self.out_tree]
        index = {n: i for i, n in enumerate(placeholders)}
        # convolution weights whose columns the lowering reads in (KH, KW, C) order (channels-last rows)
        self.hwc_weights = {self.in_names[index[n]] for n, order in L.conv_weight_order.items()
                            if order == "hwc" and n in index}
        self.kept: Dict[str, torch.Tensor] = {}  # each weight as bound
        for k, o in enumerate(flat):
            if isinstance(o, torch.fx.Node) and o.op == "placeholder":
                self.outputs.append(("input", index[o]))
            elif isinstance(o, torch.fx.Node) and isinstance(L.env[o], _prism.Tensor):
                L.g.output(L.env[o], f"out{k}")
                self.outputs.append(("prism", o.meta["val"].dtype))
            else:
                self.outputs.append(("value", L.env[o] if isinstance(o, torch.fx.Node) else o))
        self.program = L.g.compile(device, threads)
        self.bound: Dict[str, int] = {}
        self.search_budget = search_budget
        stats["programs"] += 1

    def _host(self, t: torch.Tensor, dt: str) -> torch.Tensor:
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if DTYPES.get(t.dtype) != dt or t.dtype in (torch.int64, torch.float64):
            t = t.to({"i32": torch.int32, "f32": torch.float32, "bool": torch.bool}.get(dt, t.dtype))
        return t.contiguous()

    def forward(self, *args: Any) -> Any:
        inputs, syms = {}, {}
        for name, i, axis in self.sym_dims:
            syms[name] = int(args[i].shape[axis])
        for name, i in self.sym_args:
            syms[name] = int(args[i])
        for i, name in enumerate(self.in_names):
            if name is None:
                continue
            if name in self.weight_of:
                key = args[i].data_ptr()  # the parameter where the caller holds it (a GPU's too)
                if self.bound.get(name) == key:  # bound once; again if the parameter moved
                    continue
                t = self._host(args[i], self.in_dtypes[i])
                if name in self.hwc_weights:  # [O, C, KH, KW] as [O, KH*KW*C]: a copy
                    t = t.permute(0, 2, 3, 1).reshape(t.shape[0], -1).contiguous()
                elif name in self.flat_weights:
                    t = t.reshape(t.shape[0], -1)  # a view: no copy
                self.kept[name] = t  # the bytes bound (a host copy of a GPU parameter): alive while bound
                self.program.bind_weight(name, t)
                self.bound[name] = key
            else:
                inputs[name] = self._host(args[i], self.in_dtypes[i])
        for name, t in self.constants.items():
            if name not in self.bound:
                t = self._host(t, prism_dtype(t.dtype))
                self.constants[name] = t  # kept alive with the program's binding
                self.program.bind_weight(name, t)
                self.bound[name] = t.data_ptr()
        if self.search_budget:
            self.program.search(syms, float(self.search_budget))
            self.search_budget = None
        results = iter(self.program.run(inputs, syms))
        out_device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        outs = []
        for kind, v in self.outputs:
            if kind == "input":
                outs.append(args[v])
            elif kind == "value":
                outs.append(v.eval(syms) if isinstance(v, _prism.Expr) else v)
            else:
                t = torch.from_numpy(next(results))
                if t.dtype != v:
                    t = t.to(v)
                outs.append(t.to(out_device) if out_device.type != "cpu" else t)
        if isinstance(self.out_tree, (list, tuple)):
            return type(self.out_tree)(outs)
        return outs[0]


def _fallback_names(nodes: Sequence[torch.fx.Node]) -> List[str]:
    return sorted({str(getattr(n.target, "overloadpacket", n.target)) for n in nodes})


def compile_aten(gm: torch.fx.GraphModule, weights: Sequence[bool], device: str, threads: int,
                 search_budget: Optional[float]) -> Callable:
    """Compiles an ATen-level graph module: whole in Prism, or its lowerable parts in Prism and the
    rest in eager PyTorch (with one warning naming the operators left to PyTorch)."""
    stats["graphs"] += 1
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    unsupported = [n for n in calls if not _node_supported(n)]
    constants = {n.target: getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    if not unsupported:
        try:
            return PrismGraph(gm.graph, weights, constants, device, threads, search_budget)
        except Unsupported as e:  # a case the support check let through: the graph stays in PyTorch
            warnings.warn(f"prism: this graph runs in eager PyTorch ({e})")
            return gm
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
            return node.op == "call_function" and _node_supported(node)

    stats["fallback_nodes"] += len(unsupported)
    warnings.warn("prism: these operators run in eager PyTorch: " + ", ".join(_fallback_names(unsupported)))
    wflag = {n: bool(weights[i]) for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")
             if i < len(weights)}
    fused = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=False).partition_and_fuse()
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        for ph, a in zip([n for n in sub.graph.nodes if n.op == "placeholder"], node.args):
            ph.meta = dict(a.meta)
        sub_weights = [wflag.get(a, False) for a in node.args]
        try:
            compiled = PrismGraph(sub.graph, sub_weights, {n.target: getattr(sub, n.target) for n in
                                                           sub.graph.nodes if n.op == "get_attr"},
                                  device, threads, search_budget)
        except Unsupported:
            continue  # this part stays in PyTorch
        delattr(fused, node.target)
        fused.add_submodule(node.target, compiled)
    fused.recompile()
    return fused


def prism_backend(gm: torch.fx.GraphModule, example_inputs: List[Any], **kwargs: Any) -> Callable:
    """The torch.compile backend: torch.compile(model, backend="prism", options={...})."""
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    options = kwargs.get("options") or {}
    cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs)
    device = options.get("device", "cuda" if cuda else "cpu")
    threads = int(options.get("threads", 0))
    budget = options.get("search_budget")
    # Parameters are bound once as Prism weights (the GEMM templates read weights as stored); the rest
    # are inputs of every call. AOTAutograd keeps the order of the inputs in an inference graph.
    params = [isinstance(x, torch.nn.Parameter) for x in example_inputs]

    def fw(fgm: torch.fx.GraphModule, fx_inputs: List[Any]) -> Callable:
        n_in = sum(1 for n in fgm.graph.nodes if n.op == "placeholder")
        return compile_aten(fgm, params if n_in == len(params) else [], device, threads, budget)

    def bw(bgm: torch.fx.GraphModule, bx_inputs: List[Any]) -> Callable:
        return bgm  # gradients run in PyTorch: Prism compiles inference

    # Attention stays whole (prism.aten_nn lowers it to the form the fused template takes).
    decompositions = core_aten_decompositions()
    for op in SDPA_OPS:
        decompositions.pop(op.default, None)
    return aot_autograd(fw_compiler=fw, bw_compiler=bw, decompositions=decompositions)(gm, example_inputs)


def register() -> None:
    """Registers backend="prism" with torch.compile (the installed package does so through its entry
    point; this is for a build tree on the path)."""
    from torch._dynamo.backends import registry

    registry._lazy_import()
    if "prism" not in registry._COMPILER_FNS:
        if registry._BACKENDS.get("prism") is not None:
            registry.lookup_backend("prism")
        else:
            registry.register_backend(compiler_fn=prism_backend, name="prism")
