#!/usr/bin/env python3
"""Writes the benchmark models under bench/models/ (once: a file that is already there is kept).

The model is synthetic but shaped exactly like Llama-3.2-1B: hidden 2048, 16 layers, 32 query heads,
8 KV heads (head_dim 64), FFN 8192, vocab 128256, tied embeddings, rope_theta 500000, RMSNorm eps
1e-5. Weights are random (numpy, seeded), drawn N(0, 0.02) like the Hugging Face initializer
(initializer_range 0.02), norms 1, so activations stay finite in every dtype. Speed does not depend
on the values; only the shapes and the storage format matter. (Llama 3.2's "llama3" rope scaling is
left out: it only changes constant inverse frequencies, and GGUF stores it as an extra tensor.)

Written (names are fixed; run.py looks for them):
  bench/models/llama1b-shape-hf-f32/    config.json, model.safetensors (f32), tokenizer.json, tokenizer_config.json
  bench/models/llama1b-shape-hf-f16/    ... the same weights rounded to f16
  bench/models/llama1b-shape-hf-bf16/   ... and to bf16
  bench/models/llama1b-shape-{f32,f16,bf16,q8_0,q4_0}.gguf
  bench/models/llama1b-shape-{q4_k_m,q6_k}.gguf: llama.cpp's own quantization of the f32 GGUF
      llama.cpp's llama conventions: token_embd / blk.N.attn_q ... / output_norm names, llama.*
      metadata, Q and K rows permuted to llama.cpp's interleaved rope layout, 1-D norm weights kept
      in F32, a tokenizer.ggml.* block (TinyLlama's SentencePiece vocabulary, 32000 pieces read
      from its tokenizer.model, padded to 128256 with UNUSED tokens), so llama.cpp loads them.

The tokenizer of the HF folders is TinyLlama's (32000 tokens, from tests/data/tokenizers): the model
has 128256 rows, so ids >= 32000 have no text; the benchmarks feed random ids, which is fine.

The f32 safetensors file is the source of every other file (read back through a memory map), so
each tensor is generated once. Peak memory is about one tensor (the 1 GiB embedding) plus its
quantization temporaries. Disk: ~22 GB for everything, ~6.3 GB for --only q8_0.

--shape moe1b writes a mixture-of-experts model instead, named moe1b-shape-*: Mixtral's layout (every MLP
routed to the top 2 of 8 experts, renormalised) at hidden 1024, 16 layers, 16 query heads, 4 KV heads
(head_dim 64), expert FFN 2816, vocab 32000, tied embeddings: 1.18 B parameters, of which a token's decode
reads 0.35 B (its 2 experts per layer, attention, the head). The f32 HF folder has Mixtral's per-expert
tensors (block_sparse_moe.experts.E.w1 ...), the GGUF files llama.cpp's stacked ffn_*_exps under "llama".

Usage: bench/make_models.py [--shape llama1b|moe1b] [--only f32,f16,bf16,q8_0,q4_0,q4_k_m,q6_k] [--out DIR]
"""
import argparse
import json
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOKENIZER_DIR = ROOT / "tests" / "data" / "tokenizers" / "tinyllama-1.1b-chat"

SHAPE = dict(hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, ffn=8192, vocab=128256,
             rope_theta=500000.0, eps=1e-5, ctx=131072, experts=0, experts_used=0)
SHAPES = {"llama1b": dict(SHAPE),
          "moe1b": dict(hidden=1024, layers=16, heads=16, kv_heads=4, head_dim=64, ffn=2816, vocab=32000,
                        rope_theta=1000000.0, eps=1e-5, ctx=32768, experts=8, experts_used=2)}
NAME = ["llama1b"]  # the shape written: its files are named <name>-shape-*
SEED = 20240925
STD = 0.02
ALL_DTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q6_k"]
# Quantized by llama.cpp itself (llama_model_quantize, default parameters) from the f32 GGUF: its own
# per-tensor mixes, as the files people download are made. Needs llama-cpp-python (bench/setup.sh).
LLAMACPP_FTYPES = {"q4_k_m": "Q4_K_M", "q6_k": "Q6_K"}


