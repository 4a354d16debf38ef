# BERT encoders and sentence embeddings: Prism's `prism embed` against sentence-transformers and tokenizers.
"""Fixtures are built here, from nothing downloaded: WordPiece tokenizers trained by Hugging Face `tokenizers`
on tests/fixtures/corpus.txt (BertNormalizer, BertPreTokenizer, [CLS] $A [SEP]) in the variants BERT models
ship (uncased with accents stripped, cased, cased with accents stripped and CJK left alone, and a bare
vocab.txt as older checkpoints have), and random-initialised BertModels of odd sizes saved as
sentence-transformers folders with each pooling mode, normalised or not, in the current and the legacy file
layout.

Tokens must equal `tokenizers`' exactly on every corpus line (accents, CJK, control characters, special
tokens written in the text, over-long words, truncation). Embeddings must be within 1e-5 cosine of
sentence-transformers' (the issue's bound) and within 1e-4 x max|embedding| elementwise.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import report

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
st = pytest.importorskip("sentence_transformers")

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
sys.path.insert(0, FIXTURES)
from tokenizer_corpus import read_corpus  # noqa: E402

CORPUS = read_corpus(os.path.join(FIXTURES, "corpus.txt"))
# What BERT's normalizer and pre-tokenizer treat specially, beyond the shared corpus.
EXTRA = [
    "",
    "[CLS] written [SEP] in the text [MASK], [UNK] too",
    "control\x00chars\x07 and \ufffd replacement, zero\u200bwidth and soft\u00adhyphen",
    "İstanbul ΣΊΣΥΦΟΣ ΌΣΟΣ Straße ﬁne ǅ",
    "北京欢迎你 and 東京 with 한국어 and カタカナ",
    "नमस्ते दुनिया and ไทย and مرحبا",
    "a" * 120 + " and " + "b" * 99,
    "numbers 3.14159 and $100 + 50% = ? ~tilde` ^caret|pipe <angle>",
    "tab\tnew\nline\r\nand\u3000ideographic\u2028separators",
]
TEXTS = CORPUS + EXTRA
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _train_tokenizer(lowercase, strip_accents, chinese_chars):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=chinese_chars,
                                                strip_accents=strip_accents, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=600, special_tokens=SPECIALS, min_frequency=1)
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


# name -> (lowercase, strip_accents, handle_chinese_chars)
TOKENIZERS = {"uncased": (True, None, True), "cased": (False, None, True), "cased_strip": (False, True, False)}


def _write_tokenizer(tok, folder, lowercase, max_len):
    from transformers import PreTrainedTokenizerFast
    os.makedirs(folder, exist_ok=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]", model_max_length=max_len,
                                   do_lower_case=lowercase)
    fast.save_pretrained(folder)


def _bert(folder, vocab, seed, masked_lm=False):
    from transformers import BertConfig, BertForMaskedLM, BertModel
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab, hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                     intermediate_size=70, max_position_embeddings=40, type_vocab_size=2, hidden_act="gelu",
                     layer_norm_eps=1e-12)
    model = (BertForMaskedLM if masked_lm else BertModel)(cfg).eval()
    with torch.no_grad():  # LayerNorms away from their identity start, so they matter
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(folder)


def _train_bpe():
    """A byte-level BPE with [CLS] $A [SEP], as ModernBERT's tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def _modernbert(folder, tok, seed, positions=64):
    """A random ModernBERT of odd sizes with every feature on: 5 layers (0 and 3 global, the others a window
    of 3 tokens either way, with their own rope base), biased attention, unbiased norms and MLP."""
    from transformers import ModernBertConfig, ModernBertModel
    torch.manual_seed(seed)
    ids = {name: tok.token_to_id(t) for name, t in
           [("pad_token_id", "[PAD]"), ("cls_token_id", "[CLS]"), ("sep_token_id", "[SEP]"),
            ("bos_token_id", "[CLS]"), ("eos_token_id", "[SEP]")]}
    cfg = ModernBertConfig(vocab_size=tok.get_vocab_size(), hidden_size=36, num_hidden_layers=5,
                           num_attention_heads=3, intermediate_size=38, max_position_embeddings=positions,
                           local_attention=6, global_attn_every_n_layers=3, attention_bias=True, mlp_bias=False,
                           norm_bias=False, norm_eps=1e-5, **ids)
    model = ModernBertModel(cfg).eval()
    with torch.no_grad():  # norms away from their identity start and scores away from uniform, so they matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
            if "Wqkv.weight" in name:
                p.mul_(8)
    model.save_pretrained(folder)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Tokenizer folders and embedding model folders, keyed by name."""
    root = tmp_path_factory.mktemp("embeddings")
    out = {}
    trained = {name: _train_tokenizer(*flags) for name, flags in TOKENIZERS.items()}
    for name, tok in trained.items():
        folder = str(root / f"tok_{name}")
        _write_tokenizer(tok, folder, TOKENIZERS[name][0], 32)
        out[f"tok_{name}"] = folder
    # A bare vocab.txt with tokenizer_config.json, as older BERT checkpoints ship.
    folder = root / "tok_vocab_txt"
    folder.mkdir()
    vocab = trained["uncased"].get_vocab()
    (folder / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 32}))
    out["tok_vocab_txt"] = str(folder)

    from sentence_transformers import SentenceTransformer
    try:  # sentence-transformers 6 moved the modules
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models
    # (name, tokenizer, pooling modes, normalise, max_seq_length)
    for name, tok, modes, normalize, max_len, seed in [
            ("cls_norm", "uncased", "cls", True, 24, 1),
            ("mean", "cased", "mean", False, 40, 2),
            ("multi", "cased_strip", ("max", "mean_sqrt_len_tokens", "lasttoken"), True, 40, 3)]:
        src = root / f"{name}_src"
        _bert(str(src), trained[tok].get_vocab_size(), seed)
        _write_tokenizer(trained[tok], str(src), TOKENIZERS[tok][0], max_len)
        word = models.Transformer(str(src), max_seq_length=max_len)
        dim = (word.get_embedding_dimension if hasattr(word, "get_embedding_dimension")
               else word.get_word_embedding_dimension)()
        mods = [word, models.Pooling(dim, modes)]
        if normalize:
            mods.append(models.Normalize())
        SentenceTransformer(modules=mods, device="cpu").save(str(root / name))
        out[name] = str(root / name)
    # The layout sentence-transformers 2.x wrote (most models on the Hub): old module type names, the
    # pooling modes as booleans, max_seq_length in sentence_bert_config.json.
    legacy = root / "legacy"
    _bert(str(legacy), trained["uncased"].get_vocab_size(), 4)
    _write_tokenizer(trained["uncased"], str(legacy), True, 512)
    (legacy / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (legacy / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20, "do_lower_case": False}))
    (legacy / "1_Pooling").mkdir()
    (legacy / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 36, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    (legacy / "2_Normalize").mkdir()
    out["legacy"] = str(legacy)
    # A plain checkpoint with a masked-LM head ("bert." names) and no sentence-transformers files: mean
    # pooling, as sentence-transformers gives it.
    plain = root / "plain_mlm"
    _bert(str(plain), trained["cased"].get_vocab_size(), 5, masked_lm=True)
    _write_tokenizer(trained["cased"], str(plain), False, 40)
    out["plain_mlm"] = str(plain)
    # ModernBERT under sentence-transformers (mean pooling, normalised), and the same folder with the
    # config.json keys checkpoints on the Hub carry (global_rope_theta, local_rope_theta, every n-th layer
    # global) in place of transformers 5's layer_types and per-type rope_parameters.
    bpe = _train_bpe()
    src = root / "modernbert_src"
    _modernbert(str(src), bpe, 6)
    from transformers import PreTrainedTokenizerFast
    PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                            pad_token="[PAD]", mask_token="[MASK]", model_max_length=40).save_pretrained(str(src))
    word = models.Transformer(str(src), max_seq_length=40)
    SentenceTransformer(modules=[word, models.Pooling(36, "mean"), models.Normalize()], device="cpu").save(
        str(root / "modernbert"))
    out["modernbert"] = str(root / "modernbert")
    import shutil
    shutil.copytree(root / "modernbert", root / "modernbert_hub")
    cfg_path = root / "modernbert_hub" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.pop("rope_parameters")
    cfg.pop("layer_types")
    cfg["global_rope_theta"] = rope["full_attention"]["rope_theta"]
    cfg["local_rope_theta"] = rope["sliding_attention"]["rope_theta"]
    cfg_path.write_text(json.dumps(cfg))
    out["modernbert_hub"] = str(root / "modernbert_hub")
    # Inputs up to 1,100 tokens: those over the 1,024 a packed step holds run alone, the others packed.
    src = root / "modernbert_long_src"
    _modernbert(str(src), bpe, 7, positions=1100)
    PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                            pad_token="[PAD]", mask_token="[MASK]", model_max_length=1100).save_pretrained(str(src))
    word = models.Transformer(str(src), max_seq_length=1100)
    SentenceTransformer(modules=[word, models.Pooling(36, "mean")], device="cpu").save(str(root / "modernbert_long"))
    out["modernbert_long"] = str(root / "modernbert_long")
    return out


def _prism_lines(prism_bin, model, texts, *flags):
    args = [prism_bin, "embed", model, *flags]
    for t in texts:
        args += ["--text", t]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(lines) == len(texts)
    return lines


@pytest.mark.parametrize("name", ["uncased", "cased", "cased_strip", "vocab_txt"])
def test_wordpiece_tokens_match_tokenizers(prism_bin, zoo, name):
    from transformers import AutoTokenizer
    folder = zoo[f"tok_{name}"]
    ref = AutoTokenizer.from_pretrained(folder)
    # A model folder is needed to run `prism embed --tokens`: the BERT of the same vocabulary.
    model = os.path.join(os.path.dirname(folder), f"model_for_{name}")
    if not os.path.isdir(model):
        _bert(model, len(ref), 9)
        for f in os.listdir(folder):
            if f != "config.json":
                with open(os.path.join(folder, f), "rb") as src, open(os.path.join(model, f), "wb") as dst:
                    dst.write(src.read())
    texts = [t for t in TEXTS if "\x00" not in t]  # a NUL cannot be passed as a command-line argument
    got = _prism_lines(prism_bin, model, texts, "--tokens", "--max-tokens", "32")
    bad = []
    for text, ids in zip(texts, got):
        want = ref(text, truncation=True, max_length=32)["input_ids"]
        if ids != want:
            bad.append((text[:40], ids, want))
    assert not bad, f"{len(bad)} of {len(texts)} differ, first: {bad[0]}"
    report(f"wordpiece[{name}]", "texts tokenized identically", f"{len(texts)}/{len(texts)}")


def test_wordpiece_nul_and_decode(prism_bin, zoo):
    """A NUL (dropped by clean_text) through --file, where a command line cannot carry it."""
    from transformers import AutoTokenizer
    folder = zoo["tok_uncased"]
    model = os.path.join(os.path.dirname(folder), "model_for_uncased")
    if not os.path.isdir(model):
        pytest.skip("runs after test_wordpiece_tokens_match_tokenizers")
    ref = AutoTokenizer.from_pretrained(folder)
    text = "control\x00chars\x07 and a NUL"
    p = subprocess.run([prism_bin, "embed", model, "--tokens", "--file", "-"], input=text + "\n",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == ref(text)["input_ids"]


@pytest.mark.parametrize("name", ["cls_norm", "mean", "multi", "legacy", "plain_mlm", "modernbert",
                                  "modernbert_hub", "modernbert_long"])
def test_embeddings_match_sentence_transformers(prism_bin, zoo, name):
    """Every text of one `prism embed` call: packed several to a step (each attending to its own tokens only,
    pooled over its own), and with modernbert_long, texts longer than a step holds run alone in between."""
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(zoo[name], device="cpu")
    texts = [t for t in TEXTS if t and "\x00" not in t][:24]
    long = " ".join(t for t in CORPUS if "\x00" not in t)
    texts.append(long)  # longer than every model's limit: truncated
    if name == "modernbert_long":
        assert len(model.tokenizer(long)["input_ids"]) > 1100
        lo, hi = 0, len(long)  # the longest prefix of at most 1,060 tokens
        while lo < hi:
            cut = (lo + hi + 1) // 2
            lo, hi = (cut, hi) if len(model.tokenizer(long[:cut])["input_ids"]) <= 1060 else (lo, cut - 1)
        mid = long[:lo]
        assert 1024 < len(model.tokenizer(mid)["input_ids"]) < 1100
        texts = texts[:12] + [mid] + texts[12:]  # alone too, not truncated
    want = model.encode(texts, convert_to_numpy=True, batch_size=8)
    got = np.array(_prism_lines(prism_bin, zoo[name], texts))
    assert got.shape == want.shape
    assert np.isfinite(got).all()
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    rel = np.abs(got - want).max() / np.abs(want).max()
    report(f"embed[{name}]", "1 - min cosine / max|diff| / max|emb|", f"{1 - cos.min():.1e} / {rel:.1e}")
    assert 1 - cos.min() <= 1e-5, f"cosine {cos.min()} on '{texts[int(cos.argmin())][:40]}'"
    assert rel <= 1e-4


def _one_line_error(p):
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_encoder_errors(prism_bin, zoo, tmp_path):
    # A text generator asked of an encoder, and an embedding asked of a causal language model.
    err = _one_line_error(subprocess.run([prism_bin, "run", zoo["mean"], "-p", "hi", "-n", "2"],
                                         capture_output=True, text=True, timeout=120))
    assert "is an encoder" in err
    stories = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "stories260K",
                           "stories260K.bin")
    if os.path.exists(stories):
        err = _one_line_error(subprocess.run([prism_bin, "embed", stories, "--text", "hi"],
                                             capture_output=True, text=True, timeout=120))
        assert "not an embedding encoder" in err
    # A module Prism does not run, and a pooling mode it does not have.
    import shutil
    bad = tmp_path / "dense"
    shutil.copytree(zoo["legacy"], bad)
    modules = json.loads((bad / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (bad / "modules.json").write_text(json.dumps(modules))
    err = _one_line_error(subprocess.run([prism_bin, "embed", str(bad), "--text", "hi"],
                                         capture_output=True, text=True, timeout=120))
    assert "modules.json" in err and "Dense" in err
    weighted = tmp_path / "weighted"
    shutil.copytree(zoo["legacy"], weighted)
    (weighted / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "weightedmean"}))
    err = _one_line_error(subprocess.run([prism_bin, "embed", str(weighted), "--text", "hi"],
                                         capture_output=True, text=True, timeout=120))
    assert "weightedmean" in err
    # A ModernBERT config whose layer types do not cover its layers.
    short = tmp_path / "short_types"
    shutil.copytree(zoo["modernbert"], short)
    cfg = json.loads((short / "config.json").read_text())
    cfg["layer_types"] = cfg["layer_types"][:-1]
    (short / "config.json").write_text(json.dumps(cfg))
    err = _one_line_error(subprocess.run([prism_bin, "embed", str(short), "--text", "hi"],
                                         capture_output=True, text=True, timeout=120))
    assert "config.json" in err and "layer_types" in err and "5 layer types" in err


def test_v1_embeddings_with_the_openai_client(prism_bin, zoo):
    """`prism serve` with an embedding model beside a text model: the official client (base64, its default,
    and float), token inputs, and errors in OpenAI's shape."""
    openai = pytest.importorskip("openai")
    from sentence_transformers import SentenceTransformer
    from test_serve import Server
    stories = os.path.join(os.path.dirname(prism_bin), "..", "models", "stories260K", "stories260K.bin")
    s = Server(prism_bin, "--model", f"embed={zoo['cls_norm']}", "--model", f"stories={stories}", "--ctx", "256")
    try:
        client = s.client()
        texts = ["Hello, world!", "Größe, Übermaß und Straße", " ".join(CORPUS[:20])]
        want = SentenceTransformer(zoo["cls_norm"], device="cpu").encode(texts)
        import base64
        # The client's default asks for base64 and decodes it; asked for explicitly, the string comes back.
        for fmt in (None, "float", "base64"):
            r = client.embeddings.create(model="embed", input=texts, **({"encoding_format": fmt} if fmt else {}))
            got = np.array([np.frombuffer(base64.b64decode(d.embedding), "<f4") if fmt == "base64" else d.embedding
                            for d in r.data], dtype=np.float32)
            assert [d.index for d in r.data] == [0, 1, 2] and r.model == "embed"
            assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
        one = client.embeddings.create(model="embed", input=texts[0], encoding_format="float")
        assert np.allclose(one.data[0].embedding, want[0], atol=1e-5)
        # Token ids without the specials, as the tokenizer gives the text: the same embedding.
        tok = transformers.AutoTokenizer.from_pretrained(zoo["cls_norm"])
        ids = tok(texts[1], add_special_tokens=False)["input_ids"]
        by_ids = client.embeddings.create(model="embed", input=[ids], encoding_format="float")
        assert np.allclose(by_ids.data[0].embedding, want[1], atol=1e-5)
        assert by_ids.usage.prompt_tokens == len(ids) + 2 == by_ids.usage.total_tokens

        def error(status, param, **body):
            code, data = s.raw("POST", body.pop("path", "/v1/embeddings"), json.dumps(body),
                               {"Content-Type": "application/json"})
            err = json.loads(data)["error"]
            assert code == status and err["param"] == param, (code, err)
            return err["message"]
        assert "required" in error(400, "input", model="embed")
        assert "empty" in error(400, "input", model="embed", input="")
        assert "empty" in error(400, "input", model="embed", input=[])
        assert "vocabulary" in error(400, "input", model="embed", input=[[1, 2, 10 ** 6]])
        assert "must be" in error(400, "input", model="embed", input=[["a"], "b"])
        assert "36-dimensional" in error(400, "dimensions", model="embed", input="hi", dimensions=8)
        assert "encoding_format" in error(400, "encoding_format", model="embed", input="hi", encoding_format="int8")
        assert "generates text" in error(400, "model", model="stories", input="hi")
        assert "/v1/embeddings" in error(400, "prompt", path="/v1/completions", model="embed", prompt="hi")
        assert "does not exist" in error(404, "model", model="nope", input="hi")
    finally:
        s.stop()


