"""Both cores in one process: the big array passes of a step cut into blocks of rows, one per thread.

NumPy runs an elementwise pass (exp, LayerNorm, a softmax) on one core, however many the machine has;
only the BLAS runs its GEMMs on several. Here a pool of threads takes the passes too: NumPy lets go of
Python's lock inside its loops, so `for_blocks(fn, n)` runs fn(rows) on contiguous blocks of rows side
by side, the first block on the calling thread, and returns when all are done. A pass of several sweeps
over big rows (cross-entropy's) takes its rows a chunk at a time (`cache_rows`: about a core's cache),
so that its later sweeps find them there: threads or not. (Training runs faster still as two ranks,
each a thread on a core of its own: distributed.run_threads; this is the one-rank path.)

The BLAS then runs on one thread, and the GEMMs are cut the same way (`matmul`): a BLAS left with its
own threads would keep one spinning on the second core after every GEMM (OpenBLAS waits up to 2^28
cycles for the next one), and the pool would find that core taken (tried in session 12: no gain).

The same bits as the whole pass: each block is the same NumPy call on fewer rows, so every row (an
exp, a row's maximum or sum) is computed by the same code in the same order. Only passes whose rows
are independent are cut, never a sum over the rows; a random draw only through `uniform` (and `keep`,
dropout's comparison of it), which start each block where the generator's stream would be. A GEMM's
blocks go through the BLAS's kernels one by one (see matmul): on the reference machine the same bits
as the whole GEMM for the model's shapes, and elsewhere equal to float32 rounding at worst. The same
number of threads gives the same bits on every run, as a BLAS's thread count does.

Off (every pass whole: the plain path) until `use()` turns it on: the Trainer does, a thread per core
(OMP_NUM_THREADS where set, as under `mpiexec`; at most MAX_THREADS, measured on 2 cores only). It needs
OpenBLAS, which NumPy's wheels carry (every one loaded gets one thread); elsewhere `use()` leaves it off.
CPU only; a hand-off costs 50-130 us. Search turns it off; a rank thread runs its passes whole (one_thread).
"""
import contextlib
import ctypes
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import backend

MIN_WORK = 1 << 16       # elements below which a pass is not cut (4x and 16x timed the same: tiny step)
GEMM_COST = 32           # multiply-adds of a GEMM that take as long as one element of a pass
GEMM_ALIGN = 64          # a matrix is cut at multiples of this many rows, if its result is as wide (matmul)
MAX_THREADS = 8          # the most threads use() takes by default
CHUNK_BYTES = 1 << 21    # a pass of several sweeps goes over rows of about this size at a time (this
#                          machine's L2 cache: cross-entropy's forward 28.3 -> 21.8 ms on (4096, 8000))
_threads = 1             # threads a pass is cut over; 1: the plain path
_pool = None             # ThreadPoolExecutor of _threads - 1 workers (the calling thread takes a block too)
_in_block = threading.local()  # set inside a block or rank thread (one_thread): a cut there runs whole
_blas = None             # [(set_num_threads, threads it had)] per OpenBLAS loaded, once looked for


