#!/usr/bin/env python3
"""torch.compile(backend="prism") against eager PyTorch and backend="inductor" on the CPU, same threads.

Workloads: the Llama-3.2-1B shape (transformers' LlamaForCausalLM, random bf16 weights) prefill forward at
128 and 512 tokens and a decode step over a KV cache, and a small convolutional network at batch 1 and
32. Each backend compiles once (dynamic sizes); times are medians of --reps runs after warm-up, in one
process on the same weights: the 1B shape one backend after another, the ConvNet in interleaved rounds.
Prints a table and writes --json.

    python3 bench/torch_compile.py --threads 2 --layers 16 --search-budget 120
    python3 bench/torch_compile.py --threads 2 --layers 2 --reps 3     # a quick look
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "build", "python"))  # the build tree's package, if not installed


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def timed(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


class ConvNet(torch.nn.Module):
    """A small image classifier: three conv + batch-norm + ReLU stages, pooling, a linear head."""

    def __init__(self):
        super().__init__()
        chans = [3, 32, 64, 128]
        layers = []
        for i in range(3):
            layers += [torch.nn.Conv2d(chans[i], chans[i + 1], 3, stride=1 if i == 0 else 2, padding=1),
                       torch.nn.BatchNorm2d(chans[i + 1]), torch.nn.ReLU()]
            if i == 0:
                layers.append(torch.nn.MaxPool2d(2))
        self.body = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.head(torch.nn.functional.adaptive_avg_pool2d(self.body(x), 1).flatten(1))


def backends(args):
    import prism.torch_backend as tb

    tb.register()
    opts = {"threads": args.threads}
    if args.search_budget:
        opts["search_budget"] = args.search_budget
    return {
        "eager": lambda m: m,
        "inductor": lambda m: torch.compile(m, backend="inductor", dynamic=True),
        "prism": lambda m: torch.compile(m, backend="prism", dynamic=True, options=opts),
    }


def llama_rows(args, makers):
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=args.layers,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0,
                      max_position_embeddings=2048, tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    rows = {}
    for name, make in makers.items():
        torch._dynamo.reset()
        m = make(model)
        with torch.no_grad():
            t0 = time.perf_counter()
            m(input_ids=torch.randint(0, 32000, (1, 16)), use_cache=False)  # compiles
            compile_s = time.perf_counter() - t0
            for n in args.prompts:
                ids = torch.randint(0, 32000, (1, n))
                s = timed(lambda: m(input_ids=ids, use_cache=False), args.reps)
                rows.setdefault(f"prefill {n} tokens/s", {})[name] = n / s
            # decode: one token over a cache of --past tokens, each step from the same cache length
            past_ids = torch.randint(0, 32000, (1, args.past))
            base = m(input_ids=past_ids, use_cache=True).past_key_values
            nxt = torch.randint(0, 32000, (1, 1))

            def step():
                cache = DynamicCache()
                for i, layer in enumerate(base.layers):
                    cache.update(layer.keys.clone(), layer.values.clone(), i)
                t = time.perf_counter()
                m(input_ids=nxt, past_key_values=cache, use_cache=True)
                return time.perf_counter() - t

            for _ in range(2):
                step()
            s = statistics.median(step() for _ in range(args.reps))
            rows.setdefault(f"decode step at {args.past} tokens/s", {})[name] = 1 / s
            rows.setdefault("compile seconds (1B shape)", {})[name] = compile_s
        print(f"  llama1b-shape {name}: done", file=sys.stderr, flush=True)
    return rows


def conv_rows(args, makers):
    """Every backend compiled and warmed first, then timed in interleaved rounds (eager, inductor, prism,
    eager, ...), medians over --reps rounds: this host's load drifts within seconds, and one backend timed
    after another showed ratios that moved by 2x run to run. Each sample is the mean of 10 calls after
    30 ms of untimed calls: PyTorch's OpenMP workers keep spinning for milliseconds after their last
    parallel region, and the first batch-1 calls of the backend timed next ran 3x slower while they did."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    net = ConvNet().eval()
    models = {name: make(net) for name, make in makers.items()}
    inputs = {b: torch.randn(b, 3, 64, 64) for b in (1, 32)}
    rows = {}
    with torch.no_grad():
        for x in inputs.values():
            for m in models.values():
                m(x), m(x)  # compiles (once per backend and batch-size class) and warms up
        graphs = counters["stats"]["unique_graphs"]
        for b, x in inputs.items():
            samples = {name: [] for name in models}
            for _ in range(args.reps):
                for name, m in models.items():
                    t = time.perf_counter()
                    while time.perf_counter() - t < 0.03:
                        m(x)
                    t = time.perf_counter()
                    for _ in range(10):
                        m(x)
                    samples[name].append((time.perf_counter() - t) / 10)
            for name, ts in samples.items():
                rows.setdefault(f"convnet batch {b} images/s", {})[name] = b / statistics.median(ts)
        if counters["stats"]["unique_graphs"] != graphs:
            print("warning: a backend recompiled while being timed", file=sys.stderr)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--layers", type=int, default=16, help="decoder layers of the 1B shape (16: the real depth)")
    p.add_argument("--prompts", type=int, nargs="*", default=[128, 512], help="prefill lengths (none: decode only)")
    p.add_argument("--past", type=int, default=128, help="KV-cache length of the decode step")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--search-budget", type=float, default=0, help="Prism's schedule search per graph, seconds")
    p.add_argument("--skip", nargs="*", default=[], help="workloads to skip: llama, conv")
    p.add_argument("--json", default="bench/results/torch_compile.json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    makers = backends(args)
    rows = {}
    if "conv" not in args.skip:
        rows.update(conv_rows(args, makers))
    if "llama" not in args.skip:
        rows.update(llama_rows(args, makers))
    print(f"CPU: {cpu_name()}, {args.threads} threads, torch {torch.__version__}")
    print(f"{'workload':<34} {'eager':>10} {'inductor':>10} {'prism':>10} {'/eager':>8} {'/inductor':>10}")
    for what, r in rows.items():
        if what.startswith("compile"):  # seconds: no ratio
            print(f"{what:<34} {r['eager']:>10.2f} {r['inductor']:>10.2f} {r['prism']:>10.2f}")
            continue
        print(f"{what:<34} {r['eager']:>10.2f} {r['inductor']:>10.2f} {r['prism']:>10.2f} "
              f"{r['prism'] / r['eager']:>7.2f}x {r['prism'] / r['inductor']:>9.2f}x")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"cpu": cpu_name(), "threads": args.threads, "torch": torch.__version__, "layers": args.layers,
                   "search_budget": args.search_budget, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
