"""Shared fixtures: every test that takes `xp_backend` runs once on the CPU and once on the GPU
(the GPU case skipped, with the reason, where CuPy or a GPU is absent); the float32 tolerances; the
small training task of the training, checkpoint, run-directory and evaluation tests."""
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.run.training import TrainingConfig
from minitransformer.transformer import Transformer, TransformerConfig

# A suite started as a background job (`cmd &` in a script, nohup) inherits Ctrl-C ignored, and
# Python keeps it so; the signal tests need Python's own handler, in pytest-xdist's workers too and
# in the commands the tests start (a handled signal is the default again in a child)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

DEFAULT_DEVICE = os.environ.get("MINITRANSFORMER_DEVICE", "cpu")
PAD, BOS, EOS = 0, 1, 2                                          # the special ids of the data tests
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"   # Multi30k, where present
# the BPE tests' corpus: German, English and French, an emoji, a combining accent
CORPUS = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Two young, White males are outside near many bushes.",
    "Ein Mann in einem T-Shirt spielt Gitarre; a man's guitar.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "A little girl climbing into a wooden playhouse.",
    "Un homme à l'école, 2 enfants, 3 chiens 🐕🐕 et café (cafe\u0301).",
] * 3


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def xp_backend(request):
    """Switch the backend for one test and give the array module; restore the default after. The GPU
    case carries the `gpu` marker, so `pytest -m gpu` runs it with the fused-kernel tests."""
    if request.param == "gpu" and not backend.gpu_available():
        pytest.skip("GPU backend: CuPy or a CUDA GPU is not available on this machine")
    xp = mt.use(request.param)
    mt.seed(0)
    yield xp
    mt.use(DEFAULT_DEVICE)


@pytest.fixture
def on_cpu():
    """The CPU for one test, whatever MINITRANSFORMER_DEVICE says: the lessons' code (the learner's
    solutions, the figures, the capstone) is NumPy code, as a learner writes it."""
    mt.use("cpu")


@pytest.fixture(autouse=True)
def _reset_default_backend():
    """Every test starts on the suite's default device (MINITRANSFORMER_DEVICE, else the CPU)."""
    mt.use(DEFAULT_DEVICE)
    mt.seed(0)
    yield
    mt.use(DEFAULT_DEVICE)


def randn(*shape, seed=0, dtype=np.float64, requires_grad=True):
    """A float64 tensor of standard normals on the current backend (for gradient checks)."""
    data = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return mt.tensor(data, requires_grad=requires_grad)


# -------------------------------------------------------------------- float32 tolerances
F32_EPS = float(np.finfo(np.float32).eps)  # 2**-23, about 1.19e-7: the spacing of float32 numbers at 1


def f32_tol(n_terms=1, magnitude=1.0, safety=4.0):
    """An absolute tolerance for one float32 quantity computed two ways (another BLAS kernel or thread
    count, another batch shape, cached or recomputed, float32 against a float64 reference).

    Each float32 operation rounds to within eps/2 relative (eps = np.finfo(np.float32).eps). A sum, or
    a dot product, of `n_terms` terms whose partial sums are about `magnitude` in size is off by at
    most about n_terms * eps * magnitude (typically sqrt(n_terms) times less); the same goes for a
    chain of n_terms elementwise operations. Returns safety * eps * n_terms * magnitude. With
    magnitude=1 it is a relative tolerance, for values whose size is what matters. A bug worth a test
    (a wrong gradient, a stale cache, a factor of 2) is off by far more than this.
    f32_tol(10) -> 4.8e-06
    """
    return safety * F32_EPS * n_terms * magnitude


def transformer_tol(model, magnitude=None, safety=4.0):
    """An absolute tolerance for the logits of a float32 Transformer computed two ways (cached against
    recomputed, one batch shape against another, another BLAS).

    The rounding errors of a whole network come from the dot products on the path from the ids to a
    logit: per layer about 4 * d_model terms (the attention projections, the scores and the weighted
    sum) and d_ff (the feed-forward), then d_model (the output projection) and vocab_size (the
    softmax's sum). So many independent roundings add up like a random walk, sqrt(n) * eps times the
    size of the terms, and LayerNorm brings every layer's output back to O(1), so they do not compound;
    the worst case n * eps of f32_tol would be a gross overestimate here. `magnitude`: the size of the
    logits, by default the bound sqrt(d_model) * max_v |e_v| (a logit is h . e_v, the final
    LayerNorm's output h has |h| about sqrt(d_model), e_v is a row of the output embedding).
    """
    c = model.config
    if magnitude is None:
        w = model.tgt_embed.weight.data if model.out_proj is None else model.out_proj.weight.data.T
        magnitude = float(np.sqrt(c.d_model) * np.sqrt((backend.to_numpy(w) ** 2).sum(-1).max()))
    n = (c.n_encoder_layers + c.n_decoder_layers) * (4 * c.d_model + c.d_ff) + c.d_model + c.vocab_size
    return safety * F32_EPS * np.sqrt(n) * max(1.0, magnitude)