def _openblas():
    """[(set_num_threads, get_num_threads)] of every OpenBLAS loaded in this process (NumPy's, and SciPy's
    where it is imported), empty where none is found."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted(set(re.findall(r"\S*openblas\S*\.so\S*", f.read())))
    except OSError:                                   # not Linux: no way to find the library here
        return []
    found = []
    for path in paths:
        lib = ctypes.CDLL(path)
        names = [(f"{prefix}_set_num_threads{suffix}", f"{prefix}_get_num_threads{suffix}")
                 for suffix in ("", "64_", "_64") for prefix in ("scipy_openblas", "openblas")]
        set_n, get_n = next(((getattr(lib, a), getattr(lib, b)) for a, b in names
                             if hasattr(lib, a) and hasattr(lib, b)), (None, None))
        if set_n:
            set_n.argtypes, set_n.restype, get_n.restype = [ctypes.c_int], None, ctypes.c_int
            found.append((set_n, get_n))
    return found


def default_threads():
    """The cores this process may use: OMP_NUM_THREADS where set (as for mpiexec's ranks), else the cores it
    may run on, at most MAX_THREADS."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cores, MAX_THREADS)


def use(threads=None):
    """Cut the big passes over `threads` threads (default: default_threads()) and give the BLAS one
    thread; use(1) puts everything back. Returns the threads in effect: 1 on the GPU, and where the
    BLAS's threads cannot be set (then nothing changes)."""
    global _threads, _pool, _blas
    threads = default_threads() if threads is None else threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"cores.use: threads must be a whole number >= 1, got {threads!r}")
    if getattr(_in_block, "on", False):               # a rank thread's (one_thread): the pool is the process's
        return 1
    if _blas is None:
        _blas = [(set_n, get_n()) for set_n, get_n in _openblas()]
    if backend.device != "cpu" or not _blas:
        threads = 1
    if threads == _threads:
        return threads
    if _pool is not None:
        _pool.shutdown()
    _pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="cores") if threads > 1 else None
    _threads = threads
    for set_n, had in _blas:                          # one BLAS thread while the pool cuts the GEMMs
        set_n(1 if threads > 1 else had)
    return threads


@contextlib.contextmanager
def using(threads=None):
    """use(threads) inside the block (the Trainer's updates), the threads from before it after it."""
    before = _threads
    try:
        yield use(threads)
    finally:
        use(before)


def threads():
    """The threads a big pass is cut over now (1: off)."""
    return _threads


@contextlib.contextmanager
def one_thread():
    """Inside the block the calling thread runs every pass whole, and use() there changes nothing: a rank of
    distributed.run_threads, whose other ranks have the other cores (the BLAS on one thread: use())."""
    _in_block.on = True
    try:
        yield
    finally:
        _in_block.on = False


