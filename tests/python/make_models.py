# Builds the tiny random-initialised model families the parity tests run, with transformers
# (Hugging Face folders) and the gguf package (GGUF files in llama.cpp's conventions).
"""Usage: make_models.py OUT_DIR [FAMILY...]

Each family gets OUT_DIR/<family>/hf (config.json + model.safetensors + the real tokenizer
files of tests/data/tokenizers/<name>) and, where the family has a GGUF layout Prism reads,
OUT_DIR/<family>/model-f32.gguf. The parity tests import this module and call build_family().
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

TOKENIZERS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizers")

# Files of a tokenizer folder that describe the model rather than the tokenizer; the fixture
# writes its own config.json.
_NOT_TOKENIZER_FILES = {"SOURCE.md", "config.json", "generation_config.json"}

# llama.cpp token types (gguf.TokenType): the same numbers as SentencePiece's piece types.
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


class Family:
    """One model family: the transformers config, the tokenizer it ships with, its GGUF layout."""

    def __init__(self, name, arch, config, tokenizer, gguf_arch, seed, gguf_skip=None,
                 legacy_config=False, tokenizer_pre=None, variant_of=None, spm_model=None):
        self.name = name
        self.arch = arch                # transformers family: llama, mistral, qwen2, qwen3, gemma*, phi3, gpt2
        self.config = config            # kwargs of the transformers config class
        self.tokenizer = tokenizer      # folder name under tests/data/tokenizers
        self.gguf_arch = gguf_arch      # general.architecture llama.cpp's converter writes
        self.seed = seed
        self.gguf_skip = gguf_skip      # reason Prism cannot read this family's GGUF, or None
        # True: config.json written the way checkpoints on the Hub have it (top-level rope_theta
        # and rope_scaling), instead of transformers 5's "rope_parameters" object.
        self.legacy_config = legacy_config
        self.tokenizer_pre = tokenizer_pre  # tokenizer.ggml.pre for byte-level BPE tokenizers
        # Another family's model under a different config.json layout: only its safetensors
        # logits are tested (no GGUF, no second perplexity run).
        self.variant_of = variant_of
        # The tokenizer folder whose tokenizer.model the GGUF writer reads when the family's own folder
        # lacks one (Phi-3 ships Llama 2's: the same vocabulary and merges as TinyLlama's tokenizer.json).
        self.spm_model = spm_model


def _gemma3_layers(n, pattern):
    """Gemma 3's layer types: every pattern-th layer global, the others windowed."""
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]


# What the Gemma fixtures share: head_dim 16 apart from hidden / heads, TinyLlama's vocabulary.
_GEMMA_COMMON = dict(hidden_size=48, head_dim=16, intermediate_size=104, max_position_embeddings=256,
                     vocab_size=32000, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)

_LLAMA_COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256,
                     hidden_act="silu")

