"""Fused CuPy kernels for softmax, log-softmax, LayerNorm, cross-entropy, dropout and Adam (lesson 11).

functional.py (its softmax core too, through forward_rows) and optim.py call these only when `active()`.
Elsewhere their NumPy code runs, whose numbers every kernel must give (tests/test_kernels.py); plain.py
holds the plain forms of both. The CUDA C is compiled by CuPy on first use, never at import, and kept
in `_cache`. CuPy compiles with -ftz=true: subnormal results flush to zero, so "the same bits as NumPy"
holds for normal numbers only. On an H200 each is 1.4-4x faster than its plain form. Left out: float16,
softmax over another axis (both take the NumPy path), warp-shuffle reductions (lesson 11 says why).
"""
import math

import numpy as np

from . import backend
from .tensor import data_of, make_node

MAX_BLOCK = 256                           # threads per block at most (a power of two)
_CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_cache = {}                               # name or (name, dtype) -> a compiled CuPy kernel


def active(*arrays):
    """True when the fused kernels run: the CuPy backend, backend.fused on, the arrays (or Tensors) non-empty
    CuPy arrays, all float32 or all float64. The backend is checked first: on NumPy it costs nothing."""
    return (backend.device == "gpu" and backend.fused and
            all(backend.device_of(a) == "gpu" and a.dtype in _CTYPES and a.dtype == arrays[0].dtype and a.size
                for a in map(data_of, arrays)))


# -------------------------------------------------------------------- CUDA C of the row kernels
# T is float or double: a typedef put in front of every kernel (one compilation per dtype).
_COMMON = r"""
__device__ T max2(T a, T b) { return a > b ? a : b; }

// The sum (largest=false) or maximum (largest=true) of v over the block's threads, for every thread: a
// tree in shared memory buf (blockDim.x a power of two; each step folds the upper half onto the lower).
__device__ T block_reduce(T v, T* buf, bool largest) {
    buf[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const T other = buf[threadIdx.x + half];
            buf[threadIdx.x] = largest ? max2(buf[threadIdx.x], other) : buf[threadIdx.x] + other;
        }
        __syncthreads();
    }
    const T result = buf[0];
    __syncthreads();                                   // all have read buf[0] before buf is reused
    return result;
}
__device__ T block_sum(T v, T* buf) { return block_reduce(v, buf, false); }
__device__ T block_max(T v, T* buf) { return block_reduce(v, buf, true); }
"""

SOFTMAX = r"""
// y = softmax(x) over rows of n numbers: one block of threads per row (blockIdx.x), each thread
// striding along the row; block_max and block_sum combine the threads' partial results.
extern "C" __global__ void softmax_rows(const T* x, T* y, const long long n) {
    __shared__ T buf[MAX_BLOCK];
    const T* xr = x + blockIdx.x * n;                  // this block's row, in and out
    T* yr = y + blockIdx.x * n;
    T m = xr[0];                                       // pass 1: m = max(x)
    for (long long j = threadIdx.x; j < n; j += blockDim.x) m = max2(m, xr[j]);
    m = block_max(m, buf);
    T s = 0;                                           // pass 2: y = exp(x - m), s = sum(y)
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        yr[j] = exp(xr[j] - m);
        s += yr[j];
    }
    s = block_sum(s, buf);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) yr[j] /= s;   // pass 3: y /= s
}
"""

