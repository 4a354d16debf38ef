# Prism under Ray Serve (python/prism/ray.py): a local Ray instance with 2 CPUs, stories260K replicas of
# `prism serve` behind the OpenAI ingress, through the official openai client. Loopback only; every
# request bounded; Serve and Ray shut down by the fixture.
import os
import socket
import threading
import time

import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
openai = pytest.importorskip("openai")

PROMPT = "Once upon a time"
STORIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "stories260K",
                       "stories260K.bin")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(prism_py, prism_bin):
    # Ray's workers import prism.ray from the same package the test uses, and run the same prism command.
    os.environ["PYTHONPATH"] = os.path.dirname(os.path.dirname(prism_py.__file__)) + os.pathsep + \
        os.environ.get("PYTHONPATH", "")
    os.environ["PRISM_BIN"] = prism_bin
    # Load reports twice a second instead of Ray's default, so the autoscaler sees a short test's load.
    for who in ("REPLICA", "HANDLE"):
        os.environ[f"RAY_SERVE_{who}_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = "0.5"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()
    ray.shutdown()


def _replicas(app):
    """Running replicas of the app's PrismReplica deployment."""
    st = serve.status().applications[app].deployments["PrismReplica"]
    return st.replica_states.get("RUNNING", 0)


def _wait(what, until, timeout):
    deadline = time.time() + timeout
    while not until():
        assert time.time() < deadline, f"{what} did not happen in {timeout} s"
        time.sleep(0.25)


# A one-second look-back (Ray's default is 30 s) so the test's short load moves the autoscaler; Ray warns that
# it is shorter than the deprecated metrics_interval_s, which the push-interval variables above replace.
@pytest.mark.filterwarnings("ignore:`look_back_period_s`")
def test_answers_scale_to_two_then_zero_and_back(cluster, prism):
    from prism.ray import build_app
    app = build_app(STORIES, name="stories", threads=1, min_replicas=0, max_replicas=2, initial_replicas=1,
                    idle_s=3, target_ongoing_requests=2, ctx=256,
                    autoscaling={"upscale_delay_s": 0.5, "look_back_period_s": 1})
    serve.run(app, name="stories", route_prefix="/")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{cluster}/v1", api_key="none", max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == ["stories"]
    whole = client.completions.create(model="stories", prompt=PROMPT, max_tokens=40, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="stories", prompt=PROMPT, max_tokens=40, temperature=0, stream=True) if c.choices)
    run = prism.run("run", "-p", PROMPT, "--temp", "0", "-n", "40", "--ctx", "256").stdout
    assert whole.choices[0].text == streamed and run.startswith(PROMPT + streamed)
    assert _replicas("stories") == 1

    # 16 concurrent clients, each sending requests until the second replica runs (60 s at most).
    errors, seen_two = [], []
    t_end = time.time() + 60

    def one(i):
        try:
            k = 0
            while not seen_two and time.time() < t_end:
                r = client.completions.create(model="stories", prompt=f"{PROMPT} {i} {k}", max_tokens=200,
                                              temperature=0.8, seed=i * 100 + k)
                assert r.choices[0].text
                k += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    t0 = time.time()
    while any(t.is_alive() for t in threads) and time.time() - t0 < 90:
        if _replicas("stories") >= 2:
            seen_two.append(True)
        time.sleep(0.2)
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert seen_two, "the app did not scale to 2 replicas under 16 concurrent requests"
    _wait("scaling to zero", lambda: _replicas("stories") == 0, 60)
    t0 = time.time()
    again = client.completions.create(model="stories", prompt=PROMPT, max_tokens=40, temperature=0)
    print(f"\ntime to a whole 40-token answer from zero replicas: {time.time() - t0:.2f} s")
    assert again.choices[0].text == whole.choices[0].text
    serve.delete("stories")


