# torch.compile(backend="prism"): transformers' Llama, Qwen2, Mistral and GPT-2 (random weights), an MLP
# and a small convolutional network against eager PyTorch over several sizes with one compile each (no
# recompiles), the KV-cache decode path, the eager fallback for an operator Prism lacks, and bad input.
# PRISM_TEST_DEVICE=cuda puts the models and inputs on the GPU, so Prism's side runs on --device cuda.
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
DEV = "cuda" if os.environ.get("PRISM_TEST_DEVICE") == "cuda" else "cpu"
if DEV == "cuda":  # eager's references in true f32, as Prism computes them (cuDNN would use TF32)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


@pytest.fixture(scope="module")
def backend(prism_py):
    import prism.torch_backend as tb

    tb.register()
    return tb


def _rel(y, r):
    assert torch.isfinite(y).all()
    return ((y.float() - r.float()).abs().max() / r.float().abs().max()).item()


def _compile(model, **kw):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("prism")
    return torch.compile(model, backend=counter, **kw), counter


def _family(name):
    transformers = pytest.importorskip("transformers")
    common = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256)
    if name == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    elif name == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
    elif name == "mistral":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**common, sliding_window=None))
    else:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=160, n_embd=64, n_layer=2,
                                                                     n_head=4, n_positions=256))
    return model.to(DEV)


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "gpt2"])
def test_transformers_families_match_eager_with_one_compile(backend, family):
    torch.manual_seed(0)
    model = _family(family).eval()
    compiled, counter = _compile(model, dynamic=True)
    before = dict(backend.stats)
    frames = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no operator may fall back to eager here
        for batch, seq in ((2, 5), (2, 11), (3, 23), (3, 7)):
            ids = torch.randint(0, 160, (batch, seq), device=DEV)
            got = compiled(input_ids=ids, use_cache=False).logits
            want = model(input_ids=ids, use_cache=False).logits
            assert got.shape == want.shape
            assert _rel(got, want) < 1e-4, (batch, seq)
            frames.append(counter.frame_count)
    assert frames[1:] == frames[:1] * 3  # no recompiles: the first compile serves every batch and length
    assert backend.stats["programs"] - before["programs"] == 1  # as one Prism program
    assert backend.stats["fallback_nodes"] == before["fallback_nodes"]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_one_sequence_runs_attention_in_the_fused_template(backend, family, monkeypatch):
    """transformers' attention reaches Prism whole (not decomposed): for one sequence every layer's attention
    is the fused template (grouped heads read before transformers repeats them), with the causal mask
    transformers builds and with a padding mask, whose fully hidden queries get 0 as in PyTorch."""
    if DEV != "cpu":
        pytest.skip("the fused attention template is the CPU's")
    programs = []
    init = backend.PrismGraph.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        programs.append(self.program)

    monkeypatch.setattr(backend.PrismGraph, "__init__", spy)
    torch.manual_seed(2)
    model = _family(family).eval()
    compiled, counter = _compile(model, dynamic=True)
    with torch.no_grad():
        for seq in (9, 30, 4):
            ids = torch.randint(0, 160, (1, seq), device=DEV)
            got, want = compiled(input_ids=ids, use_cache=False).logits, model(input_ids=ids, use_cache=False).logits
            assert _rel(got, want) < 1e-4, seq
        assert [p.attention_kernels for p in programs] == [2]  # one program, both layers fused
        ids, mask = torch.randint(0, 160, (1, 12)), torch.ones(1, 12, dtype=torch.long)
        mask[0, :3] = 0  # left padding
        got = compiled(input_ids=ids, attention_mask=mask, use_cache=False).logits
        want = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        assert _rel(got, want) < 1e-4
    assert all(p.attention_kernels == 2 for p in programs), [p.attention_kernels for p in programs]


class Attend(torch.nn.Module):
    """scaled_dot_product_attention as users call it: causal or masked (bool or additive), grouped heads."""

    def __init__(self, causal, mask_kind, gqa):
        super().__init__()
        self.causal, self.mask_kind, self.gqa = causal, mask_kind, gqa

    def forward(self, q, k, v, mask):
        m = None if self.mask_kind is None else (mask > 0 if self.mask_kind == "bool" else mask)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=self.causal,
                                                                enable_gqa=self.gqa) * 2.0


@pytest.mark.parametrize("causal,mask_kind,gqa", [(True, None, False), (False, "bool", True),
                                                  (False, "float", False), (True, None, True)])