_ROW_KERNELS = {"softmax_rows": SOFTMAX, "log_softmax_rows": r"""
// y = (x - m) - log(sum(exp(x - m))), m = max(x), per row: one block per row, as softmax_rows.
extern "C" __global__ void log_softmax_rows(const T* x, T* y, const long long n) {
    __shared__ T buf[MAX_BLOCK];
    const T* xr = x + blockIdx.x * n;
    T* yr = y + blockIdx.x * n;
    T m = xr[0];
    for (long long j = threadIdx.x; j < n; j += blockDim.x) m = max2(m, xr[j]);
    m = block_max(m, buf);
    T s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) { yr[j] = xr[j] - m; s += exp(yr[j]); }
    const T lse = log(block_sum(s, buf));
    for (long long j = threadIdx.x; j < n; j += blockDim.x) yr[j] -= lse;
}
""", "softmax_backward_rows": r"""
// dx = y * (dy - sum(dy * y)) per row (softmax's backward): one block per row.
extern "C" __global__ void softmax_backward_rows(const T* y, const T* dy, T* dx, const long long n) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * n;
    T s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) s += dy[row + j] * y[row + j];
    s = block_sum(s, buf);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) dx[row + j] = (dy[row + j] - s) * y[row + j];
}
""", "log_softmax_backward_rows": r"""
// dx = dy - exp(y) * sum(dy) per row (log_softmax's backward): one block per row.
extern "C" __global__ void log_softmax_backward_rows(const T* y, const T* dy, T* dx, const long long n) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * n;
    T s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) s += dy[row + j];
    s = block_sum(s, buf);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) dx[row + j] = dy[row + j] - exp(y[row + j]) * s;
}
""", "layer_norm_rows": r"""
// Per row of d: mean, then xhat = (x - mean) * rstd with rstd = 1 / sqrt(sum((x - mean)^2) / d + eps),
// y = xhat * gamma + beta. One block per row: two block sums (the mean, the sum of squares).
extern "C" __global__ void layer_norm_rows(const T* x, const T* gamma, const T* beta, const long long d,
                                           const T inv_d, const T eps, T* xhat, T* rstd, T* y) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * d;
    T s = 0;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) s += x[row + j];
    const T mean = block_sum(s, buf) / d;
    T sq = 0;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const T c = x[row + j] - mean;
        xhat[row + j] = c;
        sq += c * c;
    }
    const T r = 1 / sqrt(block_sum(sq, buf) * inv_d + eps);
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const T h = xhat[row + j] * r;
        xhat[row + j] = h;
        y[row + j] = h * gamma[j] + beta[j];
    }
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}
""", "layer_norm_backward_rows": r"""
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, per row of d: one block per row.
extern "C" __global__ void layer_norm_backward_rows(const T* dy, const T* xhat, const T* rstd, const T* gamma,
                                                    const long long d, const T inv_d, T* dx) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * d;
    T a = 0, b = 0;                                    // a = sum(g), b = sum(g * xhat)
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const T g = dy[row + j] * gamma[j];
        a += g;
        b += g * xhat[row + j];
    }
    const T mean_g = block_sum(a, buf) * inv_d;
    const T mean_gx = block_sum(b, buf) * inv_d;
    const T r = rstd[blockIdx.x];
    for (long long j = threadIdx.x; j < d; j += blockDim.x)
        dx[row + j] = (dy[row + j] * gamma[j] - mean_g - xhat[row + j] * mean_gx) * r;
}
""", "cross_entropy_rows": r"""
// Per row of v logits z with target t: m = max(z), s = sum(exp(z - m)) (both kept for backward) and
// loss = log(s) - keep * (z[t] - m) - eps * mean(z - m), keep = 1 - eps (the mean only if eps > 0).
// One block per row. A target outside [0, v) gives a NaN loss instead of a read outside the row (a host
// target is refused before, as on the plain path; a device target is not checked: the plain path wraps it).
extern "C" __global__ void cross_entropy_rows(const T* z, const long long* target, const long long v,
                                              const T keep, const T eps, T* row_loss, T* row_max, T* row_sum) {
    __shared__ T buf[MAX_BLOCK];
    const T* zr = z + blockIdx.x * v;
    T m = zr[0];
    for (long long j = threadIdx.x; j < v; j += blockDim.x) m = max2(m, zr[j]);
    m = block_max(m, buf);
    T s = 0, total = 0;
    for (long long j = threadIdx.x; j < v; j += blockDim.x) { s += exp(zr[j] - m); total += zr[j] - m; }
    s = block_sum(s, buf);
    total = block_sum(total, buf);
    if (threadIdx.x == 0) {
        const long long t = target[blockIdx.x];
        T loss = (t >= 0 && t < v) ? log(s) - keep * (zr[t] - m) : (T)nan("");
        if (eps != 0) loss -= eps * (total / v);
        row_loss[blockIdx.x] = loss;
        row_max[blockIdx.x] = m;
        row_sum[blockIdx.x] = s;
    }
}
"""}


def source(name, dtype=np.float32):
    """The CUDA C that CuPy compiles for row kernel `name` and dtype: source("softmax_rows")."""
    head = f"typedef {_CTYPES[np.dtype(dtype)]} T;\n#define MAX_BLOCK {MAX_BLOCK}\n"
    return head + _COMMON + _ROW_KERNELS[name]


