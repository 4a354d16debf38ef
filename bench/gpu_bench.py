#!/usr/bin/env python3
"""Prism on an NVIDIA GPU against PyTorch on the same GPU, in one call.

    python3 bench/gpu_bench.py [--prism build/prism] [-p 128,512] [-n 128] [-r 3]

Steps, one after another (each engine in its own process, freed before the next starts):
  1. correctness: stories260K greedy text (`prism run --temp 0 -n 400`) on --device cuda must equal
     --device cpu, for every prompt of tests/data/reference/stories260K.json;
  2. speed on the Llama-3.2-1B-shaped bf16 model (bench/models/llama1b-shape-hf-bf16, written by
     make_models.py when missing): Prism (`prism bench --device cuda --json`), PyTorch eager and
     torch.compile (transformers LlamaForCausalLM in bf16 on cuda);
  3. one markdown table on stdout; raw results in bench/results/gpu-<timestamp>.json.

The work per test is run.py's: ppN = one forward of N random token ids after a reset (logits of the
last position only), tgN = N single-token steps after one first token; one warm-up repetition (it
also absorbs torch.compile's compilation) and then --reps timed ones; tokens/s mean ± stdev.
PyTorch times end with torch.cuda.synchronize(). Prism's steps are synchronous and copy the last
logits back to the host every step (its Forward returns them); PyTorch's logits stay on the GPU.

Without an NVIDIA GPU (no libcuda, cuInit failing, or no device) it exits with status 1 and one
line saying why, before doing anything else. Exit status 2: the cuda text differs from the CPU's.
"""
import argparse
import ctypes
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STORIES = ROOT / "models" / "stories260K" / "stories260K.bin"
REFERENCE = ROOT / "tests" / "data" / "reference" / "stories260K.json"
MODEL = HERE / "models" / "llama1b-shape-hf-bf16"


