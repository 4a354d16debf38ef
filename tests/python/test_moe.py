# Mixture-of-experts GGUF files as llama.cpp writes and runs them: Prism against an exact reference and llama.cpp.
"""The files in tests/data/moe were written by tests/fixtures/make_moe_models.py: tiny Mixtral-style models
(general.architecture "llama", 4 experts, top 2, experts stacked in blk.N.ffn_*_exps), one in f32 and one
quantized by llama.cpp to its Q4_K_M mix, with llama.cpp's logits for one prompt.

f32: Prism against llama.cpp directly; they differ only by llama.cpp's f16 KV cache and summation order
(measured 2.9e-4 x max|logit|; bound 1e-3). This checks the GGUF conventions (which rows are gate and up,
the expert order, softmax then top-k then renormalisation) against llama.cpp itself, not against a writer
of ours.

Q4_K_M: as in test_kquants.py, two references on the weights as gguf.quants dequantizes them, both
transformers' MixtralForCausalLM: exact (Prism must agree within 1e-4 x max|logit|) and llama.cpp-like (the
inputs of every product with a quantized weight rounded to Q8_K, experts included, and the f16 KV cache).
Prism against llama.cpp within 1.25 x |exact - llama.cpp-like| + 2e-3, the bound test_kquants.py argues.
"""
from pathlib import Path

import numpy as np
import pytest

from conftest import report

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from test_kquants import _field, logits_of, round_q8k  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "moe"


@pytest.fixture(autouse=True)
def fresh_tuning_database(monkeypatch, tmp_path):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))  # the default schedules: f32 activations


@pytest.fixture(scope="module")
def llamacpp():
    return np.load(DATA / "llamacpp_logits.npz")