# -------------------------------------------------------------------- a small training task
@pytest.fixture(scope="module")
def task():
    """A small generated corpus, its tokenizer and encoded pairs (shared by the module's tests)."""
    from minitransformer.text.bpe import BPE
    from minitransformer.text.corpus import encode_pairs
    from minitransformer.text.demo_task import make_splits
    train, valid, _ = make_splits(300, 12, 0, seed=3, max_numbers=2, max_digits=2)
    tok = BPE.train(train[0] + train[1], 300)
    pairs, _ = encode_pairs(train[0], train[1], tok)
    return tok, pairs, valid


def tiny_model(tok, dropout=0.1, seed=0, **overrides):
    """A one-layer Transformer (d_model 32) for tokenizer tok, initialised from seed."""
    mt.seed(seed)
    cfg = TransformerConfig.tiny(vocab_size=tok.vocab_size, d_model=32, d_ff=64, n_heads=2, n_layers=1,
                                 dropout=dropout, **overrides)
    return Transformer(cfg)


def training_config(**kw):
    """A TrainingConfig for the small task: 6 steps, no evaluation, no checkpoint, no progress bar; kw overrides."""
    base = dict(steps=6, max_tokens=120, warmup_steps=4, lr_scale=1.0, eval_every=0, save_every=0,
                keep=3, progress=False)
    return TrainingConfig(**{**base, **kw})


def quiet(*args):
    pass


@pytest.fixture
def numpy_kernels(monkeypatch):
    """fast/gpu.py's CUDA kernels modelled in NumPy, each in its C's argument order, so that the GPU's
    whole-op alternatives (linear, attention, multi-head attention) run their own logic on the CPU."""
    from types import SimpleNamespace

    import numpy as np

    from minitransformer import functional
    from minitransformer.fast import gpu

    def forward_rows(name, x, out=None):
        assert name == "softmax_rows", name
        return functional.softmax_array(x, out=out)

    def backward_rows(name, y, dy, out=None, scale=1.0):   # (dy - sum(dy * y)) * y * scale
        assert name == "softmax" and out is dy, name
        out[...] = (dy - (dy * y).sum(axis=-1, keepdims=True)) * y * y.dtype.type(scale)
        return out

    def scale_and_mask(s, allowed, scale, fill):            # s = allowed ? s * scale : fill
        s[...] = np.where(allowed, s * s.dtype.type(scale), s.dtype.type(fill))
        return s

    def column_sum(a, b=None, into=None):                  # the sums down the columns, added into `into`
        sums = (a if b is None else a * b).sum(axis=0)
        if into is None:
            return sums
        into += sums
        return None
    monkeypatch.setattr(gpu, "kernels", SimpleNamespace(forward_rows=forward_rows, backward_rows=backward_rows,
                                                        scale_and_mask=scale_and_mask, column_sum=column_sum))


def random_ids(rng, B, L, V, lengths=None, first=None):
    """Ids in [3, V) (no special tokens), padded with 0 after `lengths`, optionally `first` in
    column 0."""
    ids = rng.integers(3, V, size=(B, L))
    if lengths is not None:
        ids[np.arange(L)[None, :] >= np.asarray(lengths)[:, None]] = 0
    if first is not None:
        ids[:, 0] = first
    return ids


class WordTokenizer:
    """Words <-> ids 3.. by a fixed small vocabulary (a stand-in for bpe.BPE)."""
    words = "a b c d e f g h i j k l m n o p q r s t".split()

    def encode(self, s):
        return [3 + self.words.index(w) for w in s.split()]

    def decode(self, ids):
        return " ".join(self.words[i - 3] for i in ids)