@pytest.mark.parametrize("dynamic", [True, False])
def test_scaled_dot_product_attention_matches_eager(backend, causal, mask_kind, gqa, dynamic):
    """Every form of the call against eager at one and two sequences and several lengths: rows the mask
    hides completely give 0 as in PyTorch, never NaN. Static sizes put one sequence in the fused template;
    dynamic ones (a symbolic head count too) compile once."""
    torch.manual_seed(3)
    compiled, counter = _compile(Attend(causal, mask_kind, gqa), dynamic=dynamic)
    frames = []
    with torch.no_grad():
        for batch, seq in ((1, 7), (1, 19), (2, 5), (2, 12)):
            hk = 2 if gqa else 4
            q = torch.randn(batch, 4, seq, 16, device=DEV)
            k, v = torch.randn(batch, hk, seq, 16, device=DEV), torch.randn(batch, hk, seq, 16, device=DEV)
            mask = torch.randn(1, 1, seq, seq, device=DEV)
            mask[..., 1, :] = -1.0  # the mask hides every key from query 1
            if mask_kind == "float":
                mask = torch.where(mask > 0, mask, torch.tensor(-float("inf"), device=DEV))
            got, want = compiled(q, k, v, mask), Attend(causal, mask_kind, gqa)(q, k, v, mask)
            assert not torch.isnan(got).any()
            assert _rel(got, want) < 1e-5, (batch, seq)
            frames.append(counter.frame_count)
    if dynamic:
        assert frames[-1] <= 2  # batch 1 is a size PyTorch specializes; the rest is one compile


def test_kv_cache_decode_matches_eager(backend):
    torch.manual_seed(1)
    model = _family("llama").eval()
    compiled, counter = _compile(model, dynamic=True)
    with torch.no_grad():
        ids = torch.randint(0, 160, (2, 6), device=DEV)
        want, got = model(input_ids=ids, use_cache=True), compiled(input_ids=ids, use_cache=True)
        assert _rel(got.logits, want.logits) < 1e-4
        pw, pg = want.past_key_values, got.past_key_values
        frames = []
        for _ in range(4):
            nxt = torch.randint(0, 160, (2, 1), device=DEV)
            want = model(input_ids=nxt, past_key_values=pw, use_cache=True)
            got = compiled(input_ids=nxt, past_key_values=pg, use_cache=True)
            assert _rel(got.logits, want.logits) < 1e-4
            pw, pg = want.past_key_values, got.past_key_values
            frames.append(counter.frame_count)
    assert frames[1:] == frames[:1] * 3  # the decode step's graph serves every cache length


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        x = torch.nn.functional.avg_pool2d(torch.relu(self.b2(self.c2(x))), 2)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


class ChannelsLast(torch.nn.Module):
    """Convolutions fed by convolutions (their rows taken channels-last), a residual add, pooling of both
    kinds, and weights read twice: c0's by a convolution of the input and of its own output, c2's by two
    convolutions of convolutions."""

    def __init__(self):
        super().__init__()
        self.c0 = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.c1, self.b1 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.c3 = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(24, 7)

    def forward(self, x):
        h = torch.relu(self.b1(self.c1(self.c0(torch.relu(self.c0(x))))))
        h = torch.nn.functional.max_pool2d(h, 2)
        h = h + torch.sigmoid(self.c2(h)) * 0.5
        h = torch.nn.functional.avg_pool2d(self.c3(self.c2(torch.relu(h))), 2)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1))


def test_mlp_and_convnet_match_eager(backend):
    torch.manual_seed(2)
    mlp = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.Linear(48, 48),
                              torch.nn.SiLU(), torch.nn.LayerNorm(48), torch.nn.Linear(48, 5)).eval().to(DEV)
    net, last = ConvNet().eval().to(DEV), ChannelsLast().eval().to(DEV)
    for bn in (net.b1, net.b2, last.b1):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    with torch.no_grad():
        for model, shapes in ((mlp, [(3, 24), (17, 24), (64, 24)]), (net, [(2, 3, 32, 32), (5, 3, 32, 32)]),
                              (last, [(2, 3, 20, 20), (3, 3, 20, 20)])):
            compiled, counter = _compile(model, dynamic=True)
            frames = []
            for shape in shapes:
                x = torch.randn(*shape, device=DEV)
                assert _rel(compiled(x), model(x)) < 1e-5
                frames.append(counter.frame_count)
            assert frames[1:] == frames[:1] * (len(frames) - 1)  # no recompiles at new batch sizes


def test_constant_padding_matches_eager(backend):
    """F.pad's constant mode: widening and cropping (negative amounts) on several axes, zero and other fills,
    at sizes the compile did not see."""
    def f(x):
        y = torch.nn.functional.pad(x, (1, -2, 0, 3), value=-1.5) * 2.0
        return y + torch.nn.functional.pad(x.sin(), (2, -3, 0, 3))

    compiled, counter = _compile(f, dynamic=True)
    for shape in ((2, 3, 6), (3, 5, 9), (4, 2, 7)):
        x = torch.randn(*shape, device=DEV)
        got, want = compiled(x), f(x)
        assert got.shape == want.shape
        assert _rel(got, want) < 1e-6, shape
    assert counter.frame_count == 1


