# Prism under Ray Serve: replicas of `prism serve` behind one OpenAI ingress, autoscaled on their load to zero.
"""python -m prism.ray MODEL [--name NAME] [--max-replicas 2] [--threads 1] [--port 8000] [--idle 60]

Each replica is a `prism serve` process (loopback only) holding one compiled artifact; a Ray Serve ingress
exposes the same OpenAI routes (/v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models, streaming
included) and forwards each request to one replica through a deployment handle. Why the server process and
not the Python API: the server is where continuous batching, the paged KV cache with its prefix cache, the
OpenAI request checks and error shapes live; a replica that wrapped `prism.load` would have to do all of
that again. The replica only proxies bytes.

- Autoscaling: Ray Serve's autoscaler on each replica's ongoing requests, which for a proxy replica is
  exactly Prism's own queued + running count; `--min-replicas 0` scales to zero after `--idle` seconds and
  back on the next request. A replica reserves `--threads` CPUs (`num_cpus`) and runs that many threads.
- Start-up: a model that is not an artifact is compiled once (`prism compile`, no search) before the app
  starts, so replicas load the artifact and never search.
- Routing: PrefixAffinityRouter sends a request whose prompt starts like a recent one to the replica that
  served it (its prefix cache holds those blocks), else to the less loaded of two (Ray's default).
- Failures: a replica that dies before answering costs the request a retry on another replica; one that dies
  mid-stream ends the stream with an OpenAI error event (the client raises), never a hang. Scale-down and
  shutdown wait for a replica's in-flight requests (Ray's graceful shutdown, then SIGTERM, on which `prism
  serve` finishes what it accepted).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import OrderedDict

import aiohttp
import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import RequestRouter

# A prompt's prefixes of these many characters are remembered with the replica that served them (prism
# serve's KV blocks are 16 tokens, about 64 characters of English, so the shortest shares about a block).
PREFIX_LENGTHS = (64, 128, 256, 512, 1024)


def prism_binary():
    """PRISM_BIN, else the `prism` on PATH (pip install .), else the build tree's next to this package."""
    for path in (os.environ.get("PRISM_BIN"), shutil.which("prism"),
                 os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "prism")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    raise FileNotFoundError("the prism command was not found (pip install ., or set PRISM_BIN)")