FAMILIES = {
    # Llama 2 / TinyLlama: untied head, rope_theta 10000, SentencePiece tokenizer.
    "llama2": Family("llama2", "llama", dict(_LLAMA_COMMON, intermediate_size=160, num_key_value_heads=4,
                                             vocab_size=32000, rms_norm_eps=1e-5, rope_theta=10000.0,
                                             tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
                     "tinyllama-1.1b-chat", "llama", seed=1, legacy_config=True),
    # Llama 3.x: llama3 rope scaling with a small original context so it changes frequencies,
    # rope_theta 500000, tied embeddings, GQA.
    "llama3": Family("llama3", "llama", dict(_LLAMA_COMMON, intermediate_size=192, num_key_value_heads=2,
                                             vocab_size=32000, rms_norm_eps=1e-5, rope_theta=500000.0,
                                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 64},
                                             tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
                     "tinyllama-1.1b-chat", "llama", seed=2),
    # The same Llama 3 weights with the config.json layout of Hub checkpoints (rope_scaling).
    "llama3_legacy": Family("llama3_legacy", "llama", None, "tinyllama-1.1b-chat", "llama", seed=2,
                            legacy_config=True, variant_of="llama3"),
    # Mistral 7B v0.3 layout: GQA, rope_theta 1e6, no sliding window, its own 32768 tokenizer.
    "mistral": Family("mistral", "mistral", dict(_LLAMA_COMMON, intermediate_size=160, num_key_value_heads=2,
                                                 vocab_size=32768, rms_norm_eps=1e-5, rope_theta=1000000.0,
                                                 sliding_window=None, tie_word_embeddings=False,
                                                 bos_token_id=1, eos_token_id=2),
                      "mistral-7b-instruct-v0.3", "llama", seed=3),
    # Qwen2 / Qwen2.5: q/k/v biases, tied embeddings, embedding rows padded past the tokenizer.
    "qwen2": Family("qwen2", "qwen2", dict(_LLAMA_COMMON, intermediate_size=160, num_key_value_heads=2,
                                           vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                           use_sliding_window=False, tie_word_embeddings=True,
                                           bos_token_id=151643, eos_token_id=151645),
                    "qwen2.5", "qwen2", seed=4, tokenizer_pre="qwen2"),
    # Qwen3: q/k RMS norms, explicit head_dim (4 heads x 32 != hidden 64), untied head.
    "qwen3": Family("qwen3", "qwen3", dict(_LLAMA_COMMON, intermediate_size=160, num_key_value_heads=2,
                                           head_dim=32, vocab_size=151936, rms_norm_eps=1e-6,
                                           rope_theta=1000000.0, use_sliding_window=False,
                                           tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645),
                    "qwen2.5", "qwen3", seed=5, tokenizer_pre="qwen2"),
    # GPT-2: learned positions, LayerNorm with biases, Conv1D weights, gelu_new, tied head.
    "gpt2": Family("gpt2", "gpt2", dict(n_embd=64, n_layer=2, n_head=4, n_positions=128, vocab_size=50257,
                                        activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                        bos_token_id=50256, eos_token_id=50256),
                   "gpt2", "gpt2", seed=6, tokenizer_pre="gpt-2"),
    # SmolLM2 as a llama: tied embeddings, multi-query attention (1 KV head), byte-level BPE
    # tokenizer with individual digits, Hub-style config.json.
    "smollm": Family("smollm", "llama", dict(_LLAMA_COMMON, intermediate_size=128, num_key_value_heads=1,
                                             vocab_size=49152, rms_norm_eps=1e-5, rope_theta=100000.0,
                                             tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
                     "smollm2", "llama", seed=7, legacy_config=True, tokenizer_pre="smollm"),
    # Gemma: (1 + w) norms, embeddings scaled by sqrt(hidden), GeGLU, MQA, head_dim apart from hidden / heads.
    "gemma": Family("gemma", "gemma", dict(_GEMMA_COMMON, num_hidden_layers=2, num_attention_heads=3,
                                           num_key_value_heads=1, hidden_act="gelu_pytorch_tanh",
                                           rope_theta=10000.0),
                    "tinyllama-1.1b-chat", "gemma", seed=8),
    # Gemma 2: sandwich norms, scores and logits soft-capped (caps low enough to bend these models' values),
    # alternating windowed and global layers with a window shorter than the prompt. query_pre_attn_scalar
    # is head_dim, as in the 2B and 9B models: llama.cpp's GGUF files carry no query scale.
    "gemma2": Family("gemma2", "gemma2", dict(_GEMMA_COMMON, num_hidden_layers=4, num_attention_heads=4,
                                              num_key_value_heads=2, hidden_activation="gelu_pytorch_tanh",
                                              rope_theta=10000.0, query_pre_attn_scalar=16, sliding_window=5,
                                              attn_logit_softcapping=3.0, final_logit_softcapping=4.0),
                     "tinyllama-1.1b-chat", "gemma2", seed=9),
    # Gemma 3: q/k norms, windowed layers with their own rope base, linear rope scaling on the global
    # one, Gemma 3's pattern (five windowed layers, then a global one), untied head.
    "gemma3": Family("gemma3", "gemma3", dict(_GEMMA_COMMON, num_hidden_layers=6, num_attention_heads=4,
                                              num_key_value_heads=2, hidden_activation="gelu_pytorch_tanh",
                                              query_pre_attn_scalar=16, sliding_window=6,
                                              layer_types=_gemma3_layers(6, 6),
                                              rope_parameters={
                                                  "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                                     "rope_theta": 1000000.0},
                                                  "sliding_attention": {"rope_type": "default",
                                                                        "rope_theta": 10000.0}},
                                              tie_word_embeddings=False),
                     "tinyllama-1.1b-chat", "gemma3", seed=10),
    # The same Gemma 3 weights with the config.json of Hub checkpoints (rope_local_base_freq,
    # rope_scaling, sliding_window_pattern, no layer_types).
    "gemma3_legacy": Family("gemma3_legacy", "gemma3", None, "tinyllama-1.1b-chat", "gemma3", seed=10,
                            legacy_config=True, variant_of="gemma3"),
    # Phi-3: fused qkv and gate-up weights, LongRoPE (short factors: the context stays under the
    # original 64 positions, with the attention factor of a 4x extension), a window on every layer.
    "phi3": Family("phi3", "phi3", dict(_LLAMA_COMMON, intermediate_size=112, num_key_value_heads=2,
                                        vocab_size=32064, rms_norm_eps=1e-5, original_max_position_embeddings=64,
                                        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                         "short_factor": [1.0, 1.3, 1.9, 2.4, 3.1, 4.2, 5.0, 6.5],
                                                         "long_factor": [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 20.0, 30.0]},
                                        sliding_window=7, tie_word_embeddings=False, bos_token_id=1,
                                        eos_token_id=32000, pad_token_id=32000),
                   "phi-3-mini", "phi3", seed=11, spm_model="tinyllama-1.1b-chat"),
    # Mixtral: every MLP routed through the top 2 of 5 experts, renormalised; GGUF as "llama" with expert keys.
    "mixtral": Family("mixtral", "mixtral", dict(_LLAMA_COMMON, intermediate_size=56, num_key_value_heads=2,
                                                 vocab_size=32000, rms_norm_eps=1e-5, rope_theta=1000000.0,
                                                 num_local_experts=5, num_experts_per_tok=2, sliding_window=None,
                                                 tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
                      "tinyllama-1.1b-chat", "llama", seed=12),
    # Qwen3-MoE: q/k norms, top 3 of 6 experts without renormalisation, layer 1 dense (mlp_only_layers).
    "qwen3moe": Family("qwen3moe", "qwen3_moe", dict(_LLAMA_COMMON, intermediate_size=96, num_key_value_heads=2,
                                                     head_dim=32, vocab_size=151936, rms_norm_eps=1e-6,
                                                     rope_theta=1000000.0, num_experts=6, num_experts_per_tok=3,
                                                     moe_intermediate_size=40, norm_topk_prob=False,
                                                     mlp_only_layers=[1], use_sliding_window=False,
                                                     tie_word_embeddings=False, bos_token_id=151643,
                                                     eos_token_id=151645),
                       "qwen2.5", "qwen3moe", seed=13, tokenizer_pre="qwen2"),
    # Qwen2-MoE: q/k/v biases, top 2 of 5 experts without renormalisation, a sigmoid-gated shared expert; its
    # GGUF leaves expert_weights_norm out, as llama.cpp's converter does.
    "qwen2moe": Family("qwen2moe", "qwen2_moe", dict(_LLAMA_COMMON, intermediate_size=96, num_key_value_heads=2,
                                                     vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                                     num_experts=5, num_experts_per_tok=2, moe_intermediate_size=40,
                                                     shared_expert_intermediate_size=72, norm_topk_prob=False,
                                                     use_sliding_window=False, tie_word_embeddings=False,
                                                     bos_token_id=151643, eos_token_id=151645),
                       "qwen2.5", "qwen2moe", seed=14, tokenizer_pre="qwen2"),
    # The same Phi-3 weights with a Hub-style config.json (rope_scaling at the top level).
    "phi3_legacy": Family("phi3_legacy", "phi3", None, "phi-3-mini", "phi3", seed=11, legacy_config=True,
                          variant_of="phi3"),
}
FAMILIES["llama3_legacy"].config = FAMILIES["llama3"].config
FAMILIES["phi3_legacy"].config = FAMILIES["phi3"].config
FAMILIES["gemma3_legacy"].config = FAMILIES["gemma3"].config


def _config_class(arch):
    import transformers
    return {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
            "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
            "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM),
            "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
            "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
            "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
            "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
            "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
            "qwen2_moe": (transformers.Qwen2MoeConfig, transformers.Qwen2MoeForCausalLM),
            "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel)}[arch]


def randomize(model, seed):
    """Gives every parameter a random value (transformers' init leaves biases at 0 and norm
    weights at 1, which would hide bugs in reading them) at scales that keep activations O(1)
    and spread the logits over a few units."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            is_norm = any(k in name for k in ("norm", "ln_1", "ln_2", "ln_f"))
            if is_norm and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.2 * noise)
            elif any(k in name for k in ("embed_tokens", "wte", "wpe")):
                p.copy_(0.4 * noise)
            elif p.dim() == 2:
                # nn.Linear stores [out, in]; GPT-2's Conv1D stores [in, out].
                fan_in = p.shape[0] if ".c_" in name else p.shape[1]
                p.copy_(noise / np.sqrt(fan_in))
            elif ".experts." in name and p.dim() == 3:  # stacked experts [experts, out, in]
                p.copy_(noise / np.sqrt(p.shape[2]))
            else:
                p.copy_(0.2 * noise)


def load_tokenizer(folder):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(folder)


def _legacy_config_json(path, family):
    """Rewrites transformers 5's rope_parameters as the top-level rope_theta / rope_scaling of
    Hub checkpoints written by transformers 4."""
    with open(path) as f:
        cfg = json.load(f)
    if family.arch == "gemma3":  # per-layer-type rope, layer_types as sliding_window_pattern
        rp = cfg.pop("rope_parameters")
        full, local = rp["full_attention"], rp["sliding_attention"]
        cfg["rope_theta"], cfg["rope_local_base_freq"] = full["rope_theta"], local["rope_theta"]
        cfg["rope_scaling"] = {k: v for k, v in full.items() if k != "rope_theta"}
        types = cfg.pop("layer_types")
        pattern = types.index("full_attention") + 1
        assert types == _gemma3_layers(len(types), pattern), types
        cfg["sliding_window_pattern"] = pattern
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        return
    rp = cfg.pop("rope_parameters", None) or {}
    cfg["rope_theta"] = rp.get("rope_theta", family.config.get("rope_theta", 10000.0))
    scaling = {k: v for k, v in rp.items() if k != "rope_theta"}
    cfg["rope_scaling"] = scaling if scaling.get("rope_type", "default") != "default" else None
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def build_hf(family, out_dir):
    """Builds the random model, saves it (f32 safetensors) with the family's tokenizer files and
    returns (model, folder)."""
    import torch
    cfg_cls, model_cls = _config_class(family.arch)
    torch.manual_seed(family.seed)
    config = cfg_cls(**family.config)
    model = model_cls._from_config(config, attn_implementation="eager", dtype=torch.float32)
    randomize(model, family.seed)
    model.eval()
    folder = os.path.join(out_dir, "hf")
    model.save_pretrained(folder, safe_serialization=True)
    src = os.path.join(TOKENIZERS_DIR, family.tokenizer)
    for name in os.listdir(src):
        if name not in _NOT_TOKENIZER_FILES:
            shutil.copy(os.path.join(src, name), folder)
    if family.legacy_config:
        _legacy_config_json(os.path.join(folder, "config.json"), family)
    return model, folder


# ---------------------------------------------------------------------------------------------
# GGUF, written as llama.cpp's convert_hf_to_gguf.py would (its logic re-derived, not copied).

def _sentencepiece_pieces(path):
    """(piece, score, type) of every piece in a SentencePiece tokenizer.model (ModelProto field 1,
    SentencePiece {1: piece, 2: score, 3: type}), read with a minimal protobuf decoder."""
    data = open(path, "rb").read()

    def varint(buf, i):
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v, i

    def fields(buf):
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            num, wire = key >> 3, key & 7
            if wire == 0:
                v, i = varint(buf, i)
            elif wire == 1:
                v, i = buf[i:i + 8], i + 8
            elif wire == 2:
                n, i = varint(buf, i)
                v, i = buf[i:i + n], i + n
            elif wire == 5:
                v, i = buf[i:i + 4], i + 4
            else:
                raise ValueError(f"{path}: unsupported protobuf wire type {wire}")
            yield num, wire, v

    pieces = []
    for num, wire, v in fields(data):
        if num != 1 or wire != 2:
            continue
        piece, score, ptype = "", 0.0, TT_NORMAL
        for n, w, x in fields(v):
            if n == 1:
                piece = x.decode("utf-8")
            elif n == 2:
                score = struct.unpack("<f", x)[0]
            elif n == 3:
                ptype = x
        pieces.append((piece, score, ptype))
    return pieces


def _bpe_merges(folder):
    tj = os.path.join(folder, "tokenizer.json")
    if os.path.exists(tj):
        merges = json.load(open(tj, encoding="utf-8"))["model"]["merges"]
        return [m if isinstance(m, str) else " ".join(m) for m in merges]
    lines = open(os.path.join(folder, "merges.txt"), encoding="utf-8").read().split("\n")
    return [line for line in lines if line and not line.startswith("#version")]


def add_tokenizer(writer, family, folder, vocab_size):
    """tokenizer.ggml.* from the model folder's tokenizer, as llama.cpp's converter builds it."""
    tok = load_tokenizer(folder)
    spm = os.path.join(folder, "tokenizer.model")
    if not os.path.exists(spm) and family.spm_model:
        spm = os.path.join(TOKENIZERS_DIR, family.spm_model, "tokenizer.model")
    if family.tokenizer_pre is None:
        # SentencePiece: pieces, scores and types straight from tokenizer.model, then the tokenizer's
        # added tokens (control when special); other rows of the embedding past the tokenizer become
        # [PAD<id>] unused tokens.
        pieces = _sentencepiece_pieces(spm)
        tokens = [p for p, _, _ in pieces]
        scores = [s for _, s, _ in pieces]
        types = [t for _, _, t in pieces]
        added = tok.added_tokens_decoder
        for i in range(len(tokens), vocab_size):
            if i in added:
                tokens.append(added[i].content)
                scores.append(0.0)
                types.append(TT_CONTROL if added[i].special else TT_USER_DEFINED)
            else:
                tokens.append(f"[PAD{i}]")
                scores.append(-1000.0)
                types.append(TT_UNUSED)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_unk_token_id(tok.unk_token_id)
        # As the tokenizer behaves (Phi-3's adds no BOS; transformers 5 no longer says so in an attribute).
        writer.add_add_bos_token(tok.bos_token_id is not None and tok("a").input_ids[:1] == [tok.bos_token_id])
        writer.add_add_eos_token(False)
    else:
        # Byte-level BPE: the vocabulary in id order, added tokens as control (special) or
        # user-defined tokens, padding rows as unused; merges as "a b" strings.
        by_id = {i: t for t, i in tok.get_vocab().items()}
        added = {t.content: t for t in tok.added_tokens_decoder.values()}
        tokens, types = [], []
        for i in range(vocab_size):
            if i not in by_id:
                tokens.append(f"[PAD{i}]")
                types.append(TT_UNUSED)
                continue
            t = by_id[i]
            tokens.append(t)
            types.append((TT_CONTROL if added[t].special else TT_USER_DEFINED) if t in added else TT_NORMAL)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(family.tokenizer_pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(_bpe_merges(folder))
        writer.add_add_bos_token(bool(getattr(tok, "add_bos_token", False)) and tok.bos_token_id is not None)
    if tok.bos_token_id is not None:
        writer.add_bos_token_id(tok.bos_token_id)
    if tok.eos_token_id is not None:
        writer.add_eos_token_id(tok.eos_token_id)


def _permute_rope(w, n_head):
    """llama.cpp's Q/K row permutation from HF's half-split rope layout to the interleaved one."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_LLAMA_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight", "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
_GEMMA_LAYER_NAMES = dict(_LLAMA_LAYER_NAMES, **{
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
})
_PHI3_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}
_GPT2_LAYER_NAMES = {
    "ln_1.weight": "attn_norm.weight", "ln_1.bias": "attn_norm.bias",
    "attn.c_attn.weight": "attn_qkv.weight", "attn.c_attn.bias": "attn_qkv.bias",
    "attn.c_proj.weight": "attn_output.weight", "attn.c_proj.bias": "attn_output.bias",
    "ln_2.weight": "ffn_norm.weight", "ln_2.bias": "ffn_norm.bias",
    "mlp.c_fc.weight": "ffn_up.weight", "mlp.c_fc.bias": "ffn_up.bias",
    "mlp.c_proj.weight": "ffn_down.weight", "mlp.c_proj.bias": "ffn_down.bias",
}


def gguf_tensors(model, family):
    """(gguf name, float32 array) of every weight, renamed, permuted and transposed as llama.cpp's
    converter does."""
    cfg = model.config
    out = []
    for name, t in model.state_dict().items():
        w = t.detach().to("cpu").float().numpy().copy()
        if family.arch == "gpt2":
            if name.endswith((".attn.bias", ".attn.masked_bias")):
                continue
            name = name.removeprefix("transformer.")
            if name.startswith("h."):
                _, layer, rest = name.split(".", 2)
                if rest.endswith("weight") and rest.split(".")[-2] in ("c_attn", "c_proj", "c_fc"):
                    w = w.T.copy()  # Conv1D [in, out] -> [out, in]
                gname = f"blk.{layer}.{_GPT2_LAYER_NAMES[rest]}"
            else:
                gname = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight",
                         "ln_f.weight": "output_norm.weight", "ln_f.bias": "output_norm.bias",
                         "lm_head.weight": "output.weight"}[name]
                if gname == "output.weight" and cfg.tie_word_embeddings:
                    continue
        else:
            if family.arch.startswith("gemma") and name.endswith("norm.weight"):
                w = w + 1  # llama.cpp's converter stores Gemma's norms as 1 + weight
            if name.startswith("model.layers."):
                _, _, layer, rest = name.split(".", 3)
                if family.gguf_arch == "llama" and rest == "self_attn.q_proj.weight":
                    w = _permute_rope(w, cfg.num_attention_heads)
                elif family.gguf_arch == "llama" and rest == "self_attn.k_proj.weight":
                    w = _permute_rope(w, cfg.num_key_value_heads)
                if rest == "mlp.experts.gate_up_proj":  # [experts, 2 * ffn, hidden]: gate rows, then up rows
                    half = w.shape[1] // 2
                    out.append((f"blk.{layer}.ffn_gate_exps.weight", w[:, :half].copy()))
                    out.append((f"blk.{layer}.ffn_up_exps.weight", w[:, half:].copy()))
                    continue
                if rest == "mlp.shared_expert_gate.weight":  # llama.cpp stores it as [hidden]
                    w = w.reshape(-1)
                names = {"gemma2": _GEMMA_LAYER_NAMES, "gemma3": _GEMMA_LAYER_NAMES,
                         "phi3": _PHI3_LAYER_NAMES}.get(family.arch, _LLAMA_LAYER_NAMES)
                gname = f"blk.{layer}.{names[rest]}"
            else:
                gname = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                         "lm_head.weight": "output.weight"}[name]
                if gname == "output.weight" and cfg.tie_word_embeddings:
                    continue
        out.append((gname, w))
    return out


