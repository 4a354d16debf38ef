#!/usr/bin/env python3
"""Prism against llama.cpp and PyTorch eager, on one machine, in one run; see bench/README.md.

    bench/setup.sh && python3 bench/run.py            # everything (3-5 h on 2 cores at Prism's present speed)
    python3 bench/run.py --quick                      # stories260K + the 1B shape in Q8_0, 1 repeat

Steps, one after another (never two engines at once, so memory and cores are not shared):
  1. the roofline probe (build/prism_roofline_probe): memory read bandwidth and peak FLOP/s;
  2. for every model configuration: Prism (`prism bench --json`), llama.cpp (llama-cpp-python),
     PyTorch eager (transformers), each in its own process, freed before the next starts;
  3. one markdown table on stdout, and everything raw in bench/results/<timestamp>.json (+ .md).

Each engine does the same work per test: ppN = one forward of N random token ids after a reset
(logits of the last position only), tgN = N single-token steps after one first token; one
warm-up then --reps timed repetitions; tokens/s mean ± stdev over the repetitions.
"""
import argparse
import datetime as dt
import hashlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = HERE / "models"
STORIES = ROOT / "models" / "stories260K"
ALL_DTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q6_k"]


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mean_std(xs):
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


# ---------------------------------------------------------------------------------------------
# Workers: run in a child process (python3 run.py --worker ...), print one JSON line per result.

def worker_llamacpp(a):
    import llama_cpp
    from llama_cpp import Llama

    n_ctx = a.depth + max(max(a.prompts, default=0), a.gen + 1) + 64
    llm = Llama(model_path=a.file, n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads,
                n_batch=512, n_ubatch=512, logits_all=False, verbose=False, seed=1234)
    n_vocab = llm.n_vocab()
    rng = random.Random(1234)
    tok = lambda: rng.randrange(n_vocab)
    at = f" @ d{a.depth}" if a.depth else ""

    def reset():  # each test starts from `depth` random tokens in the cache (untimed)
        llm.reset()
        if a.depth:
            llm.eval([tok() for _ in range(a.depth)])

    for p in a.prompts:
        tps = []
        for r in range(a.reps + 1):  # repetition 0 is the warm-up
            ids = [tok() for _ in range(p)]
            reset()
            t0 = time.perf_counter()
            llm.eval(ids)
            sec = time.perf_counter() - t0
            if r > 0:
                tps.append(p / sec)
        print(json.dumps({"test": f"pp{p}{at}", "threads": a.threads, "samples": tps}), flush=True)
    if a.gen > 0:
        tps = []
        for r in range(a.reps + 1):
            reset()
            llm.eval([tok()])  # generation starts after one token
            t0 = time.perf_counter()
            for _ in range(a.gen):
                llm.eval([tok()])
            sec = time.perf_counter() - t0
            if r > 0:
                tps.append(a.gen / sec)
        print(json.dumps({"test": f"tg{a.gen}{at}", "threads": a.threads, "samples": tps}), flush=True)
    print(json.dumps({"info": {"llama_cpp_python": llama_cpp.__version__,
                               "system_info": llama_cpp.llama_print_system_info().decode(errors="replace")}}),
          flush=True)