def load_reference(path):
    """transformers' Mixtral holding the file's weights as gguf.quants dequantizes them, and each weight's type."""
    r = gguf.GGUFReader(str(path))
    heads, kv = int(_field(r, "llama.attention.head_count")), int(_field(r, "llama.attention.head_count_kv"))
    cfg = transformers.MixtralConfig(
        vocab_size=len(r.fields["tokenizer.ggml.tokens"].data), hidden_size=int(_field(r, "llama.embedding_length")),
        intermediate_size=int(_field(r, "llama.feed_forward_length")),
        num_hidden_layers=int(_field(r, "llama.block_count")), num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=int(_field(r, "llama.attention.key_length")),
        rms_norm_eps=float(_field(r, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(_field(r, "llama.rope.freq_base")), max_position_embeddings=512,
        num_local_experts=int(_field(r, "llama.expert_count")),
        num_experts_per_tok=int(_field(r, "llama.expert_used_count")), tie_word_embeddings=False)
    model = transformers.MixtralForCausalLM(cfg).eval()
    names = {"token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight", "output": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm.weight", "attn_q": "self_attn.q_proj.weight",
                 "attn_k": "self_attn.k_proj.weight", "attn_v": "self_attn.v_proj.weight",
                 "attn_output": "self_attn.o_proj.weight", "ffn_norm": "post_attention_layernorm.weight",
                 "ffn_gate_inp": "mlp.gate.weight", "ffn_down_exps": "mlp.experts.down_proj"}
    state, types, gate_up = {}, {}, {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        parts = t.name.split(".")
        if parts[0] != "blk":
            state[names[parts[0]]] = torch.from_numpy(np.ascontiguousarray(w))
            types[names[parts[0]]] = t.tensor_type
            continue
        kind, p = parts[2], f"model.layers.{parts[1]}."
        if kind in ("attn_q", "attn_k"):  # llama.cpp's interleaved rope rows back to half-split
            n = heads if kind == "attn_q" else kv
            w = w.reshape(n, w.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)
        if kind in ("ffn_gate_exps", "ffn_up_exps"):  # transformers holds them as one [E, 2 * ffn, hidden]
            gate_up.setdefault(p, {})[kind] = w
            types[p + "mlp.experts.gate_up_proj"] = t.tensor_type
            continue
        state[p + per_layer[kind]] = torch.from_numpy(np.ascontiguousarray(w))
        types[p + per_layer[kind]] = t.tensor_type
    for p, parts in gate_up.items():
        state[p + "mlp.experts.gate_up_proj"] = torch.from_numpy(
            np.concatenate([parts["ffn_gate_exps"], parts["ffn_up_exps"]], axis=1))
    model.load_state_dict(state, strict=True)
    return model, types


def llamacpp_like_experts(model, types):
    """Rounds the inputs of the experts' products to Q8_K, as llama.cpp does before its integer dot products
    (the attention projections are rounded by logits_of's hooks on nn.Linear)."""
    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e in range(self.num_experts):
            token, slot = torch.where(top_k_index == e)
            if token.numel() == 0:
                continue
            gate, up = torch.nn.functional.linear(round_q8k(hidden_states[token]), self.gate_up_proj[e]).chunk(2, -1)
            h = torch.nn.functional.linear(round_q8k(self.act_fn(gate) * up), self.down_proj[e])
            out.index_add_(0, token, h * top_k_weights[token, slot, None])
        return out
    for i, layer in enumerate(model.model.layers):
        assert types[f"model.layers.{i}.mlp.experts.gate_up_proj"] != gguf.GGMLQuantizationType.F32
        layer.mlp.experts.forward = forward.__get__(layer.mlp.experts)


def test_moe_f32_matches_llamacpp(prism_py, llamacpp):
    ids = llamacpp["prompt_ids"].tolist()
    ours = np.asarray(prism_py.load(str(DATA / "tiny-moe-f32.gguf"), threads=2).logits(ids))
    theirs = llamacpp["f32"]
    assert np.isfinite(ours).all()
    gap = np.abs(ours - theirs).max() / np.abs(theirs).max()
    report("moe f32", "vs llama.cpp x max|logit|", f"{gap:.1e}")
    assert gap <= 1e-3, f"Prism vs llama.cpp on the f32 MoE file: {gap:.2e} x max|logit|"
    assert (ours.argmax(1) == theirs.argmax(1)).all()


def test_moe_q4_k_m_matches_exact_reference_and_llamacpp(prism_py, llamacpp):
    path = DATA / "tiny-moe-Q4_K_M.gguf"
    ids = llamacpp["prompt_ids"].tolist()
    model, types = load_reference(path)
    exact = logits_of(model, ids)
    ours = np.asarray(prism_py.load(str(path), threads=2, exact=True).logits(ids))
    fast = np.asarray(prism_py.load(str(path), threads=2).logits(ids))  # int8 products, as llama.cpp's
    scale = np.abs(exact).max()
    err_exact = np.abs(ours - exact).max() / scale
    assert err_exact <= 1e-4, f"Prism vs exact reference {err_exact:.2e} x max|logit|"
    llamacpp_like_experts(model, types)
    like = logits_of(model, ids, types)
    theirs = llamacpp["Q4_K_M"]
    gap = np.abs(ours - theirs).max() / scale
    bound = 1.25 * np.abs(exact - like).max() / scale + 2e-3
    rms = lambda a: float(np.sqrt(np.mean(np.square(a))))  # noqa: E731
    residual, departure = rms(theirs - like), rms(theirs - exact)
    report("moe Q4_K_M", "vs exact | vs llama.cpp (bound) | model residual",
           f"{err_exact:.1e} | {gap:.4f} ({bound:.4f}) | {residual / departure:.2f} RMS; "
           f"int8 vs exact {np.abs(fast - exact).max() / scale:.4f}")
    assert residual <= 0.7 * departure, f"the model of llama.cpp explains too little ({residual:.4f} of {departure:.4f})"
    assert gap <= bound, f"Prism vs llama.cpp {gap:.4f} > bound {bound:.4f} x max|logit|"
    fast_err = np.abs(fast - exact).max() / scale  # Prism's own rounding moves the logits no more than llama.cpp's
    assert fast_err <= bound, f"int8 Prism vs exact {fast_err:.4f} > bound {bound:.4f} x max|logit|"


def test_moe_per_expert_gguf_layout_equals_the_stacked_one(prism_py, llamacpp, tmp_path):
    # The same weights as tiny-moe-f32.gguf in the layout of the first Mixtral GGUF files (one tensor per
    # expert, blk.N.ffn_gate.E.weight): Prism stacks them on load and computes the same logits.
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
    import make_moe_models
    path = tmp_path / "per-expert.gguf"
    make_moe_models.write(path, hidden=64, head_dim=16, ffn=96, seed=2612, per_expert=True)
    ids = llamacpp["prompt_ids"].tolist()
    stacked = np.asarray(prism_py.load(str(DATA / "tiny-moe-f32.gguf"), threads=2).logits(ids))
    ours = np.asarray(prism_py.load(str(path), threads=2).logits(ids))
    assert np.array_equal(ours, stacked)
    assert np.abs(ours - llamacpp["f32"]).max() / np.abs(llamacpp["f32"]).max() <= 1e-3


def test_moe_expert_count_disagreeing_with_tensors_is_a_one_line_error(prism_py, tmp_path):
    # The file's experts are 4; metadata claiming 5 must not read past them.
    src = DATA / "tiny-moe-f32.gguf"
    r = gguf.GGUFReader(str(src))
    data = bytearray(src.read_bytes())
    f = r.fields["llama.expert_count"]
    off = f.offset + sum(p.nbytes for p in f.parts[:-1])
    data[off:off + 4] = np.uint32(5).tobytes()
    bad = tmp_path / "experts5.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(Exception) as e:
        prism_py.load(str(bad))
    msg = str(e.value)
    assert "ffn_gate_inp" in msg or "mlp.gate.weight" in msg, msg
    assert "[5, 64]" in msg and "\n" not in msg, msg


def test_moe_missing_router_is_a_one_line_error(prism_py, tmp_path):
    # Layer 0's router renamed away (same length, so the file stays valid): its experts have no router.
    data = (DATA / "tiny-moe-f32.gguf").read_bytes()
    assert data.count(b"blk.0.ffn_gate_inp.weight") == 1
    bad = tmp_path / "no-router.gguf"
    bad.write_bytes(data.replace(b"blk.0.ffn_gate_inp.weight", b"blk.0.ffn_gate_xyz.weight"))
    with pytest.raises(Exception) as e:
        prism_py.load(str(bad))
    msg = str(e.value)
    assert "model.layers.0.mlp.gate.weight" in msg and "missing" in msg and "\n" not in msg, msg