def llama3_rope_factors(theta, head_dim, scaling):
    """What llama.cpp's converter stores as rope_freqs.weight for llama3 rope scaling: per
    frequency, the divisor applied to theta^(-2i/d) (1 for short wavelengths, factor for long
    ones, a smooth blend between)."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_ctx = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * np.pi * theta ** (i / head_dim)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def write_gguf(model, family, hf_folder, path, quant=None):
    """Writes the model as GGUF. quant=None: every tensor F32; "Q8_0": every 2-D weight Q8_0 (norms
    and biases stay F32, as llama.cpp's Q8_0 output does)."""
    import gguf
    cfg = model.config
    w = gguf.GGUFWriter(path, family.gguf_arch)
    w.add_name(f"prism-parity-{family.name}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quant == "Q8_0" else gguf.LlamaFileType.ALL_F32)
    if family.arch == "gpt2":
        w.add_block_count(cfg.n_layer)
        w.add_context_length(cfg.n_positions)
        w.add_embedding_length(cfg.n_embd)
        w.add_feed_forward_length(4 * cfg.n_embd)
        w.add_head_count(cfg.n_head)
        w.add_layer_norm_eps(cfg.layer_norm_epsilon)
    else:
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        w.add_block_count(cfg.num_hidden_layers)
        w.add_context_length(cfg.max_position_embeddings)
        w.add_embedding_length(cfg.hidden_size)
        w.add_feed_forward_length(cfg.intermediate_size)
        w.add_head_count(cfg.num_attention_heads)
        w.add_head_count_kv(cfg.num_key_value_heads)
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
        if family.arch == "phi3":  # LongRoPE: the factors are tensors (added below), the rest metadata
            rp = family.config["rope_parameters"]
            orig = family.config["original_max_position_embeddings"]
            factor = cfg.max_position_embeddings / orig
            w.add_rope_freq_base(rp["rope_theta"])
            w.add_rope_scaling_orig_ctx_len(orig)
            w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(factor) / np.log(orig))))
            w.add_sliding_window(cfg.sliding_window)
        elif family.arch == "gemma3":
            full = family.config["rope_parameters"]["full_attention"]
            w.add_rope_freq_base(full["rope_theta"])
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(full["factor"])
        else:
            w.add_rope_freq_base(family.config["rope_theta"])
        if family.arch in ("gemma2", "gemma3"):
            w.add_sliding_window(cfg.sliding_window)
            if cfg.attn_logit_softcapping:
                w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
            if cfg.final_logit_softcapping:
                w.add_final_logit_softcapping(cfg.final_logit_softcapping)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_rope_dimension_count(head_dim)
        if family.gguf_arch == "llama":
            w.add_vocab_size(cfg.vocab_size)
        if family.arch in ("mixtral", "qwen3_moe", "qwen2_moe"):
            experts = getattr(cfg, "num_local_experts", None) or cfg.num_experts
            w.add_expert_count(experts)
            w.add_expert_used_count(cfg.num_experts_per_tok)
            if family.arch != "qwen2_moe":  # llama.cpp's converter writes no such key for Qwen2-MoE
                w.add_expert_weights_norm(bool(getattr(cfg, "norm_topk_prob", True)))
            if family.arch != "mixtral":
                w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
            if family.arch == "qwen2_moe":
                w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    add_tokenizer(w, family, hf_folder, cfg.vocab_size)
    tensors = gguf_tensors(model, family)
    scaling = family.config.get("rope_scaling") or {}
    if scaling.get("rope_type") == "llama3":
        tensors.insert(0, ("rope_freqs.weight", llama3_rope_factors(family.config["rope_theta"], head_dim, scaling)))
    if family.arch == "phi3":
        rp = family.config["rope_parameters"]
        tensors.insert(0, ("rope_factors_long.weight", np.asarray(rp["long_factor"], dtype=np.float32)))
        tensors.insert(0, ("rope_factors_short.weight", np.asarray(rp["short_factor"], dtype=np.float32)))
    for name, arr in tensors:
        if quant == "Q8_0" and arr.ndim == 2:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def build_family(name, out_dir):
    """Builds one family under out_dir; returns (model, hf_folder, gguf_path or None)."""
    family = FAMILIES[name]
    os.makedirs(out_dir, exist_ok=True)
    model, folder = build_hf(family, out_dir)
    gguf_path = None
    if family.gguf_skip is None and family.variant_of is None:
        gguf_path = write_gguf(model, family, folder, os.path.join(out_dir, "model-f32.gguf"))
    return model, folder, gguf_path


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for fam in sys.argv[2:] or list(FAMILIES):
        _, hf, gg = build_family(fam, os.path.join(sys.argv[1], fam))
        print(fam, hf, gg or f"(no GGUF: {FAMILIES[fam].gguf_skip})")