def compiled_artifact(model, ctx, cache_dir=None):
    """The model as a compiled artifact folder: itself when it is one, else compiled once (no search)."""
    if os.path.isdir(model) and os.path.isfile(os.path.join(model, "manifest.json")):
        return os.path.abspath(model)
    out = os.path.join(cache_dir or tempfile.mkdtemp(prefix="prism-ray-"), "model.prism")
    subprocess.run([prism_binary(), "compile", model, "-o", out, "--search-budget", "0", "--ctx", str(ctx)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def prefix_key(body):
    """The start of the request's prompt (up to the longest of PREFIX_LENGTHS; "" when shorter than the
    shortest), from the raw JSON body."""
    try:
        j = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(j, dict):
        return ""
    text = j.get("prompt")
    if isinstance(j.get("messages"), list):
        text = "".join(str(m.get("role", "")) + ":" + str(m.get("content", ""))
                       for m in j["messages"] if isinstance(m, dict))
    if isinstance(text, list):
        text = text[0] if text and isinstance(text[0], str) else ""
    if not isinstance(text, str) or len(text) < PREFIX_LENGTHS[0]:
        return ""
    return text[:PREFIX_LENGTHS[-1]]


class PrefixAffinityRouter(RequestRouter):
    """A request whose prompt starts like a recent one (its longest start of PREFIX_LENGTHS seen before) goes
    to the replica that served that start last, where its KV blocks are cached; others, and any whose replica
    is gone, to the less loaded of two replicas. The chosen replica rejecting (full) falls through to the
    others, so a hot prefix spills over instead of queueing."""

    def initialize_state(self, max_prefixes=16384):
        self._homes = OrderedDict()  # prompt start -> ReplicaID, least recently used first
        self._max_prefixes = max_prefixes

    @staticmethod
    def _key(pending_request):
        return pending_request.args[3] if pending_request is not None and len(pending_request.args) > 3 else ""

    async def choose_replicas(self, candidate_replicas, pending_request=None):
        text = self._key(pending_request)
        for n in reversed(PREFIX_LENGTHS):
            home = self._homes.get(text[:n]) if len(text) >= n else None
            preferred = [r for r in candidate_replicas if r.replica_id == home]
            if preferred:
                return [preferred, [r for r in candidate_replicas if r.replica_id != home]]
        # The less loaded of two (the base router probes the queue lengths within a rank).
        # In random order: between equally loaded replicas the router takes the first.
        return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]

    def on_request_routed(self, pending_request, replica_id, result):
        text = self._key(pending_request)
        for n in PREFIX_LENGTHS:
            if len(text) >= n:
                self._homes[text[:n]] = replica_id
                self._homes.move_to_end(text[:n])
        while len(self._homes) > self._max_prefixes:
            self._homes.popitem(last=False)

    def on_replica_actor_died(self, replica_id):
        super().on_replica_actor_died(replica_id)
        for k in [k for k, r in self._homes.items() if r == replica_id]:
            del self._homes[k]


def _die_with_parent():
    """In the child: SIGTERM when the replica's process dies, however it dies (Linux's PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


class PrismReplica:
    """One `prism serve` process on a loopback port, and a proxy to it."""

    def __init__(self, artifact, name, threads, serve_args):
        cmd = [prism_binary(), "serve", artifact, "--name", name, "--host", "127.0.0.1", "--port", "0",
               "--threads", str(threads), *serve_args]
        env = dict(os.environ, PRISM_THREADS=str(threads))
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_die_with_parent)
        line = self.proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            raise RuntimeError(f"prism serve did not start: {line.strip()}")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # keep the pipe drained
        self.base = f"http://127.0.0.1:{m.group(1)}"
        deadline = time.time() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prism serve exited with status {self.proc.returncode} while loading")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("prism serve did not load the model in 300 s")
            time.sleep(0.1)
        self.session = None
        self.replica_id = serve.get_replica_context().replica_id.unique_id

    async def forward(self, method, path, body, key, authorization=""):
        """Yields (status, content type, this replica's id) first, then the response body in chunks as prism
        serve sends them. `key` is the prompt's prefix (for the router; unused here)."""
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        headers = {"Content-Type": "application/json"}
        if authorization:
            headers["Authorization"] = authorization
        async with self.session.request(method, self.base + path, data=body, headers=headers) as r:
            yield r.status, r.headers.get("Content-Type", "application/json"), self.replica_id
            async for chunk in r.content.iter_any():
                yield chunk

    def check_health(self):  # Ray Serve calls this periodically; raising restarts the replica
        if self.proc.poll() is not None:
            raise RuntimeError(f"prism serve exited with status {self.proc.returncode}")

    def __del__(self):
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # prism serve finishes what it accepted, then exits
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _error(message):
    """OpenAI's error shape, as prism serve sends it."""
    return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}


app = FastAPI()


@serve.ingress(app)
class PrismIngress:
    """The OpenAI routes, each request forwarded to one replica."""

    def __init__(self, replicas, name):
        self.replicas = replicas.options(stream=True)  # one handle, one router (its prefix homes) for all
        self.name = name

    @app.get("/health")
    async def health(self):
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(self):
        return {"object": "list", "data": [{"id": self.name, "object": "model", "created": int(time.time()),
                                            "owned_by": "prism"}]}

    async def _start(self, path, body, key, auth):
        """The replica's stream and its (status, type, replica), retried once on another replica if one dies
        first."""
        for attempt in range(2):
            stream = self.replicas.forward.remote("POST", path, body, key, auth)
            try:
                head = await stream.__anext__()
                return stream, head
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError,
                    ray.exceptions.ActorUnavailableError) as e:
                if attempt == 1:
                    raise RuntimeError(f"the replica failed: {e}") from e

    @app.post("/v1/{route:path}")
    async def post(self, route: str, request: Request):
        body = await request.body()
        key = prefix_key(body)
        try:
            stream, (status, ctype, replica) = await self._start("/v1/" + route, body, key,
                                                        request.headers.get("authorization", ""))
        except Exception as e:  # noqa: BLE001 (any failure reaching a replica is the client's 503)
            return JSONResponse(_error(str(e)), status_code=503)
        if not ctype.startswith("text/event-stream"):
            chunks = []
            try:
                async for c in stream:
                    chunks.append(c)
            except Exception as e:  # noqa: BLE001
                return JSONResponse(_error(f"the replica failed mid-request: {e}"), status_code=503)
            return Response(b"".join(chunks), status_code=status, media_type=ctype,
                            headers={"x-prism-replica": replica})

        async def events():
            try:
                async for c in stream:
                    yield c
            except Exception as e:  # noqa: BLE001: end the stream with an error event, as prism serve does
                yield b"data: " + json.dumps(_error(f"the replica failed mid-stream: {e}")).encode() + b"\n\n"

        return StreamingResponse(events(), status_code=status, media_type=ctype,
                                 headers={"x-prism-replica": replica})


