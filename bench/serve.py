#!/usr/bin/env python3
# Serving benchmark: an async load generator on the official openai client at several concurrencies,
# against `prism serve` and (when given or installed) llama.cpp's llama-server and llama-cpp-python's
# server on the same GGUF file and threads. Reports output tokens/s, time to first token and
# inter-token latency (p50, p99), and that every request got a complete answer.
#
#   python3 bench/serve.py                                    # stories260K, Prism only
#   python3 bench/serve.py --models bench/models/llama1b-shape-q4_0.gguf --llama-server PATH
#   python3 bench/serve.py --unloaded 5      # time to first token after --idle-unload freed the model
import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    "Once upon a time",
    "Lily saw a big red ball in the park and",
    "The dog",
    "Tom and Sue went to the beach. They wanted to build a castle, but the waves",
    "One day, a little bird",
    "Mom said that the cake",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine:
    """A server process on the loopback address, stopped on exit."""

    def __init__(self, name, cmd, port=None, env=None):
        self.name = name
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env=dict(os.environ, **(env or {})))
        if port is None:  # prism serve --port 0 prints where it listens
            line = self.proc.stderr.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if not m:
                raise RuntimeError(f"{name}: no address in {line!r}")
            port = int(m.group(1))
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 900
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited while loading")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:  # noqa: BLE001 (still loading)
                pass
            if time.time() > deadline:
                raise RuntimeError(f"{name} did not load in 900 s")
            time.sleep(0.2)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def one(client, model, prompt, max_tokens):
    t0 = time.perf_counter()
    stamps, tokens, finish = [], 0, None
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                             stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            stamps.append(time.perf_counter())
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    if finish not in ("stop", "length") or not stamps:
        raise RuntimeError(f"incomplete answer (finish_reason {finish})")
    itl = [b - a for a, b in zip(stamps, stamps[1:])]
    return stamps[0] - t0, itl, tokens or len(stamps)


async def load(base, model, concurrency, per_client, max_tokens):
    import openai
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
    await one(client, model, PROMPTS[3], 8)  # warm-up (a prompt long enough to prepare the prefill forms)
    results, errors = [], []

    async def worker(i):
        for k in range(per_client):
            try:
                results.append(await one(client, model, PROMPTS[(i + k) % len(PROMPTS)], max_tokens))
            except Exception as e:  # noqa: BLE001 (counted)
                errors.append(repr(e))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    wall = time.perf_counter() - t0
    await client.close()
    ttft = sorted(r[0] for r in results)
    itl = sorted(x for r in results for x in r[1])
    pct = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")  # noqa: E731
    return {"concurrency": concurrency, "requests": concurrency * per_client, "complete": len(results),
            "errors": errors[:3], "output_tokens_per_s": sum(r[2] for r in results) / wall,
            "ttft_p50_ms": pct(ttft, 0.5), "ttft_p99_ms": pct(ttft, 0.99),
            "itl_p50_ms": pct(itl, 0.5), "itl_p99_ms": pct(itl, 0.99)}


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise RuntimeError(f"/metrics has no {name}")


async def unloaded(base, model, rounds, max_tokens):
    """Time to first token of a request that finds the model unloaded (prism serve --idle-unload 1 freed its
    weights and programs), against one that finds it loaded, alternated; each request's load counted."""
    import openai
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
    await one(client, model, PROMPTS[3], 8)  # the first load: compiles, searches, fills the caches
    cold, warm = [], []
    for _ in range(rounds):
        deadline = time.time() + 60
        while metric(base, "prism_models_loaded") > 0:
            if time.time() > deadline:
                raise RuntimeError("the model was not unloaded within 60 s")
            await asyncio.sleep(0.2)
        loads = metric(base, "prism_model_loads_total")
        cold.append((await one(client, model, PROMPTS[0], max_tokens))[0])
        if metric(base, "prism_model_loads_total") != loads + 1:
            raise RuntimeError("the timed request did not load the model")
        warm.append((await one(client, model, PROMPTS[0], max_tokens))[0])
    await client.close()
    ms = lambda xs: round(statistics.median(xs) * 1000, 1)  # noqa: E731
    return {"rounds": rounds, "ttft_unloaded_ms": [round(x * 1000, 1) for x in cold],
            "ttft_unloaded_p50_ms": ms(cold), "ttft_loaded_p50_ms": ms(warm)}