def _launch(name, rows, n, *args):
    """Run row kernel `name` on `rows` rows of n numbers, one block of 32 to MAX_BLOCK threads (a power
    of two) per row. args: contiguous arrays, then NumPy scalars of the C types (np.int64: long long)."""
    key = (name, args[0].dtype.str)
    if key not in _cache:
        _cache[key] = backend.xp.RawKernel(source(name, args[0].dtype), name)
    threads = min(MAX_BLOCK, max(32, 1 << (int(n) - 1).bit_length()))
    _cache[key]((rows,), (threads,), args)


# -------------------------------------------------------------------- elementwise and reduction kernels
_BUILD = {
    # dz = (exp(z - m) / s - keep [at the target] - eps / V) * w g, over (N, V), broadcasting the rows' m, s, t, wg
    "cross_entropy_backward": lambda xp: xp.ElementwiseKernel(
        "T z, T m, T s, int64 t, int64 col, T wg, T keep, T smooth", "T dz",
        "T d = exp(z - m) / s; if (col == t) d -= keep; dz = (d - smooth) * wg;", "mt_cross_entropy_backward"),
    # mask = scale where u >= p, else 0; y = x * mask
    "dropout": lambda xp: xp.ElementwiseKernel(
        "float32 u, T x, float32 p, T scale", "T y, T mask",
        "mask = u >= p ? scale : (T)0; y = x * mask;", "mt_dropout"),
    # dgamma = sum over rows of dy * xhat, with no (N, D) product in memory
    "layer_norm_dgamma": lambda xp: xp.ReductionKernel(
        "T dy, T xhat", "T dgamma", "dy * xhat", "a + b", "dgamma = a", "0", "mt_layer_norm_dgamma"),
    # Adam in place, the operations of optim.Adam._update in its order; --fmad=false keeps each
    # multiply and add rounded on its own, as NumPy's separate in-place operations are
    "adam": lambda xp: xp.ElementwiseKernel(
        "T g, T b1, T one_minus_b1, T b2, T one_minus_b2, T eps_bc2, T step, T decay", "T p, T m, T v",
        "m = m * b1 + g * one_minus_b1;"
        " v = v * b2 + g * g * one_minus_b2;"
        " p = p * decay + m / (sqrt(v) + eps_bc2) * step;", "mt_adam", options=("--fmad=false",)),
}


def _kernel(name):
    """The ElementwiseKernel or ReductionKernel `name`, built on first use (CuPy compiles it per dtype)."""
    if name not in _cache:
        _cache[name] = _BUILD[name](backend.xp)
    return _cache[name]


