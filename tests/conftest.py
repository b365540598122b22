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
