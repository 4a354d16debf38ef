"""Prism from Python: load and run language models, compile them with a schedule search, build graphs.

    import prism
    model = prism.load("model.gguf", threads=4)          # HF folder, GGUF, llama2.c or a compiled artifact
    for piece in model.generate("Once upon a time", max_tokens=64, temperature=0):
        print(piece, end="", flush=True)
    logits = model.logits([1, 2, 3])                     # numpy [3, vocab], no copy
    result = prism.compile("model.gguf", "model.prism", search_budget=60)

`torch.compile(module, backend="prism")` runs PyTorch modules through Prism (prism.torch_backend).
Errors are prism.PrismError (a ValueError) with Prism's one-line message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from . import _prism
from ._prism import Expr, Graph, PrismError, Program, Tensor, concat, where  # noqa: F401

__all__ = [
    "load", "compile", "Model", "Tokenizer", "Generation", "CompileResult", "Receipt", "PrismError",
    "Graph", "Tensor", "Program", "Expr", "where", "concat", "default_model",
]

Tokenizer = _prism.Tokenizer
Generation = _prism.Generation


def default_model() -> str:
    """The path of stories260K, the tiny Llama shipped with Prism (in the package or the source tree)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for base in (os.path.join(here, "models"), os.path.join(here, "..", "..", "..", "models")):
        path = os.path.join(base, "stories260K", "stories260K.bin")
        if os.path.exists(path):
            return os.path.normpath(path)
    raise PrismError("the shipped stories260K model is not beside this prism package: pass a model path")


class Model:
    """A language model ready to run (made by prism.load): weights, tokenizer and compiled step.

    One generation at a time owns the model's KV cache: starting another, or calling logits(), ends
    the one in progress (its next step raises PrismError).
    """

    def __init__(self, native: Any, path: str):
        self._m = native
        self.path = path
        self.tokenizer: Tokenizer = _prism._tokenizer(native)

    @property
    def device(self) -> str:
        return self._m.device

    @property
    def max_context(self) -> int:
        return self._m.max_context

    @property
    def vocab_size(self) -> int:
        return self._m.vocab_size

    def generate(
        self,
        prompt: Union[str, Sequence[int], None] = None,
        *,
        messages: Optional[Sequence[dict]] = None,
        max_tokens: int = 256,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        seed: int = 0xC0FFEE,
        stop: Sequence[str] = (),
        stop_at_eos: bool = True,
    ) -> Generation:
        """Streams generated text: iterate for the pieces as they complete.

        Give a prompt (text, or token ids) or chat `messages` ([{"role": ..., "content": ...}], rendered
        with the model's own chat template). temperature 0 is greedy. After the iteration ends,
        `.text`, `.tokens` and `.finish_reason` ("stop", "length" or "context") describe the whole.
        """
        if (prompt is None) == (messages is None):
            raise PrismError("generate: give either a prompt or messages")
        ids = _prism._encode_prompt(self._m, prompt, messages)
        return _prism._generate(self._m, ids, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty,
                                presence_penalty, frequency_penalty, seed, list(stop), stop_at_eos)

    def complete(self, prompt: Union[str, Sequence[int], None] = None, **kwargs: Any) -> str:
        """generate(...) run to the end; returns the whole text."""
        g = self.generate(prompt, **kwargs)
        for _ in g:
            pass
        return g.text

    def logits(self, token_ids: Any):
        """Logits of every position of a fresh sequence: numpy float32 [len(token_ids), vocab].

        token_ids: a list of ints, or a rank-1 integer array (numpy or torch).
        """
        return _prism._logits(self._m, token_ids)

    def __repr__(self) -> str:
        return f"prism.Model({self.path!r}, device={self.device!r}, max_context={self.max_context})"


def load(
    path: Optional[Union[str, os.PathLike]] = None,
    *,
    device: str = "cpu",
    threads: int = 0,
    ctx: int = 0,
    search_budget: Optional[float] = None,
    tokenizer: Optional[str] = None,
    exact: bool = False,
) -> Model:
    """Loads anything `prism run` reads: a Hugging Face folder, a .gguf file, a llama2.c checkpoint
    (tokenizer beside it or given), or an artifact folder written by prism.compile.

    device: "cpu", "opencl", "cuda" or "interp"; threads: 0 for every core; ctx: the context in tokens
    (0: the model's, capped at 4096); search_budget: seconds of schedule search at load (None: the
    tuning database's decisions only); exact: quantized weights' products in f32 against the activation as
    given (default: int8 dot products against it rounded per 32 values, as llama.cpp computes them).
    """
    path = os.fspath(path) if path is not None else default_model()
    budget = -1.0 if search_budget is None else float(search_budget)
    return Model(_prism._load(path, device, threads, ctx, budget, tokenizer or "", exact), path)


@dataclass
class Receipt:
    """One schedule decision of a compile: which kernel, at which size bucket, what was chosen and why."""

    kernel: str
    bucket: str
    chosen: str
    reason: str
    median_us: Optional[float] = None
    fraction_of_roofline: Optional[float] = None
    roofline_flag: Optional[str] = None  # set when the fraction is above 1: the floor, not the kernel, is wrong
    candidates: list = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def from_json(r: dict) -> "Receipt":
        return Receipt(kernel=r.get("kernel", ""), bucket=r.get("bucket", ""), chosen=r.get("chosen", ""),
                       reason=r.get("reason", ""), median_us=r.get("median_us"),
                       fraction_of_roofline=r.get("fraction_of_roofline"), roofline_flag=r.get("roofline_flag"),
                       candidates=r.get("candidates", []), raw=r)


@dataclass
class CompileResult:
    """What prism.compile wrote: the artifact folder, its kernel count and every decision's receipt."""

    path: str
    kernels: int
    receipts: list

    @property
    def searched(self) -> list:
        return [r for r in self.receipts if r.candidates]

    @property
    def from_database(self) -> list:
        return [r for r in self.receipts if r.reason == "tuning database"]


def compile(
    path: Optional[Union[str, os.PathLike]],
    out: Union[str, os.PathLike],
    *,
    search_budget: float = 60,
    threads: int = 0,
    ctx: int = 0,
    device: str = "cpu",
    tokenizer: Optional[str] = None,
) -> CompileResult:
    """`prism compile`: compiles a model, times its rewritten programs and searches their kernels'
    schedules within search_budget seconds in all, the programs sharing it (decisions the tuning database
    holds cost nothing),
    writes an artifact folder that prism.load reads without compiling, and returns the receipts."""
    path = os.fspath(path) if path is not None else default_model()
    receipts, kernels = _prism._compile(path, os.fspath(out), float(search_budget), threads, ctx, device,
                                        tokenizer or "")
    return CompileResult(os.fspath(out), kernels, [Receipt.from_json(r) for r in receipts])