def log(msg):
    print(f"[gpu_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fail(msg, code=1):
    print(f"gpu_bench.py: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def no_gpu_reason():
    """None when the CUDA driver sees a GPU, else why not (the check Prism's CudaDevice makes)."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"cannot load libcuda.so.1 ({e})"
    if (r := cu.cuInit(0)) != 0:
        return f"cuInit failed with CUDA error {r}"
    n = ctypes.c_int(0)
    if (r := cu.cuDeviceGetCount(ctypes.byref(n))) != 0:
        return f"cuDeviceGetCount failed with CUDA error {r}"
    return None if n.value > 0 else "the CUDA driver reports 0 devices"


def mean_std(xs):
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def json_lines(text):
    out = []
    for line in (text or "").splitlines():
        if line.strip().startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run(cmd, timeout, env=None):
    """(stdout, error or None)."""
    log("$ " + " ".join(map(str, cmd)))
    t0 = time.time()
    try:
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return out, f"timed out after {timeout} s"
    log(f"  done in {time.time() - t0:.0f} s, rc {p.returncode}")
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return p.stdout, f"exit {p.returncode}: " + " | ".join(tail)
    return p.stdout, None


# ---------------------------------------------------------------------------------------------
# PyTorch worker: runs in a child process (gpu_bench.py --worker eager|compile ...), prints JSON lines.

def worker_torch(a):
    import torch
    from transformers import LlamaForCausalLM

    dev = torch.device(a.torch_device)
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to(dev).eval()
    fwd = model
    if a.worker == "compile":
        fwd = torch.compile(model, mode=a.compile_mode)
    n_vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1234)
    ids = lambda n: torch.randint(0, n_vocab, (1, n), generator=g).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        for p in a.prompts:
            tps = []
            for r in range(a.reps + 1):
                x = ids(p)
                sync()
                t0 = time.perf_counter()
                out = fwd(input_ids=x, use_cache=True, logits_to_keep=1)
                sync()
                sec = time.perf_counter() - t0
                del out
                if r > 0:
                    tps.append(p / sec)
            print(json.dumps({"test": f"pp{p}", "samples": tps}), flush=True)
        if a.gen > 0:
            tps = []
            for r in range(a.reps + 1):
                out = fwd(input_ids=ids(1), use_cache=True, logits_to_keep=1)
                past = out.past_key_values
                steps = [ids(1) for _ in range(a.gen)]
                sync()
                t0 = time.perf_counter()
                for x in steps:
                    out = fwd(input_ids=x, past_key_values=past, use_cache=True, logits_to_keep=1)
                    past = out.past_key_values
                sync()
                sec = time.perf_counter() - t0
                del out, past
                if r > 0:
                    tps.append(a.gen / sec)
            print(json.dumps({"test": f"tg{a.gen}", "samples": tps}), flush=True)
    import transformers
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(json.dumps({"info": {"torch": torch.__version__, "transformers": transformers.__version__,
                               "device": name, "compile_mode": a.compile_mode if a.worker == "compile" else None,
                               "attn_implementation": getattr(model.config, "_attn_implementation", None)}}),
          flush=True)


def run_worker(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=["eager", "compile"])
    ap.add_argument("--model")
    ap.add_argument("--prompts", type=lambda s: [int(x) for x in s.split(",") if x])
    ap.add_argument("--gen", type=int)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--compile-mode", default="default")
    ap.add_argument("--torch-device", default="cuda")  # cpu: a self-test of this worker only
    worker_torch(ap.parse_args(argv))


# ---------------------------------------------------------------------------------------------

def check_stories(args):
    """[(prompt, same)] comparing `prism run --temp 0` on cuda and on the CPU."""
    refs = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else [{"prompt": "Once upon a time"}]
    results = []
    for ref in refs:
        texts = {}
        for device in ("cpu", "cuda"):
            out, err = run([args.prism, "run", STORIES, "--device", device, "--temp", "0", "-n", "400",
                            "-p", ref["prompt"]], args.timeout)
            if err:
                fail(f"prism run --device {device}: {err}")
            texts[device] = out
        same = texts["cpu"] == texts["cuda"]
        if not same:
            log(f"  MISMATCH for {ref['prompt']!r}:\n  cpu:  {texts['cpu']!r}\n  cuda: {texts['cuda']!r}")
        results.append(dict(prompt=ref["prompt"], same=same, cpu=texts["cpu"], cuda=texts["cuda"]))
    return results


def bench_prism(args):
    out, err = run([args.prism, "bench", MODEL, "--device", "cuda", "-p", ",".join(map(str, args.prompts)),
                    "-n", args.gen, "-r", args.reps, "--json"], args.timeout)
    return {l["test"]: l["samples"] for l in json_lines(out) if "test" in l}, {}, err


def bench_torch(args, mode):
    out, err = run([sys.executable, Path(__file__).resolve(), "--worker", mode, "--model", MODEL,
                    "--prompts", ",".join(map(str, args.prompts)), "--gen", args.gen, "--reps", args.reps,
                    "--compile-mode", args.compile_mode], args.timeout)
    lines = json_lines(out)
    info = next((l["info"] for l in lines if "info" in l), {})
    return {l["test"]: l["samples"] for l in lines if "test" in l}, info, err


def fmt(samples):
    m, s = mean_std(samples or [])
    return "—" if m is None else f"{m:.1f} ± {s:.1f}"


def ratio(a, b):
    ma, mb = mean_std(a or [])[0], mean_std(b or [])[0]
    return "—" if not ma or not mb else f"{ma / mb:.2f}x"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return run_worker(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prism", default=str(ROOT / "build" / "prism"))
    ap.add_argument("-p", "--prompts", default="128,512", help="prompt lengths (ppN), comma-separated")
    ap.add_argument("-n", "--gen", type=int, default=128, help="generated tokens (tgN)")
    ap.add_argument("-r", "--reps", type=int, default=3, help="timed repetitions after one warm-up")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (e.g. reduce-overhead)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per engine run")
    ap.add_argument("--skip-torch", action="store_true")
    args = ap.parse_args()
    args.prompts = [int(x) for x in args.prompts.split(",") if x]

    if why := no_gpu_reason():
        fail(f"no NVIDIA GPU: {why}")
    if not Path(args.prism).exists():
        fail(f"{args.prism} is missing; build it (cmake -S . -B build -G Ninja && ninja -C build prism)")
    if not (MODEL / "model.safetensors").exists():
        log(f"{MODEL} is missing: writing it (bench/make_models.py --only bf16)")
        if subprocess.run([sys.executable, str(HERE / "make_models.py"), "--only", "bf16"]).returncode != 0:
            fail("bench/make_models.py failed")

    state = dict(started=dt.datetime.now().isoformat(timespec="seconds"), args=vars(args), model=str(MODEL))
    state["stories"] = check_stories(args)
    engines = {"prism": bench_prism(args)}
    if not args.skip_torch:
        engines["eager"] = bench_torch(args, "eager")
        engines["compile"] = bench_torch(args, "compile")
    state["results"] = {k: dict(samples=v[0], info=v[1], error=v[2]) for k, v in engines.items()}

    same = sum(r["same"] for r in state["stories"])
    device = next((v[1].get("device") for v in engines.values() if v[1].get("device")), "cuda")
    print(f"stories260K greedy text, cuda vs cpu: {same}/{len(state['stories'])} prompts identical\n")
    print(f"Llama-3.2-1B shape, bf16, on {device} (tokens/s, mean ± stdev over {args.reps} repetitions)\n")
    cols = ["prism", "eager", "compile"]
    names = {"prism": "Prism (cuda)", "eager": "PyTorch eager", "compile": f"torch.compile ({args.compile_mode})"}
    print("| test | " + " | ".join(names[c] for c in cols) + " | Prism / eager | Prism / compile |")
    print("| --- |" + " ---: |" * (len(cols) + 2))
    get = lambda e, t: engines.get(e, ({}, {}, None))[0].get(t)
    for t in [f"pp{p}" for p in args.prompts] + ([f"tg{args.gen}"] if args.gen > 0 else []):
        row = [fmt(get(c, t)) for c in cols] + [ratio(get("prism", t), get("eager", t)),
                                                ratio(get("prism", t), get("compile", t))]
        print(f"| {t} | " + " | ".join(row) + " |")
    for e, (_, _, err) in engines.items():
        if err:
            print(f"\n{names[e]}: {err}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    path = results / f"gpu-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(state, indent=1))
    log(f"raw results: {path}")
    if same != len(state["stories"]):
        fail("stories260K greedy text on cuda differs from the CPU's (see the log above)", 2)


if __name__ == "__main__":
    main()