def test_gguf_bert_matches_llamacpp(prism_bin):
    """A BERT GGUF in llama.cpp's layout (tests/data/bert, written by tests/fixtures/make_bert_gguf.py): the
    WordPiece vocabulary back from llama.cpp's spelling, and the mean-pooled, normalised embeddings of
    llama.cpp and of transformers on the same weights."""
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "bert")
    ref = np.load(os.path.join(data, "reference.npz"))
    keep = [i for i, t in enumerate(ref["texts"]) if "\x00" not in str(t)]  # not passable as an argument
    texts = [str(ref["texts"][i]) for i in keep]
    model = os.path.join(data, "tiny-bert-f32.gguf")
    tokens = _prism_lines(prism_bin, model, texts, "--tokens")
    off = ref["offsets"]
    assert tokens == [ref["tokens"][off[i]:off[i + 1]].tolist() for i in keep]
    got = np.array(_prism_lines(prism_bin, model, texts))
    for name in ("llamacpp", "transformers"):
        want = ref[name][keep]
        cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        diff = np.abs(got - want).max()
        report("embed[gguf]", f"vs {name}: 1 - min cosine / max|diff|", f"{1 - cos.min():.1e} / {diff:.1e}")
        assert 1 - cos.min() <= 1e-5 and diff <= 1e-4