# -------------------------------------------------------------------- the fused ops
def forward_rows(name, x, out=None):
    """Row kernel `name` (softmax_rows, log_softmax_rows) over the last axis of array x, no graph, into a new
    array or `out` (out=x is safe: each thread reads an entry before writing it, after the max pass)."""
    xp, n = backend.xp, x.shape[-1]
    y = out if out is not None and out.flags.c_contiguous else xp.empty(x.shape, dtype=x.dtype)
    _launch(name, x.size // n, n, xp.ascontiguousarray(x), y, np.int64(n))
    if out is not None and y is not out:
        out[...] = y                                                      # a strided `out`: copied in
    return y if out is None else out


def _row_op(x, name):
    """softmax or log_softmax over the last axis: kernel `name`_rows forward, `name`_backward_rows back."""
    xp, y = backend.xp, forward_rows(name + "_rows", x.data)              # y (..., n), contiguous
    n = y.shape[-1]

    def backward(g):
        dx = xp.empty_like(y)                                             # (..., n)
        _launch(name + "_backward_rows", y.size // n, n, y, xp.ascontiguousarray(g, dtype=y.dtype), dx, np.int64(n))
        return (dx,)
    return make_node(y, (x,), backward, name)


def softmax(x):
    """Fuses functional.softmax (last axis; plain form plain.softmax): softmax_rows, softmax_backward_rows."""
    return _row_op(x, "softmax")


def log_softmax(x):
    """Fuses functional.log_softmax (last axis; plain form plain.log_softmax): log_softmax_rows, its _backward_rows."""
    return _row_op(x, "log_softmax")


def cross_entropy(logits, z, t, w, n, eps, return_count):
    """Fuses functional.cross_entropy after its checks (plain form: plain.cross_entropy): one thread block
    per row (max, sum of exp, target and mean logit; (N,) max and sum kept), backward one ElementwiseKernel.
    z: (N, V) logits, t: (N,) ids (0 where ignored), w: (N,) 1/n or 0, n: counted tokens, eps: smoothing."""
    xp, (N, V), dt = backend.xp, z.shape, z.dtype.type
    z = xp.ascontiguousarray(z)                                           # (N, V)
    t = xp.ascontiguousarray(t, dtype=xp.int64)                           # (N,)
    row_loss, row_max, row_sum = (xp.empty(N, dtype=z.dtype) for _ in range(3))  # (N,) each
    _launch("cross_entropy_rows", N, V, z, t, np.int64(V), dt(1.0 - eps), dt(eps), row_loss, row_max, row_sum)
    loss = xp.asarray((row_loss * w).sum(), dtype=z.dtype)               # ()

    def backward(g):
        dz = _kernel("cross_entropy_backward")(
            z, row_max[:, None], row_sum[:, None], t[:, None], xp.arange(V, dtype=xp.int64),
            (w * g).astype(z.dtype, copy=False)[:, None], dt(1.0 - eps), dt(eps / V))  # (N, V)
        return (dz.reshape(logits.shape),)
    out = make_node(loss, (logits,), backward, "cross_entropy")
    return (out, int(n)) if return_count else out


def layer_norm(x, gamma, beta, eps):
    """Fuses functional.layer_norm (plain form: plain.layer_norm): one thread block per row for mean, 1/sigma,
    xhat and y; backward one per row for dx, a ReductionKernel for dgamma = sum(dy * xhat), a column sum for dbeta."""
    xp, D, dt = backend.xp, x.shape[-1], x.dtype.type
    x2 = xp.ascontiguousarray(x.data).reshape(-1, D)                     # (N, D)
    g1 = xp.ascontiguousarray(gamma.data).reshape(D)                      # (D,)
    N = x2.shape[0]
    xhat, y = xp.empty_like(x2), xp.empty_like(x2)                        # (N, D) each
    rstd = xp.empty(N, dtype=x.dtype)                                     # (N,) 1 / sigma
    _launch("layer_norm_rows", N, D, x2, g1, xp.ascontiguousarray(beta.data).reshape(D),
            np.int64(D), dt(1.0 / D), dt(eps), xhat, rstd, y)

    def backward(gy):
        dx = dgamma = dbeta = None
        gy = xp.ascontiguousarray(gy, dtype=x.dtype).reshape(-1, D)      # (N, D)
        if gamma.requires_grad:
            dgamma = _kernel("layer_norm_dgamma")(gy, xhat, axis=0).reshape(gamma.shape)  # (D,)
        if beta.requires_grad:
            dbeta = gy.sum(axis=0).reshape(beta.shape)                    # (D,)
        if x.requires_grad:
            dx = xp.empty_like(gy)                                        # (N, D)
            _launch("layer_norm_backward_rows", N, D, gy, xhat, rstd, g1, np.int64(D), dt(1.0 / D), dx)
            dx = dx.reshape(x.shape)
        return dx, dgamma, dbeta
    return make_node(y.reshape(x.shape), (x, gamma, beta), backward, "layer_norm")


def dropout(x, p):
    """Fuses functional.dropout (plain form: plain.dropout): one ElementwiseKernel makes the mask and the
    output from the same float32 uniforms the NumPy path draws from backend.rng() (seeding unchanged)."""
    u = backend.rng().random(x.shape, dtype=np.float32)                   # (...,) as the plain path
    y, mask = _kernel("dropout")(u, x.data, np.float32(p), x.dtype.type(1.0 / (1.0 - p)))
    return make_node(y, (x,), lambda g: (g * mask,), "dropout")


def adam(p, g, m, v, t, lr, betas, eps, weight_decay):
    """Fuses optim.Adam._update on flat arrays (plain form: plain.adam): one ElementwiseKernel reads p, g,
    m, v once and writes p, m, v in place (no scratch buffer), with _update's scalars computed the same way."""
    b1, b2 = betas
    bc1, bc2 = 1.0 - b1 ** t, math.sqrt(1.0 - b2 ** t)
    scalars = (b1, 1.0 - b1, b2, 1.0 - b2, eps * bc2, -lr * bc2 / bc1, 1.0 - lr * weight_decay)
    _kernel("adam")(g, *(p.dtype.type(c) for c in scalars), p, m, v)
