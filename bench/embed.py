# Sentence-embedding throughput: `prism embed` against sentence-transformers (PyTorch eager) on a BERT shape.
"""Usage: python3 bench/embed.py [--shape base|small] [--threads 2] [--texts 32] [--words 60] [--search-budget 0]

Writes bench/models/bert-<shape>-st the first time: a random-initialised BertModel of the shape (base:
hidden 768, 12 layers, 12 heads, FFN 3072, 512 positions, as bert-base / all-mpnet-sized embedders; small:
384 / 6 / 12 / 1536, as all-MiniLM-L6), a WordPiece tokenizer trained on tests/fixtures/corpus.txt, mean
pooling and Normalize, max_seq_length 256. Texts are random words from README.md, so most fill the 256
tokens. Both engines embed the same texts on the same threads, one after the other; Prism's time excludes
its load (it prints it), sentence-transformers' its first warm-up call. The embeddings are compared too.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {"base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
          "small": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)}


def make_model(shape, folder):
    import torch
    from sentence_transformers import SentenceTransformer
    try:  # sentence-transformers 6 moved the modules
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers import models as tok_models
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast
    sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
    from tokenizer_corpus import read_corpus
    corpus = read_corpus(os.path.join(ROOT, "tests", "fixtures", "corpus.txt"))
    corpus += open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().splitlines()
    tok = Tokenizer(tok_models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(
        vocab_size=4000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tok.token_to_id("[CLS]")),
                                                ("[SEP]", tok.token_to_id("[SEP]"))])
    src = folder + "-src"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=512,
                         **SHAPES[shape])).save_pretrained(src)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                            pad_token="[PAD]", mask_token="[MASK]", model_max_length=256).save_pretrained(src)
    word = models.Transformer(src, max_seq_length=256)
    dim = SHAPES[shape]["hidden_size"]
    SentenceTransformer(modules=[word, models.Pooling(dim, "mean"), models.Normalize()], device="cpu").save(folder)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--search-budget", type=float, default=0)
    ap.add_argument("--prism", default=os.path.join(ROOT, "build", "prism"))
    a = ap.parse_args()
    folder = os.path.join(ROOT, "bench", "models", f"bert-{a.shape}-st")
    if not os.path.isdir(folder):
        make_model(a.shape, folder)
    random.seed(0)
    words = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split()
    texts = [" ".join(random.choice(words) for _ in range(a.words)) for _ in range(a.texts)]
    path = os.path.join(folder, "..", f"embed-texts-{a.texts}x{a.words}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")

    env = dict(os.environ, PRISM_THREADS=str(a.threads))
    cmd = [a.prism, "embed", folder, "--file", path, "--timing", "-t", str(a.threads),
           "--search-budget", str(a.search_budget)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    m = re.search(r"(\d+) tokens in ([\d.]+) s .*load ([\d.]+) s", p.stderr)
    tokens, prism_s, load_s = int(m.group(1)), float(m.group(2)), float(m.group(3))
    prism_emb = [json.loads(line) for line in p.stdout.splitlines()]

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(a.threads)
    model = SentenceTransformer(folder, device="cpu")
    model.encode(texts[:2])
    rows = [("prism", prism_s)]
    for bs in (1, 32):
        t0 = time.perf_counter()
        ref = model.encode(texts, batch_size=bs)
        rows.append((f"sentence-transformers (torch {torch.__version__}, batch {bs})", time.perf_counter() - t0))
    got = np.array(prism_emb)
    cos = ((got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)).min()
    cfg = SHAPES[a.shape]
    d, layers, f = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    seq = tokens / len(texts)
    flops = 2 * tokens * layers * (4 * d * d + 2 * d * f + 2 * seq * d)  # projections, FFN, attention
    print(f"bert-{a.shape}: {len(texts)} texts, {tokens} tokens ({seq:.0f} per text), {a.threads} threads; "
          f"prism load {load_s:.2f} s; 1 - min cosine {1 - cos:.1e}")
    print("| engine | s | tokens/s | GFLOP/s | prism speedup |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {tokens / s:.0f} | {flops / s / 1e9:.0f} | {s / prism_s:.2f}x |")


if __name__ == "__main__":
    main()
