"""Fused CuPy kernels for softmax, log-softmax, LayerNorm, cross-entropy, dropout, Adam, the
embedding's backward and the column sums of bias gradients (lesson 11).

functional.py (its softmax core too, through forward_rows), attention.py (softmax's backward,
backward_rows) and optim.py call these only when `active()`. The CUDA C of the row kernels is
kernel_source.py; the elementwise ones are built here (_BUILD). Elsewhere their NumPy code runs,
whose numbers every kernel must give (tests/test_kernels.py); plain.py holds the plain forms of
both. The CUDA C is compiled by CuPy on first use, never at import, and kept in `_cache`. CuPy
compiles with -ftz=true: subnormal results flush to zero, so "the same bits as NumPy" holds for
normal numbers only. Each is faster on the GPU than its plain form, forward and backward
(benchmarks/README.md, 'The GPU run'). Left out: float16, softmax over another axis (both take the
NumPy path), warp-shuffle reductions (lesson 11 says why).
"""
import numpy as np

from .. import backend
from .kernel_source import CTYPES, MAX_BLOCK, source
from ..tensor import data_of, grad_into, make_node

_cache = {}                               # name or (name, dtype) -> a compiled CuPy kernel


def active(*arrays):
    """True when the fused kernels run: the CuPy backend, backend.fused on, the arrays (or Tensors)
    non-empty CuPy arrays, all float32 or all float64. The backend is checked first: on NumPy it
    costs nothing."""
    return (backend.device == "gpu" and backend.fused and
            all(backend.device_of(a) == "gpu" and a.dtype in CTYPES
                and a.dtype == arrays[0].dtype and a.size
                for a in map(data_of, arrays)))


def _raw(name, dtype):
    """kernel_source's kernel `name` for dtype, compiled on first use."""
    key = (name, np.dtype(dtype).str)
    if key not in _cache:
        _cache[key] = backend.xp.RawKernel(source(name, dtype), name)
    return _cache[key]


def _launch(name, rows, n, *args):
    """Run row kernel `name` on `rows` rows of n numbers, one block of 32 to MAX_BLOCK threads (a
    power of two) per row. args: contiguous arrays, then NumPy scalars of the C types (np.int64:
    long long)."""
    threads = min(MAX_BLOCK, max(32, 1 << (int(n) - 1).bit_length()))
    _raw(name, args[0].dtype)((rows,), (threads,), args)


# ------------------------------------------------------------ elementwise and reduction kernels
_BUILD = {
    # dz = (exp(z - m) / s - keep [at the target] - eps / V) * w g, over (N, V), broadcasting the
    # rows' m, s, t, wg
    "cross_entropy_backward": lambda xp: xp.ElementwiseKernel(
        "T z, T m, T s, int64 t, int64 col, T wg, T keep, T smooth", "T dz",
        "T d = exp(z - m) / s; if (col == t) d -= keep;"
        " dz = (d - smooth) * wg;", "mt_cross_entropy_backward"),
    # mask = scale where u >= p, else 0; y = x * mask
    "dropout": lambda xp: xp.ElementwiseKernel(
        "float32 u, T x, float32 p, T scale", "T y, T mask",
        "mask = u >= p ? scale : (T)0; y = x * mask;", "mt_dropout"),
    # attention's scores scaled, and masked where the (broadcast) mask is False: s = s * scale,
    # then NEG
    "scale_and_mask": lambda xp: xp.ElementwiseKernel(
        "bool allowed, T scale, T fill", "T s", "s = allowed ? s * scale : fill;",
        "mt_scale_and_mask"),
    # ReLU's backward from its output: dx = dy * (y > 0), the product with 1 or 0 as NumPy's with a
    # bool
    "relu_backward": lambda xp: xp.ElementwiseKernel(
        "T dy, T y", "T dx", "dx = dy * (T)(y > (T)0);", "mt_relu_backward"),
    # Adam in place, the operations of optim.Adam._update in its order; --fmad=false keeps each
    # multiply and add rounded on its own, as NumPy's separate in-place operations are
    "adam": lambda xp: xp.ElementwiseKernel(
        "T g, T b1, T one_minus_b1, T b2, T one_minus_b2, T eps_bc2, T step, T decay",
        "T p, T m, T v",
        "m = m * b1 + g * one_minus_b1;"
        " v = v * b2 + g * g * one_minus_b2;"
        " p = p * decay + m / (sqrt(v) + eps_bc2) * step;", "mt_adam", options=("--fmad=false",)),
    # the same, its 7 numbers read from device memory s (7,), in Adam.update_numbers' order
    "adam_from": lambda xp: xp.ElementwiseKernel(
        "T g, raw T s", "T p, T m, T v",
        "m = m * s[0] + g * s[1];"
        " v = v * s[2] + g * g * s[3];"
        " p = p * s[6] + m / (sqrt(v) + s[4]) * s[5];", "mt_adam_from", options=("--fmad=false",)),
}