def test_weights_are_bound_at_the_first_call_only(backend, monkeypatch):
    """Parameters are bound (copied to the host from a GPU, packed) at the first call; later calls bind
    nothing, unless a parameter moved."""
    graphs, binds = [], []
    init = backend.PrismGraph.__init__

    class Counting:
        def __init__(self, program):
            self.program = program

        def bind_weight(self, name, t):
            binds.append(name)
            return self.program.bind_weight(name, t)

        def __getattr__(self, attr):
            return getattr(self.program, attr)

    def spy(self, *a, **k):
        init(self, *a, **k)
        self.program = Counting(self.program)
        graphs.append(self)

    monkeypatch.setattr(backend.PrismGraph, "__init__", spy)
    torch.manual_seed(4)
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3)).eval().to(DEV)
    compiled, _ = _compile(mlp)
    with torch.no_grad():
        x = torch.randn(5, 12, device=DEV)
        want = mlp(x)
        assert _rel(compiled(x), want) < 1e-5
        first = len(binds)
        assert first == 4  # two weights, two biases
        for _ in range(3):
            assert _rel(compiled(x), want) < 1e-5
        assert len(binds) == first
        mlp[0].weight.data = mlp[0].weight.data * 2  # moved: bound again, and used
        assert _rel(compiled(x), mlp(x)) < 1e-5
    assert len(binds) == first + 1 and len(graphs) >= 1


def test_pow_keeps_the_sign_of_negative_bases_for_every_integer_exponent(backend):
    x = torch.tensor([-2.0, -1.5, -0.75, 0.0, 0.5, 1.25, 3.0, float("nan")], device=DEV)
    for p in (-3, -2, -1, 0, 1, 2, 3, 5, 6, 7, 65, 66, 0.5, 1.5, -0.5):
        def f(t):
            return t ** p

        compiled, _ = _compile(f)
        got, want = compiled(x), f(x)
        # torch: NaN ** 0 is 1; negative ** non-integer is NaN; 0 ** negative is inf
        same = (got == want) | (torch.isnan(got) & torch.isnan(want)) | ((got - want).abs() <= 1e-5 * want.abs())
        assert same.all(), f"x ** {p}: {got.tolist()} vs torch {want.tolist()}"


def test_an_operator_prism_lacks_runs_in_eager_with_one_warning(backend):
    def f(x, w):
        h = torch.relu(x @ w)
        return torch.cumprod(h, dim=-1) + h.sum(-1, keepdim=True)  # cumprod: not a Prism operator

    x, w = torch.randn(4, 8, device=DEV), torch.randn(8, 6, device=DEV)
    compiled, _ = _compile(f)
    before = backend.stats["fallback_nodes"]
    with pytest.warns(UserWarning, match="cumprod"):
        got = compiled(x, w)
    assert _rel(got, f(x, w)) < 1e-5
    assert backend.stats["fallback_nodes"] > before


def test_sizes_equal_only_under_torchs_guards_run_in_eager(backend):
    """CUDA's memory-efficient attention repeats grouped K/V heads itself: Hk * (Hq // Hk) heads expanded to
    Hq, equal only because PyTorch guards Hq % Hk == 0. Prism cannot prove that: the graph runs in eager
    with a warning and the right answer, never a failed compile (seen on a lent H200, written here so the
    CPU runs it too)."""

    def f(q, k):
        b, hq, s, d = q.shape
        hk = k.shape[1]
        kr = k[:, :, None].expand(b, hk, hq // hk, s, d).reshape(b, hk * (hq // hk), s, d).expand(b, hq, s, d)
        return q * kr

    compiled, _ = _compile(f, dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for hq, hk in ((6, 3), (4, 1), (8, 2)):
            q, k = torch.randn(2, hq, 5, 8, device=DEV), torch.randn(2, hk, 5, 8, device=DEV)
            assert _rel(compiled(q, k), f(q, k)) < 1e-6
    assert any("eager" in str(w.message) and "cannot prove" in str(w.message) for w in caught)


def test_bad_input_is_a_clear_exception(backend, prism_py):
    def f(x):
        return x.softmax(-1)

    compiled, _ = _compile(f)
    # float64 arrays are not a Prism type: that graph runs in PyTorch, correctly
    x = torch.randn(3, 5, dtype=torch.float64, device=DEV)
    with pytest.warns(UserWarning, match="eager"):
        assert torch.allclose(compiled(x), f(x))
    # a compiled graph called with the wrong rank fails with Prism's message, not a crash
    g = prism_py.Graph()
    t = g.input("x", "f32", [prism_py.Expr.sym("n"), 4])
    g.output(t.softmax(-1), "y")
    p = g.compile("cpu", 1)
    with pytest.raises(prism_py.PrismError, match="x"):
        p.run({"x": torch.randn(2, 4, 1)})
    with pytest.raises(prism_py.PrismError, match="int64|dtype"):
        p.run({"x": torch.zeros(2, 4, dtype=torch.int64)})
