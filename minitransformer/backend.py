"""The array backend: one switch between NumPy (CPU) and CuPy (GPU).

Every other module reaches arrays through `backend.xp`, read at call time, so `use("gpu")` moves
all later work to CuPy. This is the only module that imports cupy (distributed.py reaches NCCL and
picks a GPU per process through it).

`fused` switches the fused CuPy kernels of kernels.py (softmax, LayerNorm, cross-entropy, dropout,
Adam): on by default, used only on the GPU; set `backend.fused = False`, or the environment variable
MINITRANSFORMER_FUSED=0 before the import, to run the plain expressions of functional.py and
optim.py on CuPy too. On the CPU it changes nothing.

It leaves out mixed precision on purpose: float32 is the training dtype, float64 is for gradient
checks.
"""
import os
import threading

import numpy as np

xp = np                    # the array module in use: numpy or cupy
device = "cpu"             # "cpu" or "gpu"
DEFAULT_DTYPE = np.float32  # the training dtype
# fused CuPy kernels on the GPU (kernels.py)
fused = os.environ.get("MINITRANSFORMER_FUSED", "1") != "0"

_cupy = None               # the cupy module once use("gpu") has imported it
# matmul(a, b, out, add=False) replacing xp.matmul while set: graphs.py sets cublas.matmul
gemm = None


class _Seeds(threading.local):
    """The seed and generators of one thread (each rank of distributed.run_threads draws its own):
    rng, the current backend's, and host, the NumPy one for initialisation, made lazily by rng() and
    host_rng()."""
    seed = 0
    rng = None
    host = None


_seeds = _Seeds()

INSTALL_HINT = ('pip install -e ".[gpu-cuda12]" for a CUDA 12 driver, '
                'or -e ".[gpu-cuda13]" for CUDA 13 '
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
        raise RuntimeError(
            f"CuPy is installed but no CUDA GPU is usable ({e}). Where the driver is older than "
            f"CuPy's CUDA, {INSTALL_HINT}; or stay on the CPU with use('cpu')."
        ) from None
    if n == 0:
        raise RuntimeError("CuPy is installed but no CUDA GPU is visible (CUDA_VISIBLE_DEVICES?): "
                           "stay on the CPU with use('cpu').")
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
    global xp, device
    name = str(name).lower()
    if name in ("cpu", "numpy"):
        xp = np
        device = "cpu"
    elif name in ("gpu", "cuda", "cupy"):
        xp = _import_cupy()
        device = "gpu"
    else:
        raise ValueError(f"unknown device {name!r}: expected 'cpu' or 'gpu'")
    _seeds.rng = None
    return xp


def matmul(a, b, out=None):
    """xp.matmul(a, b, out=out), the GEMM of ops.matmul and the GPU's linear and attention; while
    `gemm` is set (run/replay.py, CUDA graphs on: CuPy refuses cuBLAS inside a capture),
    gemm(a, b, out) instead."""
    return xp.matmul(a, b, out=out) if gemm is None else gemm(a, b, out)


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
    """target[index] += values, adding repeated indices up:
    scatter_add(zeros(3), [0, 0, 2], [1, 1, 5]) -> [2, 0, 5].

    On the CPU np.add.at, in the order of index. On the GPU an integer array index (the embedding's
    backward) goes through sorted_scatter_add: the same bits on every run. Other indices (a tuple of
    arrays, a boolean mask) take cupyx.scatter_add, whose atomic adds land in whatever order the
    hardware takes: a last-bit difference from run to run where an index repeats.
    """
    if device_of(target) == "cpu":
        np.add.at(target, index, values)
    elif getattr(index, "dtype", np.dtype(float)).kind in "iu":
        sorted_scatter_add(target, index, values)
    else:
        import cupyx
        cupyx.scatter_add(target, index, values)
    return target


def sorted_scatter_add(target, index, values):
    """target[index] += values for an integer array index into target's first axis, adding in an
    order that the index alone fixes: the same bits on every run, on NumPy and on CuPy (float
    additions are correctly rounded on both, so both give the bits of this same code).

    The rows of values are sorted by index (stably); within each run of one index, neighbours are
    added pairwise: in round s = 1, 2, 4, ... the row at rank r of its run, r a multiple of 2s,
    takes in the row at rank r + s where the run has one. After ceil(log2(longest run)) rounds the
    first row of each run holds the run's sum (rounded like a pairwise sum: log2(n) eps, not n eps),
    added to target. The bookkeeping (sort, runs, ranks) runs where the index is: a host index on
    the host in NumPy (the rounds the longest run needs, no copy back), a device index on the device
    (sorted_scatter_add_fixed: no sync, and shapes that the ids do not change, as a CUDA graph
    needs). Plain form: np.add.at.
    """
    if device_of(index) == "gpu":
        return sorted_scatter_add_fixed(_cupy, target, index, values)
    ids = np.asarray(index).reshape(-1)                          # (N,) on the host
    if ids.size == 0:
        return target
    # host index arrays -> target's device
    put = np.asarray if device_of(target) == "cpu" else _cupy.asarray
    order = np.argsort(ids, kind="stable")                       # (N,) the rows, sorted by index
    sid = ids[order]
    first = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])     # (U,) where each run starts
    length = np.diff(np.r_[first, ids.size])                     # (U,) its number of rows
    run = np.repeat(np.arange(first.size), length)               # (N,) the run of each sorted row
    rank = np.arange(ids.size) - first[run]                      # (N,) its place in the run
    rows = values.reshape((ids.size,) + target.shape[1:])[put(order)]  # (N, ...) sorted: a copy
    s = 1
    while s < length.max():
        # rows taking one in
        i = put(np.flatnonzero((rank % (2 * s) == 0) & (rank + s < length[run])))
        rows[i] += rows[i + s]
        s *= 2
    target[put(sid[first])] += rows[put(first)]                  # one row per index: no repeats
    return target