def _kernel(name):
    """The ElementwiseKernel `name`, built on first use (CuPy compiles it per dtype)."""
    if name not in _cache:
        _cache[name] = _BUILD[name](backend.xp)
    return _cache[name]


# -------------------------------------------------------------------- the fused ops
def forward_rows(name, x, out=None):
    """Row kernel `name` (softmax_rows, log_softmax_rows) over the last axis of array x, no graph,
    into a new array or `out` (out=x is safe: each thread reads an entry before writing it, after
    the max pass)."""
    xp = backend.xp
    n = x.shape[-1]
    y = out if out is not None and out.flags.c_contiguous else xp.empty(x.shape, dtype=x.dtype)
    _launch(name, x.size // n, n, xp.ascontiguousarray(x), y, np.int64(n))
    if out is not None and y is not out:
        out[...] = y  # a strided `out`: copied in
    return y if out is None else out


def backward_rows(name, y, dy, out=None, scale=1.0):
    """Row kernel `name`_backward_rows (softmax, log_softmax) over the last axis: dx from the output
    y and its gradient dy, contiguous arrays (..., n), no graph, into a new array or `out` (out=dy
    is safe: each thread reads its entries of dy before it writes them); times `scale` after
    (attention's 1/sqrt(d_k): the multiplication NumPy does after, in the same launch)."""
    n = y.shape[-1]
    dx = backend.xp.empty_like(y) if out is None else out                # (..., n)
    _launch(name + "_backward_rows", y.size // n, n, y, dy, dx, np.int64(n), y.dtype.type(scale))
    return dx


def scale_and_mask(s, allowed, scale, fill):
    """Attention's scores in place, one launch: s * scale where `allowed` (a boolean mask that
    broadcasts to s), else fill; NumPy's two passes (s *= scale; s = fill where not allowed) give
    the same numbers."""
    _kernel("scale_and_mask")(allowed, s.dtype.type(scale), s.dtype.type(fill), s)
    return s


def relu(x):
    """Fuses functional.relu's backward (ops.relu: dy * (y > 0), a comparison and a product) into
    one launch."""
    y = backend.xp.maximum(x.data, 0)
    return make_node(y, (x,), lambda g: (relu_backward(g, y),), "relu")


def relu_backward(dy, y):
    """ReLU's dx = dy * (y > 0) in one launch (CuPy's comparison and product: two)."""
    return _kernel("relu_backward")(dy, y)


def _row_op(x, name):
    """softmax or log_softmax over the last axis: kernel `name`_rows forward, `name`_backward_rows
    back."""
    xp = backend.xp
    y = forward_rows(name + "_rows", x.data)                              # y (..., n), contiguous
    return make_node(
        y, (x,), lambda g: (backward_rows(name, y, xp.ascontiguousarray(g, dtype=y.dtype)),), name)


def softmax(x):
    """Fuses functional.softmax (last axis; plain form plain.softmax): softmax_rows,
    softmax_backward_rows."""
    return _row_op(x, "softmax")


def log_softmax(x):
    """Fuses functional.log_softmax (last axis; plain form plain.log_softmax): log_softmax_rows, its
    _backward_rows."""
    return _row_op(x, "log_softmax")


def cross_entropy(logits, z, t, w, n, eps, return_count):
    """Fuses functional.cross_entropy after its checks (plain form: plain.cross_entropy): one thread
    block per row (max, sum of exp, target and mean logit; (N,) max and sum kept), backward one
    ElementwiseKernel. z: (N, V) logits, t: (N,) ids (0 where ignored), w: (N,) 1/n or 0, n: counted
    tokens, eps: smoothing."""
    xp = backend.xp
    N, V = z.shape
    dt = z.dtype.type
    z = xp.ascontiguousarray(z)                                           # (N, V)
    t = xp.ascontiguousarray(t, dtype=xp.int64)                           # (N,)
    row_loss, row_max, row_sum = (xp.empty(N, dtype=z.dtype) for _ in range(3))  # (N,) each
    _launch("cross_entropy_rows", N, V, z, t, np.int64(V), dt(1.0 - eps), dt(eps),
            row_loss, row_max, row_sum)
    loss = xp.asarray((row_loss * w).sum(), dtype=z.dtype)               # ()

    def backward(g):
        dz = _kernel("cross_entropy_backward")(
            z, row_max[:, None], row_sum[:, None], t[:, None], xp.arange(V, dtype=xp.int64),
            (w * g).astype(z.dtype, copy=False)[:, None], dt(1.0 - eps), dt(eps / V))  # (N, V)
        return (dz.reshape(logits.shape),)
    out = make_node(loss, (logits,), backward, "cross_entropy")
    return (out, int(n)) if return_count else out


def layer_norm(x, gamma, beta, eps):
    """Fuses functional.layer_norm (plain form: plain.layer_norm): one thread block per row for
    mean, 1/sigma, xhat and y; backward one per row for dx, column sums for dgamma = sum(dy * xhat)
    and dbeta = sum(dy)."""
    xp = backend.xp
    D = x.shape[-1]
    dt = x.dtype.type
    x2 = xp.ascontiguousarray(x.data).reshape(-1, D)                     # (N, D)
    g1 = xp.ascontiguousarray(gamma.data).reshape(D)                      # (D,)
    N = x2.shape[0]
    xhat = xp.empty_like(x2)                                              # (N, D)
    y = xp.empty_like(x2)                                                 # (N, D)
    rstd = xp.empty(N, dtype=x.dtype)                                     # (N,) 1 / sigma
    _launch("layer_norm_rows", N, D, x2, g1, xp.ascontiguousarray(beta.data).reshape(D),
            np.int64(D), dt(1.0 / D), dt(eps), xhat, rstd, y)

    def backward(gy):
        dx = dgamma = dbeta = None
        gy = xp.ascontiguousarray(gy, dtype=x.dtype).reshape(-1, D)      # (N, D)
        if gamma.requires_grad:                                           # (D,) sum of dy * xhat
            dgamma = column_sum(gy, xhat, into=grad_into(gamma))
        if beta.requires_grad:                                            # (D,) sum of dy
            dbeta = column_sum(gy, into=grad_into(beta))
        if x.requires_grad:
            dx = xp.empty_like(gy)                                        # (N, D)
            _launch("layer_norm_backward_rows", N, D, gy, xhat, rstd, g1, np.int64(D), dt(1.0 / D),
                    dx)
            dx = dx.reshape(x.shape)
        return dx, dgamma, dbeta
    return make_node(y.reshape(x.shape), (x, gamma, beta), backward, "layer_norm")


def dropout(x, p):
    """Fuses functional.dropout (plain form: plain.dropout): one ElementwiseKernel makes the mask
    and the output from the same float32 uniforms the NumPy path draws from backend.rng() (seeding
    unchanged)."""
    u = backend.rng().random(x.shape, dtype=np.float32)                   # (...,) as the plain path
    y, mask = _kernel("dropout")(u, x.data, np.float32(p), x.dtype.type(1.0 / (1.0 - p)))
    return make_node(y, (x,), lambda g: (g * mask,), "dropout")


def column_sum(a, b=None, into=None):
    """The sums down the columns of a (N, D), or of a * b, as a (D,) array: the bias gradients
    (linear's, LayerNorm's beta) and LayerNorm's dgamma; added into `into` (a contiguous (D,) array)
    where given, and then None (a leaf's gradient buffer, tensor.grad_into: the engine's add, done
    by the last block). CuPy's sum over axis 0 was a large share of the small step on the GPU
    (benchmarks/README.md, 'The GPU run'; our reading: each column read down on its own, a memory
    line a number). Here one launch: 32 columns a block, over chunks of rows, and the last block of
    each 32 columns adds the chunks' sums in order (kernel_source's column_sum): no atomics in the
    sums, the same bits every run, launches set by N and D alone. Its blocks count themselves in
    counters() (one launch at a time per GPU, as every caller here runs: each on the stream of the
    work around it, in order)."""
    xp = backend.xp
    a = xp.ascontiguousarray(a)
    N, D = a.shape
    if N == 0:
        return xp.zeros(D, dtype=a.dtype) if into is None else None
    chunk = column_chunk(N)
    chunks = -(-N // chunk)
    parts = xp.empty((chunks, D), dtype=a.dtype)                  # (chunks, D)
    out = xp.empty(D, dtype=a.dtype) if into is None else into    # (D,)
    product = b is not None
    b = xp.ascontiguousarray(b, dtype=a.dtype) if product else a  # (N, D); read only where product
    tiles = -(-D // 32)
    done = counters()
    for first in range(0, tiles, COUNTERS):                       # COUNTERS x 32 columns a launch
        _raw("column_sum", a.dtype)((min(COUNTERS, tiles - first), chunks), (32, 8),
                                    (a, b, parts, out, done, np.int64(N), np.int64(D),
                                     np.int64(32 * first), np.int64(chunk), np.int64(product),
                                     np.int64(into is not None)))
    return out if into is None else None


COUNTERS = 1 << 16  # column_sum's counters of finished blocks: 2,097,152 columns a launch (256 KB)
_counters = {}          # GPU id -> its (COUNTERS,) uint32 counters, all 0 between launches


def counters():
    """This GPU's counters for column_sum, made once and kept for good: a CUDA graph that recorded a
    launch holds their address."""
    xp = backend.xp
    key = xp.cuda.Device().id
    if key not in _counters:
        _counters[key] = xp.zeros(COUNTERS, dtype=xp.uint32)
    return _counters[key]


def column_chunk(n):
    """Rows per chunk of column_sum's first launch: at most 64 chunks, at least 8 rows each."""
    return max(8, -(-n // 64))


def column_sum_order(a):
    """column_sum of a NumPy (N, D) array, added in the kernel's order (its numbers, for normal
    ones: the reference its GPU test and lesson 11's exercise hold it to). Per chunk, thread row k
    adds rows k, k + 8, ... of the chunk from zero; the 8 partial sums are added in order; then the
    chunks, from zero."""
    N, D = a.shape
    total = np.zeros(D, a.dtype)
    chunk = column_chunk(N)
    for start in range(0, N, chunk):
        stop = min(start + chunk, N)
        part = np.zeros((8, D), a.dtype)                   # (8, D): a block's 8 thread rows
        for k in range(8):
            for r in range(start + k, stop, 8):
                part[k] += a[r]
        for k in range(1, 8):
            part[0] += part[k]                             # thread row 0, in order
        total += part[0]
    return total


def embedding_backward(shape, ids, g):
    """The embedding's weight gradient, (V, D) zeros with the rows of g (N, D) added at ids (N,), in
    the order np.add.at adds them (functional._scatter_rows's CPU path: the same bits): the ids
    sorted stably, then embedding_backward_rows, one block per run of one id. No sync and shapes set
    by N alone (a CUDA graph can hold it). Replaces backend.sorted_scatter_add's log2(N) rounds over
    the whole (N, D)."""
    xp = backend.xp
    N, D = g.shape
    dw = xp.zeros(shape, dtype=g.dtype)                # (V, D)
    if N == 0:
        return dw
    ids = xp.ascontiguousarray(ids, dtype=xp.int64)    # (N,)
    order = xp.argsort(ids, kind="stable")             # (N,) g's rows, sorted by id
    sid = ids[order]                                   # (N,) sorted ids
    run_end = xp.searchsorted(sid, sid, side="right")  # (N,) where each one's run ends
    _launch("embedding_backward_rows", N, D, xp.ascontiguousarray(g), order, sid, run_end, dw,
            np.int64(D))
    return dw


def adam(p, g, m, v, numbers):
    """Fuses optim.Adam._update on flat arrays (plain form: plain.adam): one ElementwiseKernel reads
    p, g, m, v once and writes p, m, v in place (no scratch buffer), with _update's numbers
    (Adam.update_numbers)."""
    _kernel("adam")(g, *(p.dtype.type(c) for c in numbers), p, m, v)


def adam_from(p, g, m, v, scalars):
    """adam with its numbers in device memory: scalars (7,) of p's dtype, Adam.update_numbers cast.
    A replayed CUDA graph re-runs a kernel with the arguments it was recorded with, so t and lr,
    which change every step, must reach it through memory the host rewrites before each replay. The
    same bits as adam."""
    _kernel("adam_from")(g, scalars, p, m, v)
