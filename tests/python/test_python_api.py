# The Python API (prism.load, generate, logits, tokenizer, compile) on the shipped stories260K, against
# the published greedy text and against `prism logits`; arrays in and out without copies; errors.
import json
import os

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
STORIES = os.path.join(ROOT, "models", "stories260K", "stories260K.bin")


@pytest.fixture(scope="module")
def model(prism_py):
    return prism_py.load(STORIES, threads=2)


def _reference():
    with open(os.path.join(ROOT, "tests", "data", "reference", "stories260K.json")) as f:
        return json.load(f)


def test_generate_greedy_matches_reference(model):
    for ref in _reference():
        pieces = []
        g = model.generate(ref["prompt"], max_tokens=200, temperature=0)
        for piece in g:
            assert isinstance(piece, str)
            pieces.append(piece)
        text = ref["prompt"] + "".join(pieces)
        assert len(pieces) > 10  # streamed piece by piece
        assert g.finish_reason in ("length", "stop")
        assert "".join(pieces) == g.text
        want = ref["greedy_text"].rstrip("\n")
        n = min(len(text), len(want))
        assert n > 200 and text[:n] == want[:n]


def test_generate_options(model):
    a = model.complete("Once upon a time", max_tokens=40, temperature=0.9, seed=7)
    b = model.complete("Once upon a time", max_tokens=40, temperature=0.9, seed=7)
    c = model.complete("Once upon a time", max_tokens=40, temperature=0.9, seed=8)
    assert a == b and a != c
    g = model.generate("Once upon a time", max_tokens=100, temperature=0, stop=["Lily"])
    assert "Lily" not in "".join(g) and g.finish_reason == "stop"
    ids = model.tokenizer.encode("Once upon a time")
    assert model.complete(ids, max_tokens=20, temperature=0) == model.complete("Once upon a time",
                                                                                max_tokens=20, temperature=0)
    g = model.generate("Once", max_tokens=5, temperature=0)
    list(g)
    assert len(g.tokens) == 5 and g.finish_reason == "length" and g.prompt_tokens == len(
        model.tokenizer.encode("Once"))


def test_logits_match_the_cli_and_take_arrays(model, prism, tmp_path):
    ids = model.tokenizer.encode("Once upon a time")
    logits = model.logits(ids)
    assert logits.dtype == np.float32 and logits.shape == (len(ids), model.vocab_size)
    assert np.isfinite(logits).all()
    out = tmp_path / "l.json"
    prism.run("logits", STORIES, "--text", "Once upon a time", "-o", out)
    cli = json.loads(out.read_text())
    assert cli["prompt_ids"] == ids
    last = np.array(cli["prefill"], dtype=np.float32)  # the CLI's logits after the whole prompt
    assert np.abs(last - logits[-1]).max() <= 1e-4 * np.abs(last).max()
    # numpy and torch arrays of any integer width give the same logits
    assert np.array_equal(model.logits(np.array(ids, dtype=np.int64)), logits)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(model.logits(torch.tensor(ids, dtype=torch.int32)))  # no copy either way
    assert torch.equal(t, torch.from_numpy(logits))


def test_tokenizer(model):
    tok = model.tokenizer
    ids = tok.encode("Once upon a time")
    assert ids[0] == tok.bos_id and tok.decode(ids) == "Once upon a time"
    assert tok.encode("Once upon a time", add_special=False) == ids[1:]
    assert tok.vocab_size == model.vocab_size == 512
    assert tok.token_id(tok.token_text(ids[1])) == ids[1]
    assert not tok.has_chat_template


def test_errors_are_one_line_exceptions(prism_py, model):
    with pytest.raises(prism_py.PrismError, match="no-such-model"):
        prism_py.load("/tmp/no-such-model.gguf")
    with pytest.raises(prism_py.PrismError, match="chat template"):
        model.generate(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(prism_py.PrismError):
        model.generate()
    with pytest.raises(prism_py.PrismError, match="integer"):
        model.logits(np.zeros((2, 3), dtype=np.int32))
    with pytest.raises(prism_py.PrismError, match="token"):
        model.logits([1, 100000])
    with pytest.raises(prism_py.PrismError, match="context"):
        model.generate(list(range(1, 600)))
    # a generation superseded by another use of the model's KV cache says so
    g = model.generate("Once upon a time", max_tokens=50, temperature=0)
    next(g)
    model.logits([1, 2])
    with pytest.raises(prism_py.PrismError, match="superseded"):
        list(g)


def test_compile_writes_an_artifact_with_receipts(prism_py, tmp_path):
    out = tmp_path / "s.prism"
    r = prism_py.compile(STORIES, out, search_budget=5, threads=2, ctx=256)
    assert os.path.isdir(out) and r.kernels > 0 and r.receipts
    kernel_receipts = [x for x in r.receipts if x.kernel and x.kernel not in ("(search)", "(program)")]
    # The program search's receipt: which rewritten program runs, and what it timed.
    program = [x for x in r.receipts if x.kernel == "(program)"]
    assert len(program) == 1 and program[0].chosen and "timed" in program[0].raw, program
    assert kernel_receipts and all(x.bucket for x in kernel_receipts)
    assert all(x.chosen or "default" in x.reason for x in kernel_receipts)
    m = prism_py.load(out, threads=2)
    ref = _reference()[0]
    text = ref["prompt"] + m.complete(ref["prompt"], max_tokens=60, temperature=0)
    assert ref["greedy_text"].startswith(text[: len(ref["greedy_text"])][:200])


def test_graph_api_runs_on_arrays(prism_py):
    g = prism_py.Graph()
    n = prism_py.Expr.sym("n")
    x = g.input("x", "f32", [n, 8])
    w = g.weight("w", "f32", [4, 8])
    y = x.matmul(w.permute([1, 0])).add(1.0).softmax(-1)
    g.output(y, "y")
    p = g.compile("cpu", 2)
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((4, 8)).astype(np.float32)
    p.bind_weight("w", wv)
    for rows in (1, 5, 33):
        xv = rng.standard_normal((rows, 8)).astype(np.float32)
        (got,) = p.run({"x": xv})
        z = xv @ wv.T + 1
        want = np.exp(z - z.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        assert got.shape == (rows, 4) and np.abs(got - want).max() < 1e-5
    with pytest.raises(prism_py.PrismError, match="x"):
        p.run({"x": np.zeros((3, 7), dtype=np.float32)})
    with pytest.raises(prism_py.PrismError, match="float64"):
        p.run({"x": np.zeros((3, 8))})