def for_blocks(fn, n, work=None, align=1, chunk=None):
    """fn(rows) for contiguous slices `rows` covering range(n), one per thread, side by side, each starting
    at the multiple of `align` nearest to an even share (rounding every cut down gave the last thread up to
    align - 1 rows more: 6% more of a 4,095-row GEMM); returns when every block is done (an error in any
    block is raised after all have finished). `work`, the elements the pass touches (default n), below
    MIN_WORK: one call fn(slice(0, n)) on this thread. chunk (rows, see cache_rows): each block, or the
    whole, is given to fn that many rows at a time, so that a fn of several sweeps over its rows finds
    them in the cache after the first (the same bits, rows being independent)."""
    if chunk and chunk < n:
        whole = fn

        def fn(rows):
            for start in range(rows.start, rows.stop, chunk):
                whole(slice(start, min(start + chunk, rows.stop)))
    k = min(_threads, n // align)
    if k < 2 or (n if work is None else work) < MIN_WORK or getattr(_in_block, "on", False):
        fn(slice(0, n))
        return
    cuts = [(n * i // k + align // 2) // align * align for i in range(k)] + [n]   # nearest multiple of align
    futures = [_pool.submit(_block, fn, slice(cuts[i], cuts[i + 1])) for i in range(1, k)]
    try:
        _block(fn, slice(cuts[0], cuts[1]))
    finally:
        errors = [f.exception() for f in futures]      # waits for every block
    if any(errors):
        raise next(e for e in errors if e)


def cache_rows(a):
    """Rows of array a (its first axis) that fill about CHUNK_BYTES: for_blocks' chunk for a pass over a.
    None for a GPU array: there each chunk would be a kernel launch of its own, so the pass runs whole."""
    return max(1, CHUNK_BYTES // max(1, a[:1].nbytes)) if isinstance(a, np.ndarray) else None


def by_rows(fn, first, *args):
    """fn(first, *args) computed on blocks of rows side by side and joined: `first` and every array
    argument of its dimensions and first axis are cut, other arguments (numbers, None, an array that
    broadcasts over the rows) passed whole; fn returns a tuple of arrays of those rows (or None), each
    joined again, or None when it writes its results into arguments cut like the others (no join: no
    copy). For passes whose rows are independent: the same bits as fn(first, *args). Not cut when the
    arrays cut hold fewer than MIN_WORK elements in all."""
    n, ndim = len(first), first.ndim
    cut = [isinstance(a, np.ndarray) and a.ndim == ndim and len(a) == n for a in args]
    work = first.size + sum(a.size for a, c in zip(args, cut) if c)
    parts = []

    def block(rows):
        parts.append((rows.start, fn(first[rows], *(a[rows] if c else a for a, c in zip(args, cut)))))
    for_blocks(block, n, work)
    if len(parts) == 1 or parts[0][1] is None:
        return parts[0][1]
    parts = [result for _, result in sorted(parts, key=lambda part: part[0])]
    return tuple(None if pieces[0] is None else np.concatenate(pieces) for pieces in zip(*parts))


def _block(fn, rows):
    """fn(rows) marked as inside a block, so that a cut within it runs whole."""
    _in_block.on = True
    try:
        fn(rows)
    finally:
        _in_block.on = False


def matmul(a, b, plus=None):
    """a @ b (NumPy's matmul), plus `plus` (a bias, broadcast over the rows) where given, with the
    result's first axis cut into blocks: the batch of a stack of matrices (b a matrix, or a stack of
    the same length: each matrix is the same BLAS call as in the whole), or a matrix's rows, at
    multiples of GEMM_ALIGN and only for a result at least as wide. The BLAS computes a GEMM in tiles
    of rows and columns, and an edge tile goes to other kernels, which may sum otherwise: on the
    reference machine's OpenBLAS, blocks cut so gave the whole GEMM's bits over 1,920 shapes (8-4,090
    rows, 1-512 inner, each side transposed or not), where results 1-7 columns wide, or a cut inside a
    tile, did not. Anything else: whole."""
    if _threads == 1 or backend.xp is not np or not 2 <= b.ndim <= a.ndim or a.shape[-1] != b.shape[-2] \
            or (a.ndim == 2 and b.shape[-1] < GEMM_ALIGN) \
            or (b.ndim > 2 and np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) != a.shape[:-2]):
        return _matmul(a, b, plus)
    stacked = b.ndim == a.ndim > 2 and b.shape[0] == a.shape[0]
    if b.ndim > 2 and not stacked:                    # b broadcast along the first axis: whole
        return _matmul(a, b, plus)
    out = np.empty(a.shape[:-1] + b.shape[-1:], dtype=np.result_type(a, b))

    def block(rows):
        _matmul(a[rows], b[rows] if stacked else b, plus, out[rows])
    for_blocks(block, a.shape[0], out.size * a.shape[-1] // GEMM_COST, GEMM_ALIGN if a.ndim == 2 else 1)
    return out


def transpose_matmul(a, b, into=None):
    """a^T b for 2-D a (N, m), b (N, n); added into `into` (m, n) where given (a leaf's gradient buffer,
    tensor.grad_into), and then None. On the CPU as (b^T a)^T (a transposed view) when m < n: OpenBLAS ran
    a^T b up to 10x slower when wider than tall (131 vs 28 ms for (4096, 256)^T (4096, 512); benchmarks/).
    On the GPU with CUDA graphs on (backend.gemm set), cuBLAS adds the product into `into` itself (beta 1).
    """
    if into is not None and backend.gemm is not None:
        backend.gemm(a.T, b, into, add=True)
        return None
    ab = matmul(b.T, a).T if backend.xp is np and a.shape[1] < b.shape[1] else matmul(a.T, b)
    if into is None:
        return ab
    into += ab
    return None


def column_sum(g, into=None):
    """The sums down the columns of g (N, D): (D,); added into `into` where given, and then None (the CPU's
    and fused-off GPU's bias gradient: kernels.column_sum does both in one launch on the GPU)."""
    if into is None:
        return g.sum(axis=0)
    into += g.sum(axis=0)
    return None


def _matmul(a, b, plus, out=None):
    """a @ b (+ plus) whole, into out where given."""
    out = backend.matmul(a, b, out=out)
    if plus is not None:
        out += plus
    return out


def elementwise(ufunc, *args):
    """ufunc(*args) for a NumPy ufunc whose result has its arguments' common type (add, multiply,
    maximum, ...), cut into blocks of rows when every array argument has one shape: the same bits."""
    arrays = [a for a in args if isinstance(a, np.ndarray) and a.ndim]
    if _threads == 1 or not arrays or any(a.shape != arrays[0].shape for a in arrays):
        return ufunc(*args)
    out = np.empty(arrays[0].shape, np.result_type(*args))
    for_blocks(lambda r: ufunc(*(a[r] if isinstance(a, np.ndarray) and a.ndim else a for a in args), out=out[r]),
               len(out), out.size)
    return out


def uniform(rng, shape):
    """rng.random(shape, dtype=float32) drawn in blocks side by side: the same numbers, and rng left as
    that call leaves it. A block starts further along the stream on a copy of rng's PCG64 (advance():
    two float32 draws take one 64-bit step); any other generator, or one holding half a step, draws whole."""
    n, bits = int(np.prod(shape)), getattr(rng, "bit_generator", None)
    if _threads == 1 or type(bits) is not np.random.PCG64 or bits.state["has_uint32"]:
        return rng.random(shape, dtype=np.float32)
    out, start, ends = np.empty(n, np.float32), bits.state, {}

    def block(rows):
        gen = rng
        if rows.start:                                # its own copy, moved to where this block begins
            gen = np.random.Generator(np.random.PCG64())
            gen.bit_generator.state = start
            gen.bit_generator.advance(rows.start // 2)
        gen.random(dtype=np.float32, out=out[rows])
        ends[rows.stop] = gen
    for_blocks(block, n, align=2)
    if len(ends) > 1:
        rng.bit_generator.state = ends[n].bit_generator.state
    return out.reshape(shape)


def keep(rng, shape, p):
    """uniform(rng, shape) >= p, the same booleans and rng left alike, without making the floats. NumPy
    makes a float32 from 32 random bits r as (r >> 8) / 2^24 (a PCG64 64-bit step gives two r, its low
    half first), so u >= p holds exactly when r >= K 2^8, K the least whole number with K / 2^24 >= p
    (compared as u is, in float32 for a Python float p): the bits compared as whole numbers, at half the
    time of rng.random's float32 draw. Any other generator, or one holding half a step: uniform(...) >= p."""
    n, bits = int(np.prod(shape)), getattr(rng, "bit_generator", None)
    if type(bits) is not np.random.PCG64 or bits.state["has_uint32"] or n == 0:
        return uniform(rng, shape) >= p
    K = next(k for k in range(max(int(float(p) * 2.0 ** 24) - 1, 0), 2 ** 24 + 1)   # two or three tries
             if k == 2 ** 24 or np.array([k], np.float32) * np.float32(2.0 ** -24) >= p)
    limit = np.uint32(min(K, 2 ** 24 - 1) << 8)     # K = 2^24 (p rounds to 1 in float32): none kept, below
    out, start, ends = np.empty(n, bool), bits.state, {}

    def block(rows):                                  # rows: a slice of the n numbers, starting even
        gen = rng
        if rows.start:                                # its own copy, moved to where this block begins
            gen = np.random.Generator(np.random.PCG64())
            gen.bit_generator.state = start
            gen.bit_generator.advance(rows.start // 2)
        r = gen.bit_generator.random_raw(-(-(rows.stop - rows.start) // 2)).view(np.uint32)  # low, high, ...
        np.greater_equal(r[: rows.stop - rows.start], limit, out=out[rows])
        ends[rows.stop] = (gen, r[-1])
    for_blocks(block, n, align=2)
    if K == 2 ** 24:
        out[:] = False
    gen, high = ends.get(n, (rng, None))
    state = gen.bit_generator.state
    if n % 2:                                         # an odd count: the last step's high half is kept
        state["has_uint32"], state["uinteger"] = 1, int(high)
    rng.bit_generator.state = state
    return out.reshape(shape)