def log(msg):
    print(f"make_models: {msg}", flush=True)


def hf_dir(out, dtype):
    return out / f"{NAME[0]}-shape-hf-{dtype}"


def gguf_path(out, dtype):
    return out / f"{NAME[0]}-shape-{dtype}.gguf"


def tensor_specs():
    """(hf_name, shape) in file order."""
    s = SHAPE
    h, kv = s["hidden"], s["kv_heads"] * s["head_dim"]
    specs = [("model.embed_tokens.weight", (s["vocab"], h))]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        specs += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (s["heads"] * s["head_dim"], h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, s["heads"] * s["head_dim"])),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
        if s["experts"]:  # Mixtral's per-expert tensors
            specs.append((p + "block_sparse_moe.gate.weight", (s["experts"], h)))
            for e in range(s["experts"]):
                q = f"{p}block_sparse_moe.experts.{e}."
                specs += [(q + "w1.weight", (s["ffn"], h)), (q + "w2.weight", (h, s["ffn"])),
                          (q + "w3.weight", (s["ffn"], h))]
        else:
            specs += [(p + "mlp.gate_proj.weight", (s["ffn"], h)), (p + "mlp.up_proj.weight", (s["ffn"], h)),
                      (p + "mlp.down_proj.weight", (h, s["ffn"]))]
    specs.append(("model.norm.weight", (h,)))
    return specs


def generate(index, shape):
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    rng = np.random.default_rng([SEED, index])
    a = rng.standard_normal(shape, dtype=np.float32)
    a *= STD
    return a


# ---------------------------------------------------------------------------------------------
# safetensors, written and read tensor by tensor (the format is a JSON header and raw bytes).

ST_DTYPE = {"f32": ("F32", 4), "f16": ("F16", 2), "bf16": ("BF16", 2)}


def to_bf16_bits(a):
    """f32 -> bf16 bit patterns (uint16), round to nearest even."""
    u = a.view(np.uint32)
    rounding = ((u >> 16) & 1) + np.uint32(0x7FFF)
    return ((u + rounding) >> 16).astype(np.uint16)


def encode(a, dtype):
    if dtype == "f32":
        return np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "f16":
        return a.astype(np.float16)
    return to_bf16_bits(np.ascontiguousarray(a, dtype=np.float32))


