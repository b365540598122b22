"""The array backend: one switch between NumPy (CPU) and CuPy (GPU).

Every other module reaches arrays through `backend.xp`, read at call time, so `use("gpu")` moves
all later work to CuPy. This is the only module that imports cupy (distributed.py reaches NCCL and
picks a GPU per process through it).

`fused` switches the fused CuPy kernels of kernels.py (softmax, LayerNorm, cross-entropy, dropout,
Adam): on by default, used only on the GPU; set `backend.fused = False`, or the environment variable
MINITRANSFORMER_FUSED=0 before the import, to run the plain expressions of functional.py and optim.py
on CuPy too. On the CPU it changes nothing.

It leaves out mixed precision on purpose: float32 is the training dtype, float64 is for gradient checks.
"""
import os

import numpy as np

xp = np                    # the array module in use: numpy or cupy
device = "cpu"             # "cpu" or "gpu"
DEFAULT_DTYPE = np.float32  # the training dtype
fused = os.environ.get("MINITRANSFORMER_FUSED", "1") != "0"  # fused CuPy kernels on the GPU (kernels.py)

_cupy = None               # the cupy module once use("gpu") has imported it
_seed = 0
_rng = None                # the generator of the current backend, made lazily by rng()
_host_rng = None           # the NumPy generator for initialisation, made lazily by host_rng()

INSTALL_HINT = ('pip install -e ".[gpu-cuda12]" for a CUDA 12 driver, or -e ".[gpu-cuda13]" for CUDA 13 '
                "(nvidia-smi shows the driver's CUDA version)")


def _import_cupy():
    """Import cupy and check that a GPU is visible; raise a RuntimeError saying what is missing."""
    global _cupy
    if _cupy is not None:
        return _cupy
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError(
            f"running on the GPU needs CuPy, which is not installed ({e}). Install it with "
            f"{INSTALL_HINT}, or stay on the CPU with use('cpu')."
        ) from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDA driver missing or broken
        raise RuntimeError(f"CuPy is installed but no CUDA GPU is usable: {e}") from None
    if n == 0:
        raise RuntimeError("CuPy is installed but no CUDA GPU is visible (CUDA_VISIBLE_DEVICES?).")
    _cupy = cupy
    return cupy


def gpu_available():
    """True when CuPy imports and sees at least one GPU."""
    try:
        _import_cupy()
        return True
    except RuntimeError:
        return False


def use(name):
    """Switch the backend: use("cpu") for NumPy, use("gpu") for CuPy. Returns the array module.

    Tensors made before the switch keep their arrays; mixing them with new ones raises an error.
    """
    global xp, device, _rng
    name = str(name).lower()
    if name in ("cpu", "numpy"):
        xp, device = np, "cpu"
    elif name in ("gpu", "cuda", "cupy"):
        xp, device = _import_cupy(), "gpu"
    else:
        raise ValueError(f"unknown device {name!r}: expected 'cpu' or 'gpu'")
    _rng = None
    return xp


def device_of(a):
    """'cpu' for a NumPy array (or Python number), 'gpu' for a CuPy array."""
    return "gpu" if _cupy is not None and isinstance(a, _cupy.ndarray) else "cpu"


def to_numpy(a):
    """A NumPy copy of a backend array (a host-device copy on the GPU: it synchronises)."""
    if device_of(a) == "gpu":
        return _cupy.asnumpy(a)
    return np.asarray(a)


def asarray(a, dtype=None):
    """Put `a` (array, list or number) on the current backend, without a copy when possible."""
    if device == "gpu":
        return _cupy.asarray(a, dtype=dtype)
    return np.asarray(to_numpy(a) if device_of(a) == "gpu" else a, dtype=dtype)


def scatter_add(target, index, values):
    """target[index] += values, adding repeated indices up (np.add.at; cupyx.scatter_add on the GPU).

    scatter_add(zeros(3), [0, 0, 2], [1, 1, 5]) -> [2, 0, 5]
    """
    if device_of(target) == "gpu":
        import cupyx
        cupyx.scatter_add(target, index, values)
    else:
        np.add.at(target, index, values)
    return target


def seed(n):
    """Seed the generators used for initialisation, dropout and batching."""
    global _seed, _rng, _host_rng
    _seed, _rng, _host_rng = int(n), None, None


def rng():
    """The seeded generator of the current backend (numpy.random.Generator or cupy's).

    The trainer re-seeds it at every update from (seed, step), so it must be cheap to make. NumPy's
    default generator is. On the GPU, CuPy's default (XORWOW) initialises a state per thread with a
    costly skip-ahead, so a counter-based Philox4x32-10 is used where CuPy offers it: its states are
    just (key, counter). Note: not yet run on a GPU (see the GPU issue); the fallback is CuPy's default.
    """
    global _rng
    if _rng is None:
        philox = getattr(xp.random, "Philox4x3210", None) if device == "gpu" else None
        _rng = xp.random.Generator(philox(_seed)) if philox is not None else xp.random.default_rng(_seed)
    return _rng


def host_rng():
    """The seeded NumPy generator for initialisation, the same on both backends, so that a model
    built after mt.seed(n) starts from the same weights on the CPU and on the GPU."""
    global _host_rng
    if _host_rng is None:
        _host_rng = np.random.default_rng(_seed)
    return _host_rng


def select_gpu(local_rank):
    """Make GPU local_rank (modulo those visible) the current one: one GPU per process when several
    processes share a machine (distributed.py). Call it before the first array is made on the GPU."""
    cupy = _import_cupy()
    cupy.cuda.Device(local_rank % cupy.cuda.runtime.getDeviceCount()).use()


def nccl():
    """CuPy's NCCL bindings (cupy.cuda.nccl), through which distributed.py sums gradients across GPUs."""
    _import_cupy()
    from cupy.cuda import nccl as module
    return module


def synchronize():
    """Wait for queued GPU work (a no-op on the CPU); used when timing."""
    if device == "gpu":
        _cupy.cuda.get_current_stream().synchronize()


if os.environ.get("MINITRANSFORMER_DEVICE"):
    use(os.environ["MINITRANSFORMER_DEVICE"])