def engines(args, model_path, ctx):
    name = os.path.basename(model_path)
    yield "prism", lambda: Engine("prism", [args.prism, "serve", model_path, "--port", "0", "--name", name,
                                            "--threads", str(args.threads), "--ctx", str(ctx),
                                            "--parallel", str(max(args.concurrency)),
                                            "--search-budget", str(args.search_budget)]), name
    if model_path.endswith(".gguf") and args.llama_server:
        port = free_port()
        slots = min(max(args.concurrency), 64)
        yield "llama-server", lambda: Engine("llama-server", [
            args.llama_server, "-m", model_path, "--host", "127.0.0.1", "--port", str(port), "-t",
            str(args.threads), "-c", str(ctx * slots), "-np", str(slots), "--cont-batching"], port), name
    if model_path.endswith(".gguf") and args.llama_cpp_python:
        port = free_port()
        yield "llama-cpp-python", lambda: Engine("llama-cpp-python", [
            sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", "127.0.0.1", "--port",
            str(port), "--n_threads", str(args.threads), "--n_ctx", str(ctx)], port), name


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=os.path.join(ROOT, "models/stories260K/stories260K.gguf"),
                    help="comma-separated model files")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--per-client", type=int, default=4, help="requests each client sends in turn")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ctx", type=int, default=512, help="context per sequence")
    ap.add_argument("--prism", default=os.path.join(ROOT, "build/prism"))
    ap.add_argument("--search-budget", type=float, default=120,
                    help="prism serve's search for its batched step (decisions persist in the tuning database)")
    ap.add_argument("--llama-server", default=None, help="llama.cpp's llama-server binary")
    ap.add_argument("--llama-cpp-python", action="store_true", help="also llama-cpp-python's server")
    ap.add_argument("--unloaded", type=int, default=0, metavar="ROUNDS",
                    help="instead: Prism's time to first token from the unloaded state (--idle-unload 1), ROUNDS times")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/serve.json"))
    args = ap.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.unloaded:
        return from_unloaded(args)
    rows = []
    for path in args.models.split(","):
        for engine, start, name in engines(args, path, args.ctx):
            e = start()
            try:
                for c in args.concurrency:
                    r = asyncio.run(load(e.base, name, c, args.per_client, args.max_tokens))
                    r.update(engine=engine, model=os.path.basename(path), threads=args.threads)
                    rows.append(r)
                    print(f"{r['model']:32s} {engine:16s} c={c:3d}  {r['output_tokens_per_s']:9.1f} tok/s  "
                          f"TTFT p50 {r['ttft_p50_ms']:8.1f} p99 {r['ttft_p99_ms']:8.1f} ms  "
                          f"ITL p50 {r['itl_p50_ms']:7.2f} p99 {r['itl_p99_ms']:7.2f} ms  "
                          f"complete {r['complete']}/{r['requests']}", flush=True)
            finally:
                e.stop()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
    lost = sum(r["requests"] - r["complete"] for r in rows)
    print(f"wrote {args.out}; requests without a complete answer: {lost}")
    return 1 if lost else 0


def from_unloaded(args):
    rows = []
    for path in args.models.split(","):
        name = os.path.basename(path)
        e = Engine("prism", [args.prism, "serve", path, "--port", "0", "--name", name, "--threads",
                             str(args.threads), "--ctx", str(args.ctx), "--idle-unload", "1",
                             "--search-budget", str(args.search_budget)])
        try:
            r = asyncio.run(unloaded(e.base, name, args.unloaded, args.max_tokens))
        finally:
            e.stop()
        r.update(engine="prism", model=name, threads=args.threads)
        rows.append(r)
        print(f"{name:32s} time to first token: unloaded p50 {r['ttft_unloaded_p50_ms']:8.1f} ms "
              f"{r['ttft_unloaded_ms']}, loaded p50 {r['ttft_loaded_p50_ms']:7.1f} ms", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
