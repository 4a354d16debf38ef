# Model-family parity: Prism's logits and perplexity against Hugging Face transformers, on tiny
# random-initialised models of every family Prism builds, loaded from safetensors and from GGUF.
import json
import math
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the parity tests compare against transformers")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed: the parity tests compare against it")
pytest.importorskip("gguf", reason="the gguf package is not installed: the parity tests write GGUF files with it")

import make_models  # noqa: E402
from conftest import report  # noqa: E402

FAMILIES = list(make_models.FAMILIES)
# Families with their own weights (not a config-layout variant of another): GGUF and perplexity.
BASE_FAMILIES = [f for f in FAMILIES if make_models.FAMILIES[f].variant_of is None]

PROMPT_LEN, DECODE_STEPS = 12, 16
# f32 parity: max |prism - transformers| over one logits vector <= REL_TOL * max |transformers|.
REL_TOL = 1e-4
# Q8_0 GGUF: checked twice. (1) Against transformers running the same model with every 2-D
# weight replaced by its Q8_0 round trip (gguf.quants quantize + dequantize): REL_TOL, as Prism
# dequantizes Q8_0 weights to f32 exactly. (2) Against the f32 model, a loose bound: Q8_0 rounds
# each weight to 1/254 of its 32-block's max magnitude; through these random models (two layers,
# logits spread over several units) that moves the logits by ~2.5e-2 x max|logit| (measured),
# so 6e-2 flags a broken quantized path (wrong scales, block layout) without flaking. The
# greedy token must also agree wherever the f32 top two are clearly apart.
Q8_REL_TOL = 6e-2
PPL_CTX = 64

PPL_TEXT = """\
The lighthouse keeper kept a ledger of every ship that passed the point. In the spring of 1887 he wrote
that 214 vessels had gone by, most of them schooners carrying timber south, and that fog had closed the
harbour for eleven days in April. His daughter, who later ran the station herself, added notes in the
margin: the price of lamp oil (3 cents a pint, then 4), the names of the pilots, and once, underlined
twice, "the whales came back."

Keeping a light was mostly patience. The lens had to be polished every morning, the wick trimmed, the
clockwork that turned the lamp wound every four hours through the night. A storm could crack the glass;
salt crept into everything. Yet the ledger never mentions being lonely. It reads like a long conversation
with the sea: wind from the north-east, swell rising; a brig aground on the bar, crew safe; calm, and
the water so clear the rocks showed twenty feet down.

When the station was automated in 1961 the ledger went to the town library, where anyone may read it.
Visitors tend to skip the tables of ships and turn straight to the margins, looking for the whales.
"""


def _ids(family_name, n, vocab):
    rng = np.random.default_rng(1000 + make_models.FAMILIES[family_name].seed)
    return [int(x) for x in rng.integers(3, vocab, size=n)]


def _reference(zoo, name):
    """(prompt ids, decode ids, transformers' logits at every position of prompt + decode)."""
    key = ("ref", name)
    if key not in zoo.cache:
        model, folder, _ = zoo.get(name)
        ntok = len(make_models.load_tokenizer(folder))
        ids = _ids(name, PROMPT_LEN + DECODE_STEPS, min(ntok, model.config.vocab_size))
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
        zoo.cache[key] = (ids[:PROMPT_LEN], ids[PROMPT_LEN:], logits)
    return zoo.cache[key]


# PRISM_TEST_DEVICE=cuda (or opencl, interp, systolic:quad-f32) runs Prism's side of the logits checks there.
DEVICE = os.environ.get("PRISM_TEST_DEVICE", "cpu")


def _prism_logits(prism, model_path, prompt, decode, tmp_path, tag, *extra):
    out = tmp_path / f"logits-{tag}.json"
    prism.run("logits", model_path, "--prompt-ids", ",".join(map(str, prompt)), "--decode-ids",
              ",".join(map(str, decode)), "--all", "--ctx", 64, "--device", DEVICE, "-o", out, *extra)
    with open(out) as f:
        j = json.load(f)
    assert j["prompt_ids"] == prompt
    prefill = np.asarray(j["prefill"], dtype=np.float32).reshape(len(prompt), -1)
    decode_logits = np.asarray(j["decode"], dtype=np.float32)
    assert decode_logits.shape[0] == len(decode)
    return prefill, decode_logits