def write_safetensors(path, specs, dtype, tensor_fn):
    st, size = ST_DTYPE[dtype]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in specs:
        n = int(np.prod(shape)) * size
        header[name] = {"dtype": st, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for i, (name, shape) in enumerate(specs):
            encode(tensor_fn(i, name, shape), dtype).tofile(f)
    os.replace(tmp, path)


def open_safetensors_f32(path):
    """name -> read-only f32 array memory-mapped from an f32 safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        out[name] = mm[base + b:base + e].view(np.float32).reshape(info["shape"])
    return out


def hf_config(dtype):
    s = SHAPE
    torch_dtype = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype]
    moe = {"num_local_experts": s["experts"], "num_experts_per_tok": s["experts_used"]} if s["experts"] else {}
    return {
        **moe,
        "architectures": ["MixtralForCausalLM" if s["experts"] else "LlamaForCausalLM"],
        "model_type": "mixtral" if s["experts"] else "llama",
        "hidden_size": s["hidden"],
        "intermediate_size": s["ffn"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"],
        "head_dim": s["head_dim"],
        "vocab_size": s["vocab"],
        "max_position_embeddings": s["ctx"],
        "rms_norm_eps": s["eps"],
        "rope_theta": s["rope_theta"],
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": STD,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": torch_dtype,
        "use_cache": True,
    }


def write_hf(out, dtype, source=None):
    d = hf_dir(out, dtype)
    st = d / "model.safetensors"
    if st.exists():
        log(f"{d.name}: present, kept")
        return
    d.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZER_DIR / f, d / f)
    (d / "config.json").write_text(json.dumps(hf_config(dtype), indent=2) + "\n")
    t0 = time.time()
    if source is None:
        fn = lambda i, name, shape: generate(i, shape)
    else:
        fn = lambda i, name, shape: source[name]
    write_safetensors(st, tensor_specs(), dtype, fn)
    log(f"{d.name}: written ({st.stat().st_size / 1e9:.2f} GB, {time.time() - t0:.0f} s)")


# ---------------------------------------------------------------------------------------------
# GGUF

def permute_rows(w, n_heads):
    """HF's half-split rope layout of Q/K rows -> llama.cpp's interleaved one, per head: rows
    [0..d/2) and [d/2..d) become pairs (0, d/2), (1, d/2+1), ..."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.reshape(n_heads, 2, d // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    parts = hf.split(".")  # model.layers.N.<suffix>
    suffix = ".".join(parts[3:])
    table = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
        "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
        # Mixtral's experts, stacked by gguf_specs
        "w1.weight": "ffn_gate_exps.weight",
        "w3.weight": "ffn_up_exps.weight",
        "w2.weight": "ffn_down_exps.weight",
    }
    return f"blk.{parts[2]}.{table[parts[-2] + '.' + parts[-1] if '.experts.' in hf else suffix]}"


def gguf_specs():
    """(gguf name, shape, HF names stacked along a new first axis, or one name) in file order: the experts
    of a layer become one [experts, out, in] tensor, as llama.cpp's converter writes them."""
    out, stacked = [], {}
    for hf, shape in tensor_specs():
        g = gguf_name(hf)
        if ".experts." not in hf:
            out.append((g, shape, [hf]))
        elif g in stacked:
            stacked[g][2].append(hf)
        else:
            stacked[g] = (g, shape, [hf])
            out.append(stacked[g])
    return [(g, (len(names), *shape) if len(names) > 1 else shape, names) for g, shape, names in out]


def read_sentencepiece(path):
    """(pieces, scores, types) from a SentencePiece tokenizer.model (a protobuf ModelProto whose
    field 1 is repeated SentencePiece {1: piece, 2: score, 3: type}); no protobuf library needed."""
    data = Path(path).read_bytes()

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

    pieces, scores, types = [], [], []
    for num, wire, v in fields(data):
        if num != 1 or wire != 2:
            continue
        piece, score, typ = "", 0.0, 1  # type NORMAL unless said otherwise
        for n2, w2, v2 in fields(v):
            if n2 == 1:
                piece = v2.decode("utf-8")
            elif n2 == 2:
                score = struct.unpack("<f", v2)[0]
            elif n2 == 3:
                typ = v2
        pieces.append(piece)
        scores.append(score)
        types.append(typ)
    return pieces, scores, types


GGML_TYPES = None


def gguf_types():
    import gguf
    Q = gguf.GGMLQuantizationType
    return {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}


def gguf_file_type(dtype):
    import gguf
    F = gguf.LlamaFileType
    return {"f32": F.ALL_F32, "f16": F.MOSTLY_F16, "bf16": F.MOSTLY_BF16, "q8_0": F.MOSTLY_Q8_0,
            "q4_0": F.MOSTLY_Q4_0}[dtype]