def worker_torch(a):
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(a.threads)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    model = LlamaForCausalLM.from_pretrained(a.file, dtype=dtype).eval()
    n_vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1234)
    ids = lambda n: torch.randint(0, n_vocab, (1, n), generator=g)
    at = f" @ d{a.depth}" if a.depth else ""
    # each test starts from `depth` random tokens in the cache (untimed)
    start = lambda: model(input_ids=ids(a.depth), use_cache=True, logits_to_keep=1).past_key_values if a.depth \
        else None
    with torch.inference_mode():
        for p in a.prompts:
            tps = []
            for r in range(a.reps + 1):
                x, past = ids(p), start()
                cached = {"past_key_values": past} if past is not None else {}
                t0 = time.perf_counter()
                out = model(input_ids=x, use_cache=True, logits_to_keep=1, **cached)
                sec = time.perf_counter() - t0
                del out
                if r > 0:
                    tps.append(p / sec)
            print(json.dumps({"test": f"pp{p}{at}", "threads": a.threads, "samples": tps}), flush=True)
        if a.gen > 0:
            tps = []
            for r in range(a.reps + 1):
                out = model(input_ids=ids(1), past_key_values=start(), use_cache=True, logits_to_keep=1)
                past = out.past_key_values
                t0 = time.perf_counter()
                for _ in range(a.gen):
                    out = model(input_ids=ids(1), past_key_values=past, use_cache=True, logits_to_keep=1)
                    past = out.past_key_values
                sec = time.perf_counter() - t0
                del out, past
                if r > 0:
                    tps.append(a.gen / sec)
            print(json.dumps({"test": f"tg{a.gen}{at}", "threads": a.threads, "samples": tps}), flush=True)
    import transformers
    print(json.dumps({"info": {"torch": torch.__version__, "transformers": transformers.__version__,
                               "attn_implementation": getattr(model.config, "_attn_implementation", None),
                               "mkldnn_bf16": bool(torch.backends.mkldnn.is_available())}}), flush=True)


def run_worker(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=["llamacpp", "torch"])
    ap.add_argument("--file")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--prompts", type=lambda s: [int(x) for x in s.split(",") if x])
    ap.add_argument("--gen", type=int)
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--reps", type=int)
    a = ap.parse_args(argv)
    {"llamacpp": worker_llamacpp, "torch": worker_torch}[a.worker](a)


# ---------------------------------------------------------------------------------------------
# Model facts for the roofline: bytes read per decoded token, flops per prefilled token.

def stats_from_shapes(tensors, cfg, routed=1.0):
    """tensors: name -> (shape, nbytes) with HF or GGUF names. Returns a dict of model facts. routed: the
    share of each stacked expert tensor (GGUF *_exps) one token uses (experts used / experts)."""
    embed_names = {"model.embed_tokens.weight", "token_embd.weight"}
    head_names = {"lm_head.weight", "output.weight"}
    share = lambda n: routed if "_exps." in n else 1.0  # noqa: E731
    total = sum(nb for _, nb in tensors.values())
    tied = not any(n in tensors for n in head_names)
    embed_bytes = sum(nb for n, (_, nb) in tensors.items() if n in embed_names)
    # Decode reads every weight once per token (of experts, only the routed ones); the embedding table only
    # as the (tied) LM head.
    read = sum(nb * share(n) for n, (_, nb) in tensors.items())
    bytes_per_token = read if tied else read - embed_bytes
    layer_params = sum(math.prod(s) * share(n) for n, (s, _) in tensors.items()
                       if len(s) in (2, 3) and n not in embed_names | head_names)
    return dict(cfg, weight_bytes=total, bytes_per_token=bytes_per_token, layer_params=layer_params,
                tied=tied)