def _worst(actual, expected):
    """max over rows of max|actual - expected| / max|expected|, and the row where it happens."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    err = np.abs(actual.astype(np.float64) - expected).max(axis=1) / np.abs(expected).max(axis=1)
    return float(err.max()), int(err.argmax())


def _check_logits(prism, zoo, name, model_path, tmp_path, tag, tol):
    prompt, decode, ref = _reference(zoo, name)
    prefill, dec = _prism_logits(prism, model_path, prompt, decode, tmp_path, tag)
    vocab = ref.shape[1]
    assert prefill.shape[1] == vocab and dec.shape[1] == vocab
    pre_err, pre_row = _worst(prefill, ref[:PROMPT_LEN])
    dec_err, dec_row = _worst(dec, ref[PROMPT_LEN:])
    report(f"{name} [{tag}]", "max|diff|/max|logit| prefill / decode", f"{pre_err:.2e} / {dec_err:.2e}")
    assert pre_err <= tol, f"{name} {tag}: prefill position {pre_row}: relative error {pre_err:.3e} > {tol}"
    assert dec_err <= tol, f"{name} {tag}: decode step {dec_row}: relative error {dec_err:.3e} > {tol}"
    return prefill, dec, ref


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_safetensors(prism, zoo, tmp_path, name):
    _, folder, _ = zoo.get(name)
    _check_logits(prism, zoo, name, folder, tmp_path, "safetensors", REL_TOL)


@pytest.mark.parametrize("name", BASE_FAMILIES)
def test_logits_gguf(prism, zoo, tmp_path, name):
    family = make_models.FAMILIES[name]
    if family.gguf_skip:
        pytest.skip(f"{name}: {family.gguf_skip}")
    _, _, gguf_path = zoo.get(name)
    _check_logits(prism, zoo, name, gguf_path, tmp_path, "gguf f32", REL_TOL)


def _q8_0_roundtrip_model(model):
    """A copy of model whose 2-D weights went through Q8_0 quantization and back."""
    import copy
    import gguf
    q8 = gguf.GGMLQuantizationType.Q8_0
    m = copy.deepcopy(model)
    with torch.no_grad():
        for _, p in m.named_parameters():
            if p.dim() == 2:
                w = p.detach().numpy()
                p.copy_(torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(w, q8), q8).reshape(w.shape)))
    return m


def test_logits_gguf_q8_0(prism, zoo, tmp_path):
    name = "llama2"
    model, folder, _ = zoo.get(name)
    path = make_models.write_gguf(model, make_models.FAMILIES[name], folder, str(tmp_path / "model-q8_0.gguf"),
                                  quant="Q8_0")
    prompt, decode, ref = _reference(zoo, name)
    prefill, dec = _prism_logits(prism, path, prompt, decode, tmp_path, "q8_0", "--exact")
    got = np.concatenate([prefill, dec])
    # (0) by default the products round the activation to 8 bits per 32 values, as llama.cpp does
    fast = np.concatenate(_prism_logits(prism, path, prompt, decode, tmp_path, "q8_0-int8"))
    fast_err, fast_row = _worst(fast, ref)
    report(f"{name} [gguf Q8_0]", "int8 products vs f32 transformers (loose)", f"{fast_err:.2e}")
    assert fast_err <= Q8_REL_TOL, f"Q8_0 int8 position {fast_row}: {fast_err:.3e} from the f32 model"
    # (1) exact-dequantization parity
    with torch.no_grad():
        ref_q8 = _q8_0_roundtrip_model(model)(torch.tensor([prompt + decode])).logits[0].numpy()
    q8_err, q8_row = _worst(got, ref_q8)
    # (2) closeness to the f32 model
    f32_err, f32_row = _worst(got, ref)
    report(f"{name} [gguf Q8_0]", "vs Q8_0-dequantized transformers", f"{q8_err:.2e}")
    report(f"{name} [gguf Q8_0]", "vs f32 transformers (loose)", f"{f32_err:.2e}")
    assert q8_err <= REL_TOL, f"Q8_0 position {q8_row}: {q8_err:.3e} from transformers on dequantized weights"
    assert f32_err <= Q8_REL_TOL, f"Q8_0 position {f32_row}: {f32_err:.3e} from the f32 model > {Q8_REL_TOL}"
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 0.05 * np.abs(ref).max(axis=1)
    assert clear.any()
    assert (got.argmax(1) == ref.argmax(1))[clear].all(), "Q8_0 changes the greedy token at a clear-cut position"
    assert (fast.argmax(1) == ref.argmax(1))[clear].all(), "int8 products change a clear-cut greedy token"


def _hf_perplexity(model, tok, text, ctx):
    ids = tok(text).input_ids  # add_special_tokens=True, as the transformers perplexity recipe
    nll, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids), ctx):
            window = ids[start:start + ctx]
            if len(window) < 2:
                break
            logits = model(torch.tensor([window])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            target = torch.tensor(window[1:])
            nll -= float(logp[:-1].gather(1, target[:, None]).sum())
            count += len(window) - 1
    return math.exp(nll / count), count


def _check_perplexity(prism, zoo, name, model_path, tmp_path, tag):
    model, folder, _ = zoo.get(name)
    key = ("ppl", name)
    if key not in zoo.cache:
        zoo.cache[key] = _hf_perplexity(model, make_models.load_tokenizer(folder), PPL_TEXT, PPL_CTX)
    hf_ppl, hf_count = zoo.cache[key]
    text = tmp_path / "text.txt"
    text.write_text(PPL_TEXT, encoding="utf-8")
    out = prism.run("perplexity", model_path, "--file", text, "--ctx", PPL_CTX, "--threads", 2).stdout
    line = next(l for l in out.splitlines() if l.startswith("perplexity:"))
    got = float(line.split()[1])
    scored = int(line.split("(")[1].split()[0])
    report(f"{name} [{tag}]", f"perplexity prism / transformers ({hf_count} tok)", f"{got:.4g} / {hf_ppl:.6g}")
    assert scored == hf_count, f"{name} {tag}: prism scored {scored} tokens, transformers {hf_count} (tokenization differs)"
    # Prism prints 4 significant digits: equal means within half a unit of the 4th digit.
    half_unit = 0.5 * 10 ** (math.floor(math.log10(hf_ppl)) - 3)
    assert abs(got - hf_ppl) <= half_unit * (1 + 1e-6), f"{name} {tag}: perplexity {line!r} vs transformers {hf_ppl:.6g}"


@pytest.mark.parametrize("name", BASE_FAMILIES)
def test_perplexity_safetensors(prism, zoo, tmp_path, name):
    _, folder, _ = zoo.get(name)
    _check_perplexity(prism, zoo, name, folder, tmp_path, "safetensors")


@pytest.mark.parametrize("name", BASE_FAMILIES)
def test_perplexity_gguf(prism, zoo, tmp_path, name):
    family = make_models.FAMILIES[name]
    if family.gguf_skip:
        pytest.skip(f"{name}: {family.gguf_skip}")
    _, _, gguf_path = zoo.get(name)
    _check_perplexity(prism, zoo, name, gguf_path, tmp_path, "gguf f32")


# ---------------------------------------------------------------------------------------------
# Bad inputs: a non-zero exit and one clear line on stderr.

def _one_line_error(p):
    assert p.returncode != 0, f"expected a failure, got exit 0:\n{p.stdout}"
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{p.stderr}"
    assert lines[0].startswith("prism: error:"), lines[0]
    return lines[0]


def test_unsupported_architecture(prism, zoo, tmp_path):
    _, folder, _ = zoo.get("llama2")
    bad = tmp_path / "t5"
    shutil.copytree(folder, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "t5", ["T5ForConditionalGeneration"]
    (bad / "config.json").write_text(json.dumps(cfg))
    line = _one_line_error(prism.run("logits", bad, "--prompt-ids", "1,2", "-o", tmp_path / "o.json", check=False))
    assert "t5" in line, line
    for arch in ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "gpt2", "bert"):
        assert arch in line, f"the message should list the supported architectures: {line}"


def test_truncated_safetensors(prism, zoo, tmp_path):
    _, folder, _ = zoo.get("llama2")
    bad = tmp_path / "truncated"
    shutil.copytree(folder, bad)
    st = bad / "model.safetensors"
    size = st.stat().st_size
    with open(st, "r+b") as f:
        f.truncate(size // 2)
    line = _one_line_error(prism.run("logits", bad, "--prompt-ids", "1,2", "-o", tmp_path / "o.json", check=False))
    assert "model.safetensors" in line, f"the message should name the file: {line}"


def test_truncated_gguf(prism, zoo, tmp_path):
    _, _, gguf_path = zoo.get("llama2")
    bad = tmp_path / "truncated.gguf"
    data = open(gguf_path, "rb").read()
    bad.write_bytes(data[: len(data) * 2 // 3])
    line = _one_line_error(prism.run("logits", bad, "--prompt-ids", "1,2", "-o", tmp_path / "o.json", check=False))
    assert "truncated.gguf" in line, f"the message should name the file: {line}"


def test_missing_model_path(prism, tmp_path):
    missing = tmp_path / "no-such-model"
    line = _one_line_error(prism.run("logits", missing, "--prompt-ids", "1,2", "-o", tmp_path / "o.json",
                                     check=False))
    assert str(missing) in line and "no such file" in line, line


def test_unknown_command(prism):
    line = _one_line_error(prism.run("frobnicate", check=False))
    assert "unknown command 'frobnicate'" in line and "run" in line, line
