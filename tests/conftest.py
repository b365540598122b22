"""Shared fixtures: every test that takes `xp_backend` runs once on the CPU and once on the GPU
(the GPU case skipped, with the reason, where CuPy or a GPU is absent)."""
import os

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend

DEFAULT_DEVICE = os.environ.get("MINITRANSFORMER_DEVICE", "cpu")


@pytest.fixture(params=["cpu", "gpu"])
def xp_backend(request):
    """Switch the backend for one test and give the array module; restore the default after."""
    if request.param == "gpu" and not backend.gpu_available():
        pytest.skip("GPU backend: CuPy or a CUDA GPU is not available on this machine")
    xp = mt.use(request.param)
    mt.seed(0)
    yield xp
    mt.use(DEFAULT_DEVICE)


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