def write_gguf(out, dtype, source):
    import gguf

    path = gguf_path(out, dtype)
    if path.exists():
        log(f"{path.name}: present, kept")
        return
    s = SHAPE
    t0 = time.time()
    qtype = gguf_types()[dtype]
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"{NAME[0]}-shape-{dtype}")
    w.add_file_type(int(gguf_file_type(dtype)))
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_vocab_size(s["vocab"])
    if s["experts"]:
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["experts_used"])

    pieces, scores, types = read_sentencepiece(TOKENIZER_DIR / "tokenizer.model")
    n_real = len(pieces)
    pad = s["vocab"] - n_real
    pieces += [f"<unused{i}>" for i in range(pad)]
    scores += [0.0] * pad
    types += [int(gguf.TokenType.UNUSED)] * pad
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    specs = gguf_specs()

    def tensor_type(shape):
        return qtype if len(shape) >= 2 else gguf.GGMLQuantizationType.F32

    # Tensor infos first (sizes are known from the shapes), then the data tensor by tensor.
    for name, shape, _ in specs:
        t = tensor_type(shape)
        block, type_size = gguf.GGML_QUANT_SIZES[t]
        nbytes = int(np.prod(shape[:-1])) * (shape[-1] // block) * type_size
        if t == gguf.GGMLQuantizationType.F32:
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
        elif t == gguf.GGMLQuantizationType.F16:
            w.add_tensor_info(name, shape, np.dtype(np.float16), nbytes)
        else:
            byte_shape = (*shape[:-1], shape[-1] // block * type_size)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, shape, names in specs:
        hf = names[0]
        a = np.stack([source[n] for n in names]) if len(names) > 1 else source[hf]
        a = np.asarray(a, dtype=np.float32)
        shape = a.shape
        if hf.endswith("q_proj.weight"):
            a = permute_rows(a, s["heads"])
        elif hf.endswith("k_proj.weight"):
            a = permute_rows(a, s["kv_heads"])
        a2 = a.reshape(-1, shape[-1]) if a.ndim > 1 else a
        t = tensor_type(shape)
        if t == gguf.GGMLQuantizationType.F32:
            data = np.ascontiguousarray(a)
        elif t == gguf.GGMLQuantizationType.F16:
            data = a.astype(np.float16)
        elif t == gguf.GGMLQuantizationType.BF16:
            data = to_bf16_bits(np.ascontiguousarray(a)).view(np.uint8).reshape(*shape[:-1], shape[-1] * 2)
        else:
            # gguf's numpy quantizers, a slab of rows at a time to bound the temporaries
            rows = 16384
            data = np.concatenate([gguf.quants.quantize(np.ascontiguousarray(a2[r:r + rows]), t)
                                   for r in range(0, a2.shape[0], rows)])
            data = data.reshape(*shape[:-1], -1)
        w.write_tensor_data(data)
    w.close()
    os.replace(tmp, path)
    log(f"{path.name}: written ({path.stat().st_size / 1e9:.2f} GB, {time.time() - t0:.0f} s)")


def quantize_with_llamacpp(out, dtype):
    path = gguf_path(out, dtype)
    if path.exists():
        log(f"{path.name}: present, kept")
        return
    import llama_cpp
    t0 = time.time()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{LLAMACPP_FTYPES[dtype]}")
    params.nthread = os.cpu_count() or 1
    tmp = path.with_suffix(".tmp")
    if llama_cpp.llama_model_quantize(str(gguf_path(out, "f32")).encode(), str(tmp).encode(), params) != 0:
        sys.exit(f"make_models: llama_model_quantize {dtype} failed")
    os.replace(tmp, path)
    log(f"{path.name}: quantized by llama.cpp ({path.stat().st_size / 1e9:.2f} GB, {time.time() - t0:.0f} s)")


STORIES_BIN = ROOT / "models" / "stories260K" / "stories260K.bin"


def write_stories_hf(out):
    """stories260K (llama2.c checkpoint, shipped in models/) as a Hugging Face folder for the
    PyTorch baseline: config.json + model.safetensors (f32). llama2.c rotates adjacent pairs, so
    Q/K rows are un-interleaved to HF's half-split layout. No tokenizer (the benchmarks feed ids)."""
    d = out / "stories260K-hf"
    if (d / "model.safetensors").exists():
        log(f"{d.name}: present, kept")
        return
    raw = STORIES_BIN.read_bytes()
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    hd = dim // heads
    f = np.frombuffer(raw, dtype=np.float32, offset=28)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = f[pos:pos + n].reshape(shape)
        pos += n
        return a

    def unpermute(w, n_heads):
        rows, cols = w.shape
        return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)

    emb = take(vocab, dim)
    rms_att = take(layers, dim)
    wq, wk = take(layers, heads * hd, dim), take(layers, kv_heads * hd, dim)
    wv, wo = take(layers, kv_heads * hd, dim), take(layers, dim, heads * hd)
    rms_ffn = take(layers, dim)
    w1, w2, w3 = take(layers, hidden, dim), take(layers, dim, hidden), take(layers, hidden, dim)
    rms_final = take(dim)
    take(seq, hd // 2)  # freq_cis_real, unused
    take(seq, hd // 2)  # freq_cis_imag
    tensors = {"model.embed_tokens.weight": emb}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": rms_att[i],
            p + "self_attn.q_proj.weight": unpermute(wq[i], heads),
            p + "self_attn.k_proj.weight": unpermute(wk[i], kv_heads),
            p + "self_attn.v_proj.weight": wv[i],
            p + "self_attn.o_proj.weight": wo[i],
            p + "post_attention_layernorm.weight": rms_ffn[i],
            p + "mlp.gate_proj.weight": w1[i],
            p + "mlp.down_proj.weight": w2[i],
            p + "mlp.up_proj.weight": w3[i],
        })
    tensors["model.norm.weight"] = rms_final
    if not shared:
        tensors["lm_head.weight"] = take(vocab, dim)
    d.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
        "intermediate_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": hd, "vocab_size": vocab,
        "max_position_embeddings": seq, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": shared, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    (d / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    specs = [(k, v.shape) for k, v in tensors.items()]
    write_safetensors(d / "model.safetensors", specs, "f32", lambda i, name, shape: tensors[name])
    log(f"{d.name}: written")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(ALL_DTYPES),
                    help="dtypes to write (f32 is always written: it is the source of the others)")
    ap.add_argument("--out", default=str(HERE / "models"))
    ap.add_argument("--shape", default="llama1b", choices=sorted(SHAPES),
                    help="llama1b (dense, Llama-3.2-1B) or moe1b (8 experts, top 2)")
    ap.add_argument("--stories-only", action="store_true", help="only the stories260K HF folder")
    ap.add_argument("--tiny", action="store_true",
                    help="a tiny model of the same kind (writer self-test; use with a different --out)")
    args = ap.parse_args(argv)
    NAME[0] = args.shape
    SHAPE.update(SHAPES[args.shape])
    if args.tiny and args.shape == "moe1b":
        SHAPE.update(hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=256, vocab=32000, ctx=2048)
    elif args.tiny:
        SHAPE.update(hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=256, vocab=32256, ctx=2048)
    want = [d.strip() for d in args.only.split(",") if d.strip()]
    for d in want:
        if d not in ALL_DTYPES:
            ap.error(f"unknown dtype {d!r} (choose from {', '.join(ALL_DTYPES)})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        sys.exit(f"make_models: {TOKENIZER_DIR} is missing (the TinyLlama tokenizer files)")

    write_stories_hf(out)
    if args.stories_only:
        return
    write_hf(out, "f32")
    source = open_safetensors_f32(hf_dir(out, "f32") / "model.safetensors")
    for d in ("f16", "bf16"):
        if d in want and not SHAPE["experts"]:  # the MoE shape's HF folder is its f32 source only
            write_hf(out, d, source)
    for d in want:
        if d not in LLAMACPP_FTYPES:
            write_gguf(out, d, source)
    for d in want:
        if d in LLAMACPP_FTYPES:
            write_gguf(out, "f32", source)
            quantize_with_llamacpp(out, d)


if __name__ == "__main__":
    main()