def test_a_replica_killed_mid_stream_costs_one_request_at_most(cluster):
    from prism.ray import build_app
    app = build_app(STORIES, name="kill", threads=1, min_replicas=1, max_replicas=1, ctx=512)
    serve.run(app, name="kill", route_prefix="/")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{cluster}/v1", api_key="none", max_retries=0, timeout=60)
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "kill#PrismReplica" in a["name"]]
    assert len(names) == 1, ray.util.list_named_actors(all_namespaces=True)
    replica = ray.get_actor(names[0], namespace="serve")
    outcome = []

    def stream():
        text = ""
        try:
            for c in client.completions.create(model="kill", prompt=PROMPT, max_tokens=480, temperature=0,
                                               stream=True):
                text += c.choices[0].text if c.choices else ""
                if not outcome:  # the first tokens are here: the replica dies now
                    outcome.append("streaming")
                    ray.kill(replica, no_restart=False)
            outcome.append(f"complete ({len(text)} characters)")
        except Exception as e:  # noqa: BLE001 (an error is an acceptable outcome; a hang is not)
            outcome.append(f"error: {type(e).__name__}: {e}")

    t = threading.Thread(target=stream)
    t.start()
    t.join(90)
    assert not t.is_alive(), "the client hung after its replica was killed"
    assert outcome[-1].startswith("complete") or outcome[-1].startswith("error"), outcome
    print(f"\nthe stream whose replica was killed: {outcome[-1][:120]}")
    # The app keeps serving (Ray Serve replaces the replica).
    deadline = time.time() + 120
    while True:
        try:
            r = client.completions.create(model="kill", prompt=PROMPT, max_tokens=10, temperature=0)
            assert r.choices[0].text
            break
        except openai.APIError:
            assert time.time() < deadline, "the app did not serve again after the replica was killed"
            time.sleep(1)
    serve.delete("kill")


def test_requests_sharing_a_prefix_go_to_the_replica_that_has_it(cluster):
    from prism.ray import build_app
    app = build_app(STORIES, name="prefix", threads=1, min_replicas=2, max_replicas=2, ctx=256)
    serve.run(app, name="prefix", route_prefix="/")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{cluster}/v1", api_key="none", max_retries=0, timeout=60)

    def replica_of(prompt):
        r = client.completions.with_raw_response.create(model="prefix", prompt=prompt, max_tokens=4, temperature=0)
        return r.headers["x-prism-replica"]

    story = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine "
             "with her friends, and every day she ")
    homes = [replica_of(story + ending) for ending in ("ran", "sang", "jumped", "slept", "ate", "read")]
    assert len(set(homes)) == 1, homes  # one prefix, one replica
    others = {replica_of(f"{i} " * 40) for i in range(12)}  # distinct prompts: both replicas get some
    assert len(others) == 2, others
    serve.delete("prefix")


def test_deleting_the_app_lets_a_running_stream_finish(cluster):
    """Scale-down and delete stop a replica only after its in-flight requests (Ray's graceful shutdown,
    then SIGTERM, on which prism serve finishes what it accepted)."""
    from prism.ray import build_app
    app = build_app(STORIES, name="drain", threads=1, min_replicas=1, max_replicas=1, ctx=512)
    serve.run(app, name="drain", route_prefix="/")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{cluster}/v1", api_key="none", max_retries=0, timeout=120)
    started, finished = threading.Event(), {}

    def stream():  # 16 choices of 480 tokens on one thread: seconds of work still to do when the delete comes
        try:
            for c in client.completions.create(model="drain", prompt=PROMPT, max_tokens=480, n=16, temperature=1,
                                               seed=3, stream=True):
                started.set()
                for ch in c.choices:
                    if ch.finish_reason:
                        finished[ch.index] = ch.finish_reason
        except Exception as e:  # noqa: BLE001
            finished["error"] = repr(e)
        started.set()

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(60)
    t0 = time.time()
    serve.delete("drain")  # returns once the app is gone
    t.join(120)
    assert not t.is_alive()
    assert "error" not in finished and len(finished) == 16, finished
    print(f"\nthe app's deletion waited {time.time() - t0:.1f} s for the running stream")