def build_app(model, name="prism", threads=1, min_replicas=0, max_replicas=2, initial_replicas=1, idle_s=60.0,
              target_ongoing_requests=4, ctx=512, serve_args=(), autoscaling=None):
    """The Ray Serve application for MODEL (compiled first unless it is an artifact)."""
    artifact = compiled_artifact(model, ctx)
    scaling = {"min_replicas": min_replicas, "initial_replicas": max(initial_replicas, min_replicas),
               "max_replicas": max_replicas, "target_ongoing_requests": target_ongoing_requests,
               "downscale_delay_s": idle_s, "downscale_to_zero_delay_s": idle_s,
               "upscale_delay_s": 1.0}  # Ray's default (30 s) would hold a request to zero replicas that long
    scaling.update(autoscaling or {})
    replica = serve.deployment(PrismReplica, name="PrismReplica").options(
        ray_actor_options={"num_cpus": threads},
        autoscaling_config=scaling,
        max_ongoing_requests=max(8, 4 * target_ongoing_requests),
        graceful_shutdown_timeout_s=120,
        health_check_period_s=2,
        request_router_config=RequestRouterConfig(request_router_class=PrefixAffinityRouter),
    )
    # The ingress only awaits replicas: it takes every request at once, so that the replicas' handle sees the
    # whole load (queued there or running in a replica) and the autoscaler with it.
    ingress = serve.deployment(PrismIngress, name="PrismIngress").options(ray_actor_options={"num_cpus": 0},
                                                                            max_ongoing_requests=1024)
    return ingress.bind(replica.bind(artifact, name, threads, ["--ctx", str(ctx), *serve_args]), name)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m prism.ray", description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a model `prism serve` reads, or a compiled artifact")
    ap.add_argument("--name", default="prism")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=1, help="threads (and reserved CPUs) per replica")
    ap.add_argument("--min-replicas", type=int, default=0)
    ap.add_argument("--max-replicas", type=int, default=2)
    ap.add_argument("--idle", type=float, default=60, help="seconds idle before a replica is stopped")
    ap.add_argument("--target-ongoing", type=int, default=4, help="requests per replica the autoscaler aims at")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    a = ap.parse_args(argv)
    ray.init(address=a.address)
    serve.start(http_options={"host": a.host, "port": a.port})
    serve.run(build_app(a.model, a.name, a.threads, a.min_replicas, a.max_replicas, idle_s=a.idle,
                        target_ongoing_requests=a.target_ongoing, ctx=a.ctx), name=a.name, route_prefix="/")
    print(f"prism.ray: {a.name} on http://{a.host}:{a.port}/v1 (Ray Serve; Ctrl-C stops)", file=sys.stderr)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


if __name__ == "__main__":
    main()