def stats_gguf(path):
    import gguf
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    meta = lambda k, d=None: r.fields[f"{arch}.{k}"].contents() if f"{arch}.{k}" in r.fields else d
    tensors = {t.name: (tuple(int(x) for x in reversed(t.shape)), int(t.n_bytes)) for t in r.tensors}
    hidden, heads = meta("embedding_length"), meta("attention.head_count")
    kv_heads = meta("attention.head_count_kv", heads)
    vocab = meta("vocab_size") or len(r.fields["tokenizer.ggml.tokens"].data)
    cfg = dict(hidden=hidden, layers=meta("block_count"), heads=heads, kv_heads=kv_heads,
               head_dim=meta("attention.key_length", hidden // heads), vocab=vocab)
    experts = meta("expert_count", 0)
    return stats_from_shapes(tensors, cfg, meta("expert_used_count") / experts if experts else 1.0)


def stats_safetensors(folder):
    folder = Path(folder)
    c = json.loads((folder / "config.json").read_text())
    size = {"F32": 4, "F16": 2, "BF16": 2}
    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        for name, info in h.items():
            if name != "__metadata__":
                tensors[name] = (tuple(info["shape"]), math.prod(info["shape"]) * size[info["dtype"]])
    cfg = dict(hidden=c["hidden_size"], layers=c["num_hidden_layers"], heads=c["num_attention_heads"],
               kv_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
               head_dim=c.get("head_dim", c["hidden_size"] // c["num_attention_heads"]), vocab=c["vocab_size"])
    return stats_from_shapes(tensors, cfg)


def stats_llama2c(path):
    raw = Path(path).read_bytes()[:28]
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", raw)
    hd, kv = dim // heads, kv_heads * (dim // heads)
    shapes = {"model.embed_tokens.weight": (abs(vocab), dim)}
    for i in range(layers):
        for n, s in [("q", (dim, dim)), ("k", (kv, dim)), ("v", (kv, dim)), ("o", (dim, dim)),
                     ("gate", (hidden, dim)), ("down", (dim, hidden)), ("up", (hidden, dim)), ("norm1", (dim,)),
                     ("norm2", (dim,))]:
            shapes[f"l{i}.{n}"] = s
    shapes["norm"] = (dim,)
    if vocab < 0:
        shapes["lm_head.weight"] = (abs(vocab), dim)
    tensors = {n: (s, math.prod(s) * 4) for n, s in shapes.items()}
    return stats_from_shapes(tensors, dict(hidden=dim, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=hd,
                                                  vocab=abs(vocab)))


def model_stats(path):
    p = Path(path)
    if p.is_dir():
        return stats_safetensors(p)
    if p.suffix == ".gguf":
        return stats_gguf(p)
    return stats_llama2c(p)


def prefill_flops(st, n, depth=0):
    """Flops of a forward over n tokens after `depth` cached ones with the logits of the last one: 2 flops
    per weight per token in the layers, causal attention (QK^T and PV), and one LM-head row."""
    attn = st["layers"] * 2 * 2 * st["heads"] * st["head_dim"] * n * (depth + (n + 1) / 2)
    return 2 * st["layer_params"] * n + attn + 2 * st["vocab"] * st["hidden"]


def kv_bytes(st, keys):
    """Bytes of keys and values a decode step reads over `keys` cached tokens, at 2 bytes a value (llama.cpp's
    f16 cache: the smaller of the two engines')."""
    return 2 * st["layers"] * st.get("kv_heads", st["heads"]) * st["head_dim"] * keys * 2


def parse_test(test):
    """'tg64 @ d2048' -> ('tg', 64, 2048)."""
    name, _, depth = test.partition(" @ d")
    return name[:2], int(name[2:]), int(depth or 0)


# The probe ceilings that can compute with each weight dtype, each with the number of its operations
# one multiply-add of the dtype takes; a prefill's bound is the fastest of them that this CPU has
# ("the dtype's best path"). bf16 lists fp32 FMA too: widening bf16 to f32 is exact, and on some CPUs
# vdpbf16ps issues slower than two FMA ports; AMX tiles multiply bf16 pairs, and f32/f16 values split
# into two bf16 parts at three products each (near f32 accuracy). Quantized dot products run on VNNI,
# AMX int8 or, without AVX-512, AVX2's vpmaddubsw, after rounding activations to 8 bits as llama.cpp does.
CEILING = {"f32": [("fp32_fma", 1), ("fp32_fma256", 1), ("amx_bf16", 3)],
           "f16": [("fp16_fma", 1), ("fp32_fma", 1), ("fp32_fma256", 1), ("amx_bf16", 3)],
           "bf16": [("amx_bf16", 1), ("bf16_dot", 1), ("fp32_fma", 1), ("fp32_fma256", 1)],
           "q8_0": [("amx_int8", 1), ("int8_vnni", 1), ("int8_avx2", 1), ("fp32_fma", 1), ("fp32_fma256", 1)],
           "q4_0": [("amx_int8", 1), ("int8_vnni", 1), ("int8_avx2", 1), ("fp32_fma", 1), ("fp32_fma256", 1)],
           "q4_k_m": [("int8_vnni", 1), ("int8_avx2", 1), ("fp32_fma", 1), ("fp32_fma256", 1)],
           "q6_k": [("int8_vnni", 1), ("int8_avx2", 1), ("fp32_fma", 1), ("fp32_fma256", 1)]}

CACHE_RESIDENT_BYTES = 32 << 20  # weights this small live in cache: DRAM bandwidth bounds nothing


def roofline(st, dtype, test, threads, probe):
    """(ceiling tokens/s, what bounds it) for one test, or (None, reason)."""
    t = str(threads)
    kind, n, depth = parse_test(test)
    if kind == "tg":
        # the mean over the test's steps: the cache holds depth + 1 .. depth + n keys
        per_token = st["bytes_per_token"] + kv_bytes(st, depth + (n + 1) / 2)
        if per_token < CACHE_RESIDENT_BYTES:
            return None, "weights fit in cache"
        bw = probe.get("bandwidth", {}).get("gbps", {}).get(t)
        if not bw:
            return None, f"no bandwidth measured at {t} threads"
        kv = " with the f16 KV cache" if depth else ""
        return bw * 1e9 / per_token, f"{per_token / 1e9:.2f} GB/token{kv} at {bw:.1f} GB/s"
    best = None
    for k, ops in CEILING[dtype]:
        c = probe.get("compute", {}).get(k, {})
        peak = c.get("per_second_1e9", {}).get(t)
        if c.get("supported") and peak and (best is None or peak / ops > best[1]):
            best = (k if ops == 1 else f"{k}/{ops}", peak / ops)
    if best is None:
        return None, f"no peak measured at {t} threads"
    return best[1] * 1e9 / (prefill_flops(st, n, depth) / n), f"{best[0]} {best[1]:.0f} G/s"


# ---------------------------------------------------------------------------------------------
# Configurations

def configurations(args):
    """Each: id, model, dtype, and per engine the file it runs (None + reason when it cannot)."""
    confs = []
    models = [m.strip().lower() for m in args.models.split(",") if m.strip()]
    if "stories260k" in models:
        confs.append(dict(id="stories260K-gguf", model="stories260K (.gguf)", dtype="f32",
                          prism=str(STORIES / "stories260K.gguf"), llamacpp=str(STORIES / "stories260K.gguf"),
                          torch=str(MODELS / "stories260K-hf")))
        confs.append(dict(id="stories260K-bin", model="stories260K (llama2.c .bin)", dtype="f32",
                          prism=str(STORIES / "stories260K.bin"),
                          llamacpp=None, llamacpp_why="llama.cpp reads GGUF only (the .gguf row is the same weights)",
                          torch=None, torch_why="same weights as the .gguf row"))
    if "moe1b" in models:
        for d in args.dtypes:
            gg = str(MODELS / f"moe1b-shape-{d}.gguf")
            confs.append(dict(id=f"moe1b-{d}-gguf", model="moe1b-shape (GGUF, 8 experts, top 2)", dtype=d, prism=gg,
                              llamacpp=gg, torch=None,
                              torch_why="no PyTorch row for the MoE shape: transformers runs experts in a Python loop"))
    if "llama1b" in models:
        for d in args.dtypes:
            gg = str(MODELS / f"llama1b-shape-{d}.gguf")
            hf = str(MODELS / f"llama1b-shape-hf-{d}") if d in ("f32", "f16", "bf16") else None
            c = dict(id=f"llama1b-{d}-gguf", model="llama1b-shape (GGUF)", dtype=d, prism=gg, llamacpp=gg, torch=hf)
            if hf is None:
                c["torch_why"] = ("PyTorch eager has no GGUF-quantized matmul; transformers dequantizes GGUF "
                                  "to float on load, which is the f32/f16 row")
            confs.append(c)
            if hf and "hf" in args.prism_formats:
                confs.append(dict(id=f"llama1b-{d}-hf", model="llama1b-shape (safetensors)", dtype=d, prism=hf,
                                  llamacpp=None, llamacpp_why="llama.cpp reads GGUF only (see the GGUF row)",
                                  torch=None, torch_why="see the GGUF row (same weights)"))
            if "gguf" not in args.prism_formats:
                c["prism"] = None
                c["prism_why"] = "--prism-formats excludes gguf"
    return confs


def needed_dtypes(confs, shape="llama1b"):
    return sorted({c["dtype"] for c in confs if c["id"].startswith(shape + "-")})


# ---------------------------------------------------------------------------------------------
# Running the engines

def parse_json_lines(text):
    out = []
    for l in (text or "").splitlines():
        l = l.strip()
        if l.startswith("{"):
            try:
                out.append(json.loads(l))
            except json.JSONDecodeError:
                pass
    return out


def run_cmd(cmd, timeout, env=None):
    """Runs cmd; returns (its JSON lines, error or None). Lines printed before a timeout count."""
    log("$ " + " ".join(cmd))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        log(f"  timed out after {timeout} s")
        return parse_json_lines(out), f"timed out after {timeout} s (results printed before then are kept)"
    log(f"  done in {time.time() - t0:.0f} s, rc {p.returncode}")
    lines = parse_json_lines(p.stdout)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return lines, f"exit {p.returncode}: " + " | ".join(tail)
    return lines, None


def run_prism(args, conf, threads):
    info = {}
    if args.search_budget > 0:
        # Search schedules first, for these threads and this context size (what `prism bench` loads):
        # decisions land in the tuning database, where the bench process finds them.
        ctx = args.depth + max(args.prompts + [args.gen]) + 8
        out = tempfile.mkdtemp(prefix="prism-compile-")
        cmd = [str(args.prism), "compile", conf["prism"], "-o", out, "--search-budget", str(args.search_budget),
               "--threads", str(threads), "--ctx", str(ctx)]
        log("$ " + " ".join(cmd))
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        key = f"{conf['id']} compile t{threads}"
        info[key] = dict(seconds=round(time.time() - t0, 1), rc=p.returncode,
                                           summary=(p.stdout.strip().splitlines() or [""])[-1])
        log(f"  {info[key]['summary']}")
        shutil.rmtree(out, ignore_errors=True)
    cmd = [str(args.prism), "bench", conf["prism"], "-p", ",".join(map(str, args.prompts)), "-n", str(args.gen),
           "-t", str(threads), "-r", str(args.reps), "-d", str(args.depth), "--json"]
    lines, err = run_cmd(cmd, args.timeout)
    return {(l["test"], int(l["threads"])): l["samples"] for l in lines if "test" in l}, info, err


def run_python_worker(args, engine, conf, threads):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", engine, "--file", conf[engine],
           "--dtype", conf["dtype"], "--threads", str(threads), "--prompts", ",".join(map(str, args.prompts)),
           "--gen", str(args.gen), "--reps", str(args.reps), "--depth", str(args.depth)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    lines, err = run_cmd(cmd, args.timeout, env)
    info = next((l["info"] for l in lines if "info" in l), {})
    return {(l["test"], int(l["threads"])): l["samples"] for l in lines if "test" in l}, info, err


# ---------------------------------------------------------------------------------------------
# Table

def fmt_tps(s):
    if not s:
        return "—"
    m, sd = mean_std(s)
    if len(s) == 1:  # one repetition: no spread to show
        return f"{m:.2f}" if m < 100 else f"{m:.0f}"
    return f"{m:.2f} ± {sd:.2f}" if m < 100 else f"{m:.0f} ± {sd:.0f}"


def ratio(a, b):
    if not a or not b:
        return "—"
    return f"{statistics.fmean(a) / statistics.fmean(b):.2f}×"


def make_table(rows):
    head = ["model", "dtype", "test", "threads", "Prism tok/s", "llama.cpp tok/s", "PyTorch tok/s",
            "Prism÷llama.cpp", "Prism÷PyTorch", "roofline tok/s", "Prism÷roofline"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join([" --- "] * 4 + [" ---: "] * 7) + "|"]
    for r in rows:
        p, l, t = r["prism"], r["llamacpp"], r["torch"]
        ceil = r["roofline_tps"]
        frac = "—"
        if p and ceil:
            f = statistics.fmean(p) / ceil
            frac = f"{f:.0%}" if f >= 0.1 else f"{f:.1%}" if f >= 0.001 else f"{f:.2g}"
            # An engine past the ceiling means the probe read too little for this row: flagged, never a fraction.
            over = [who for who, x in (("Prism", p), ("llama.cpp", l)) if x and statistics.fmean(x) > ceil]
            if over:
                frac += " ⚑ probe below " + " and ".join(over)
        ceil_s = "—" if not ceil else f"{ceil:.0f}" if ceil >= 100 else f"{ceil:.2f}"
        out.append("| " + " | ".join([
            r["model"], r["dtype"], r["test"], str(r["threads"]), fmt_tps(p), fmt_tps(l), fmt_tps(t),
            ratio(p, l), ratio(p, t), ceil_s, frac]) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------

def main():
    if "--worker" in sys.argv:
        return run_worker(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="stories260K + the 1B shape in q8_0 only, 1 repeat")
    ap.add_argument("--models", default="stories260K,llama1b",
                    help="comma-separated: stories260K, llama1b, moe1b (8 experts, top 2)")
    ap.add_argument("--dtypes", default=",".join(ALL_DTYPES), help="dtypes of the 1B shape")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--prompts", default="128,512", help="prompt lengths (ppN)")
    ap.add_argument("--gen", type=int, default=128, help="generated tokens (tgN)")
    ap.add_argument("--depth", type=int, default=0,
                    help="tokens in the KV cache before each test (llama-bench's -d; tests gain ' @ dN')")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions after one warm-up")
    ap.add_argument("--prism-formats", default="gguf",
                    help="Prism runs the 1B shape from: gguf (the llama.cpp files), hf (the safetensors "
                         "folders, extra rows for f32/f16/bf16), or gguf,hf")
    ap.add_argument("--search-budget", type=float, default=600,
                    help="seconds of Prism schedule search per model and thread count before its bench "
                         "(`prism compile`; decisions already in the tuning database cost nothing); 0: none")
    ap.add_argument("--skip-prism", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-probe", action="store_true", help="no roofline probe (no roofline columns)")
    ap.add_argument("--timeout", type=int, default=5400,
                    help="seconds per engine process (one model, one thread count, all tests)")
    ap.add_argument("--prism", default=str(ROOT / "build" / "prism"))
    ap.add_argument("--probe", default=str(ROOT / "build" / "prism_roofline_probe"))
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    if args.quick:
        args.dtypes = "q8_0"
        args.reps = 1
    args.threads = [int(x) for x in args.threads.split(",") if x]
    args.prompts = [int(x) for x in args.prompts.split(",") if x and int(x) > 0]  # 0: no prefill test
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    args.prism_formats = [f.strip() for f in args.prism_formats.split(",")]
    for d in args.dtypes:
        if d not in ALL_DTYPES:
            ap.error(f"unknown dtype {d}")
    started = time.time()
    load_at_start = os.getloadavg()
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    notes, errors = [], []
    engine_info = {}

    confs = configurations(args)
    if not confs:
        ap.error("no configuration selected (see --models / --dtypes)")

    # Models (written once; make_models.py skips what exists).
    mk = [sys.executable, str(HERE / "make_models.py")]
    if any(c["id"].startswith("llama1b") for c in confs):
        mk += ["--only", ",".join(needed_dtypes(confs))]
    else:
        mk += ["--stories-only"]
    log("models: " + " ".join(mk[1:]))
    subprocess.run(mk, check=True, stdout=sys.stderr)  # stdout carries only the table
    if any(c["id"].startswith("moe1b") for c in confs):
        mk = [sys.executable, str(HERE / "make_models.py"), "--shape", "moe1b", "--only",
              ",".join(needed_dtypes(confs, "moe1b"))]
        log("models: " + " ".join(mk[1:]))
        subprocess.run(mk, check=True, stdout=sys.stderr)

    for tool, path in [("prism", args.prism)] + ([] if args.skip_probe else [("probe", args.probe)]):
        if not Path(path).exists():
            sys.exit(f"run.py: {path} is missing; run bench/setup.sh (it builds prism and prism_roofline_probe)")
    have_llamacpp = have_torch = True
    if not args.skip_llamacpp:
        try:
            import llama_cpp  # noqa: F401
        except Exception as e:  # report and carry on without it
            have_llamacpp = False
            notes.append(f"llama.cpp skipped: cannot import llama_cpp ({e}); run bench/setup.sh")
    if not args.skip_torch:
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except Exception as e:
            have_torch = False
            notes.append(f"PyTorch skipped: {e}")

    # Prism is run from a private copy: other work may relink build/prism during a long run.
    prism_src = Path(args.prism)
    pin_dir = Path(tempfile.mkdtemp(prefix="prism-bench-"))
    args.prism = str(pin_dir / "prism")
    shutil.copy2(prism_src, args.prism)
    engine_info["prism"] = {"binary": str(prism_src), "sha256": hashlib.sha256(Path(args.prism).read_bytes()).hexdigest()[:16],
                            "binary_mtime": dt.datetime.fromtimestamp(prism_src.stat().st_mtime).isoformat(timespec="seconds"),
                            "git": git_state()}

    # 1. Roofline probe
    probe = {}
    if not args.skip_probe:
        cmd = [args.probe, "--threads", ",".join(map(str, args.threads))]
        log("$ " + " ".join(cmd))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            probe = json.loads(p.stdout) if p.returncode == 0 else {}
            if p.returncode != 0:
                errors.append(f"roofline probe failed: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            errors.append(f"roofline probe failed: {e}")
        log(f"probe: bandwidth {probe.get('bandwidth', {}).get('gbps')} GB/s, "
            f"fp32 {probe.get('compute', {}).get('fp32_fma', {}).get('per_second_1e9')} GFLOP/s")

    # 2. Engines, configuration by configuration
    results = {}  # (conf id, test, threads) -> engine -> samples
    state = dict(args=args, confs=confs, probe=probe, results=results, engine_info=engine_info, notes=notes,
                 errors=errors, started=started, stamp=stamp, load_at_start=load_at_start)
    for c in confs:
        for engine in ("prism", "llamacpp", "torch"):
            skip = {"prism": args.skip_prism, "llamacpp": args.skip_llamacpp or not have_llamacpp,
                    "torch": args.skip_torch or not have_torch}[engine]
            if skip:
                continue
            if not c.get(engine):
                if c.get(engine + "_why"):
                    notes.append(f"{c['model']} {c['dtype']}: {engine} not run: {c[engine + '_why']}")
                continue
            got, info, errs = {}, {}, []
            for t in args.threads:  # one process per thread count: memory is freed in between
                if engine == "prism":
                    g, i, err = run_prism(args, c, t)
                else:
                    g, i, err = run_python_worker(args, engine, c, t)
                got.update(g)
                info.update(i)
                if err:
                    errs.append(f"{t} threads: {err}")
            engine_info.setdefault(engine, {}).update(info)
            for e in errs:
                msg = f"{c['model']} {c['dtype']}: {engine} failed: {e}"
                errors.append(msg)
                log(msg)
            for (test, t), samples in got.items():
                results.setdefault((c["id"], test, t), {})[engine] = samples
            write_outputs(state)

    # 3. Table (also written after every engine run above, so a long run leaves partial results)
    print(write_outputs(state, final=True))
    shutil.rmtree(pin_dir, ignore_errors=True)


def git_state():
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+uncommitted changes" if dirty else "")
    except OSError:
        return None


def write_outputs(state, final=False):
    """Builds the rows and table from what has been measured so far; writes <stamp>.json/.md.
    Returns the markdown."""
    args, confs, probe, results = state["args"], state["confs"], state["probe"], state["results"]
    stats, rows, fact_notes = {}, [], []
    at = f" @ d{args.depth}" if args.depth else ""
    tests = [f"pp{p}{at}" for p in args.prompts] + ([f"tg{args.gen}{at}"] if args.gen > 0 else [])
    for c in confs:
        src = c.get("prism") or c.get("llamacpp") or c.get("torch")
        try:
            stats[c["id"]] = model_stats(src)
        except Exception as e:  # a missing file has already failed its engine run
            stats[c["id"]] = None
            fact_notes.append(f"{c['model']} {c['dtype']}: no model facts for the roofline ({e})")
        for test in tests:
            for t in args.threads:
                r = results.get((c["id"], test, t), {})
                if not r:
                    continue
                ceil, why = (None, "no probe") if not probe or not stats[c["id"]] else \
                    roofline(stats[c["id"]], c["dtype"], test, t, probe)
                rows.append(dict(config=c["id"], model=c["model"], dtype=c["dtype"], test=test, threads=t,
                                 prism=r.get("prism"), llamacpp=r.get("llamacpp"), torch=r.get("torch"),
                                 roofline_tps=ceil, roofline_basis=why,
                                 files={e: c.get(e) for e in ("prism", "llamacpp", "torch")}))
    table = make_table(rows)
    elapsed = time.time() - state["started"]
    notes = state["notes"] + fact_notes
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = state["stamp"]
    record = {
        "timestamp": stamp, "complete": final, "elapsed_s": elapsed,
        "command": " ".join(["bench/run.py"] + sys.argv[1:]),
        "host": {"platform": platform.platform(), "python": sys.version.split()[0], "cpus": os.cpu_count(),
                 "load_average_at_start": state["load_at_start"], "load_average_now": os.getloadavg()},
        "settings": {"threads": args.threads, "prompts": args.prompts, "gen": args.gen, "depth": args.depth,
                     "reps": args.reps,
                     "dtypes": args.dtypes, "models": args.models, "prism_formats": args.prism_formats},
        "probe": probe, "engines": state["engine_info"], "model_facts": stats, "rows": rows, "notes": notes,
        "errors": state["errors"], "table_markdown": table,
    }
    (out_dir / f"{stamp}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    md = [table, ""]
    if probe:
        bw = probe.get("bandwidth", {}).get("gbps", {})
        comp = {k: v.get("per_second_1e9") for k, v in probe.get("compute", {}).items() if v.get("supported")}
        md.append(f"Roofline probe ({probe.get('cpu')}): read bandwidth {bw} GB/s; peak G(FL)OP/s {comp}.")
        if "⚑" in table:
            md.append("⚑: an engine ran faster than the roofline at the probe's figures, so the probe read too "
                      "little for that row (a host whose bandwidth moves between levels, or a technique the probe "
                      "lacks) and the fraction is not one; run the probe again beside that engine.")
    la0, la1 = state["load_at_start"][0], os.getloadavg()[0]
    md.append(f"Load average (1 min) before the run {la0:.1f} on {os.cpu_count()} CPUs"
              + (" (other work was running: the numbers are noisy)" if la0 > 0.5 else "")
              + f"; at the end {la1:.1f} (this run's last engine included).")
    md += [f"- {n}" for n in notes + state["errors"]]
    md.append(f"\nRaw results: {out_dir / (stamp + '.json')} ({elapsed / 60:.1f} min"
              f"{'' if final else ', incomplete'})")
    text = "\n".join(md)
    (out_dir / f"{stamp}.md").write_text(text + "\n")
    return text

if __name__ == "__main__":
    main()
