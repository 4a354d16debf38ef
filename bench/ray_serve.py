#!/usr/bin/env python3
# Prism under Ray Serve against one `prism serve`: output tokens/s at 16 concurrent clients with 1 and 2
# replicas of 1 thread, and the time to a first token from zero replicas. The load generator is serve.py's.
#
#   python3 bench/ray_serve.py                                               # stories260K
#   python3 bench/ray_serve.py --model bench/models/llama1b-shape-q4_0.gguf --max-tokens 32 --per-client 2
import argparse
import asyncio
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from serve import Engine, free_port, load  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/stories260K/stories260K.gguf"))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--per-client", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--prism", default=os.path.join(ROOT, "build/prism"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/ray_serve.json"))
    a = ap.parse_args()
    os.environ["PRISM_BIN"] = a.prism
    os.environ["PYTHONPATH"] = os.path.join(ROOT, "build", "python") + os.pathsep + os.environ.get("PYTHONPATH", "")
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    for who in ("REPLICA", "HANDLE"):
        os.environ[f"RAY_SERVE_{who}_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = "0.5"
    name = os.path.basename(a.model)
    rows = []

    def run(label, base):
        r = asyncio.run(load(base, name, a.concurrency, a.per_client, a.max_tokens))
        r["setup"] = label
        rows.append(r)
        print(f"{label:<40} {r['output_tokens_per_s']:8.1f} tok/s  TTFT p50 {r['ttft_p50_ms']:7.0f} ms  "
              f"complete {r['complete']}/{r['requests']}", flush=True)

    for threads in (1, 2):  # the anchor: one server process, no Ray
        e = Engine("prism", [a.prism, "serve", a.model, "--port", "0", "--name", name, "--threads", str(threads),
                             "--ctx", str(a.ctx), "--parallel", str(a.concurrency), "--search-budget", "0"])
        try:
            run(f"prism serve, {threads} thread(s)", e.base)
        finally:
            e.stop()

    import ray
    from ray import serve
    from prism.ray import build_app
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    base = f"http://127.0.0.1:{port}"
    try:
        for replicas in (1, 2):
            serve.run(build_app(a.model, name=name, threads=1, min_replicas=replicas, max_replicas=replicas,
                                ctx=a.ctx, serve_args=["--parallel", str(a.concurrency)]),
                      name="bench", route_prefix="/")
            run(f"Ray Serve, {replicas} replica(s) x 1 thread", base)
            serve.delete("bench")
        # From zero replicas: the first request waits for a replica to start and load the artifact.
        serve.run(build_app(a.model, name=name, threads=1, min_replicas=0, max_replicas=1, initial_replicas=0,
                            ctx=a.ctx, idle_s=2), name="bench", route_prefix="/")
        st = lambda: serve.status().applications["bench"].deployments["PrismReplica"].replica_states  # noqa: E731
        while st().get("RUNNING", 0) or st().get("STARTING", 0):
            time.sleep(0.5)
        import openai
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
        t0 = time.perf_counter()
        for chunk in client.completions.create(model=name, prompt="Once upon a time", max_tokens=8,
                                               temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].text:
                break
        cold = time.perf_counter() - t0
        print(f"time to first token from zero replicas: {cold:.2f} s")
        rows.append({"setup": "first token from zero replicas", "seconds": cold})
    finally:
        serve.shutdown()
        ray.shutdown()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"model": a.model, "concurrency": a.concurrency, "per_client": a.per_client,
                   "max_tokens": a.max_tokens, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