def sorted_scatter_add_fixed(xp, target, index, values):
    """sorted_scatter_add in array module xp (the index's), in shapes that depend on N alone: runs
    and ranks found by searchsorted in the sorted ids rather than by comparing neighbours,
    ceil(log2(N)) rounds (past the longest run a round keeps every row: xp.where), and the runs'
    sums added by a scatter-add in which every other row adds an exact zero. No host copy, no sync,
    no shape the ids decide: what a CUDA graph needs. The same sums in the same order as the host's,
    so the same bits (signed zeros aside; a test holds them equal on NumPy and on a GPU). The path
    with backend.fused off: kernels.embedding_backward replaces it otherwise (one block per run of
    an id, where this one makes ceil(log2(N)) rounds over the whole (N, D) gradient: several times
    faster; benchmarks/README.md, 'The GPU run').
    """
    ids = index.reshape(-1)                                   # (N,)
    n = ids.size
    if n == 0:
        return target
    order = xp.argsort(ids, kind="stable")                    # (N,) the rows, sorted by index
    sid = ids[order]
    first = xp.searchsorted(sid, sid, side="left")            # (N,) where each row's run starts
    length = xp.searchsorted(sid, sid, side="right") - first  # (N,) its run's number of rows
    rank = xp.arange(n) - first                               # (N,) its place in the run
    rows = values.reshape((n,) + target.shape[1:])[order]     # (N, ...) sorted: a copy
    column = (n,) + (1,) * (rows.ndim - 1)                    # a per-row flag against (N, ...)
    s = 1
    while s < n:
        take = ((rank % (2 * s) == 0) & (rank + s < length)).reshape(column)
        rows = xp.where(take, rows + rows[xp.minimum(xp.arange(n) + s, n - 1)], rows)
        s *= 2
    add_at = np.add.at if xp is np else __import__("cupyx").scatter_add
    add_at(target, sid, xp.where((rank == 0).reshape(column), rows, 0))  # each run's sum, and zeros
    return target


def host_copy(a):
    """A NumPy array of a backend array's values that shares no memory with it: one device-to-host
    copy on the GPU (to_numpy's own), one np.array copy on the CPU. What a checkpoint stores."""
    return to_numpy(a) if device_of(a) == "gpu" else np.array(a, copy=True)


def seed(n):
    """Seed the generators used for initialisation, dropout and batching: this thread's (each rank
    of distributed.run_threads has its own; a new thread starts from seed 0)."""
    _seeds.seed = int(n)
    _seeds.rng = None
    _seeds.host = None


def rng():
    """The seeded generator of the current backend: NumPy's default generator, or CuPy's over
    Philox4x32-10.

    The trainer re-seeds it at every update from (seed, step), so it must be cheap to make. NumPy's
    is. On the GPU, CuPy draws with one generator state per thread, GPU_RNG_STATES of them here
    rather than CuPy's default of 2048 per multiprocessor, so the stream is the same on every GPU
    model; Philox's states are just (key, counter), and _gpu_rng re-initialises the same 16 MB of
    them in place at each seed instead of allocating new ones.
    """
    if _seeds.rng is None:
        _seeds.rng = (_gpu_rng(_seeds.seed) if device == "gpu"
                      else np.random.default_rng(_seeds.seed))
    return _seeds.rng


# Philox states on the GPU: about an H100's 132 multiprocessors x 2048 threads
GPU_RNG_STATES = 1 << 18
_gpu_generator = None      # CuPy's Generator, made once; re-seeded in place


def _gpu_rng(n):
    """CuPy's Generator over Philox4x3210(n, size=GPU_RNG_STATES), made on the first call; later
    calls re-initialise its states with seed n through CuPy's own init_curand, as the constructor
    does (the same 32-bit seed from NumPy's SeedSequence), so the stream equals a new
    generator's."""
    global _gpu_generator
    if _gpu_generator is None:
        _gpu_generator = _cupy.random.Generator(_cupy.random.Philox4x3210(n, size=GPU_RNG_STATES))
        return _gpu_generator
    from cupy.random._generator_api import init_curand  # private in CuPy 14; pinned >= 14
    bits = _gpu_generator.bit_generator
    init_curand(bits.generator, bits.state(),
                np.random.SeedSequence(n).generate_state(1, np.uint32)[0], GPU_RNG_STATES)
    return _gpu_generator


def host_rng():
    """The seeded NumPy generator for initialisation, the same on both backends, so that a model
    built after mt.seed(n) starts from the same weights on the CPU and on the GPU."""
    if _seeds.host is None:
        _seeds.host = np.random.default_rng(_seeds.seed)
    return _seeds.host


def select_gpu(local_rank):
    """Make GPU local_rank (modulo those visible) the current one: one GPU per process when several
    processes share a machine (distributed.py). Call it before the first array is made on the GPU.
    """
    cupy = _import_cupy()
    cupy.cuda.Device(local_rank % cupy.cuda.runtime.getDeviceCount()).use()


def nccl():
    """CuPy's NCCL bindings (cupy.cuda.nccl), through which distributed.py sums gradients across
    GPUs."""
    _import_cupy()
    from cupy.cuda import nccl as module
    return module


def synchronize():
    """Wait for queued GPU work (a no-op on the CPU); used when timing."""
    if device == "gpu":
        _cupy.cuda.get_current_stream().synchronize()


if os.environ.get("MINITRANSFORMER_DEVICE"):
    use(os.environ["MINITRANSFORMER_DEVICE"])
