"""Fused ops: each one graph node whose backward was derived by hand (derivations in lessons/04).

softmax, log_softmax, cross_entropy (label smoothing, ignore_index), layer_norm, relu, dropout,
embedding and linear. Fusing saves graph nodes, temporaries and time; the tests check every op
against the same computation composed of elementary Tensor ops, their plain forms in plain.py. Each
docstring says what the op computes, then under `Backward:` its derivative and the derivation. The
NumPy below runs unchanged on CuPy; on the GPU each op hands over to its whole-op alternative in
fast/ (`if fast.on(x): return fast.softmax(x)`: one seam line), which must give these numbers.
Left out: gradients of integer inputs (targets, ids).
"""

import numpy as np

from . import backend, fast
from .checks import check_ids, check_real, check_target
from .profiler import traced
from .tensor import Tensor, data_of, make_node


def _check_input(x, op, axis=None, name="input"):
    """x is a floating Tensor (with `axis`, one of its axes): else one sentence naming the op."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: the {name} must be a Tensor, got {type(x).__name__} "
                        "(wrap an array: mt.tensor(a))")
    if x.dtype.kind != "f":
        raise TypeError(f"{op}: the {name} must hold floating-point numbers, got dtype {x.dtype}")
    if isinstance(axis, int) and not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of {x.ndim} dimensions")


# -------------------------------------------------------------------- the softmax core
def softmax_array(x, axis=-1, out=None):
    """softmax(x) over `axis` of a plain array, no graph: exp(x - max) / sum(exp(x - max)).

    The one stable softmax of the package: softmax, attention and search call it. out=x
    overwrites x. On the GPU (last axis) the fused softmax_rows kernel computes it.
    Plain form: plain.softmax."""
    if fast.on(x) and axis in (-1, x.ndim - 1):
        return fast.forward_rows("softmax_rows", x, out)
    xp = backend.xp
    y = xp.subtract(x, x.max(axis=axis, keepdims=True), out=out)    # the largest entry is 0
    xp.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return y


def log_softmax_array(x, axis=-1, out=None):
    """log softmax(x) over `axis` of a plain array, no graph: (x - max) - log(sum(exp(x - max))).

    log_softmax and search call it; out=x overwrites x. On the GPU (last axis) the fused
    log_softmax_rows kernel computes it. Plain form: plain.log_softmax."""
    if fast.on(x) and axis in (-1, x.ndim - 1):
        return fast.forward_rows("log_softmax_rows", x, out)
    xp = backend.xp
    y = xp.subtract(x, x.max(axis=axis, keepdims=True), out=out)    # the largest entry is 0
    y -= xp.log(xp.exp(y).sum(axis=axis, keepdims=True))
    return y


# -------------------------------------------------------------------- softmax
@traced
def softmax(x, axis=-1):
    """y = softmax(x) over `axis`: exp(x - m) / sum(exp(x - m)), m = max(x) (the shift cancels; it
    keeps exp from overflowing), as one graph node. Plain form: plain.softmax.

    Backward: dx = y * (dy - sum(dy * y, axis)). dy_j/dx_i = y_j (delta_ij - y_i), so
    dx_i = sum_j dy_j y_j (delta_ij - y_i) = y_i (dy_i - sum_j dy_j y_j).
    """
    _check_input(x, "softmax", axis)
    if fast.on(x) and axis in (-1, x.ndim - 1):
        return fast.softmax(x)
    xp = backend.xp
    y = softmax_array(x.data, axis)                                   # a new array: we own it

    def backward(g):
        dx = g * y
        s = dx.sum(axis=axis, keepdims=True)                          # sum(dy * y)
        xp.subtract(g, s, out=dx)
        dx *= y
        return (dx,)
    return make_node(y, (x,), backward, "softmax")


@traced
def log_softmax(x, axis=-1):
    """y = log softmax(x) over `axis`: x - logsumexp(x), as one graph node.
    Plain form: plain.log_softmax.

    Backward: dx = dy - exp(y) * sum(dy, axis). d logsumexp(x) / dx_j = softmax(x)_j = exp(y_j), so
    dy_i/dx_j = delta_ij - exp(y_j) and
    dx_j = sum_i dy_i (delta_ij - exp(y_j)) = dy_j - exp(y_j) sum_i dy_i.
    """
    _check_input(x, "log_softmax", axis)
    if fast.on(x) and axis in (-1, x.ndim - 1):
        return fast.log_softmax(x)
    xp = backend.xp
    y = log_softmax_array(x.data, axis)                               # a new array: we own it

    def backward(g):
        dx = xp.exp(y)                                                # softmax(x)
        dx *= g.sum(axis=axis, keepdims=True)
        return (xp.subtract(g, dx, out=dx),)
    return make_node(y, (x,), backward, "log_softmax")


# -------------------------------------------------------------------- cross-entropy
@traced
def cross_entropy(logits, target, ignore_index=None, label_smoothing=0.0, return_count=False):
    """The mean over the n_tokens rows whose target is not `ignore_index` of
    -sum_j q_j log softmax(z)_j, q = (1-eps) onehot(target) + eps/V (label smoothing eps).
    Plain form: plain.cross_entropy.

    logits z: (..., V); target: integer ids (...), a Tensor or an array, range-checked on the host
    (a device target is not: that would sync). return_count=True returns (loss, n_tokens),
    n_tokens an int. Per row, loss_row = -(1-eps) logp[target] - (eps/V) sum_j logp_j
    = lse(z) - (1-eps) z[target] - eps mean(z):
    one pass over the vocabulary, where a single exp of the shifted logits gives both lse and p
    (kept for backward), so no softmax_array (it gives p alone) and no (N, V) one-hot matrix.
    All-ignored batches give loss 0 and zero gradient.

    Backward: dz = (p - q) / n_tokens on counted rows, 0 on ignored rows, p = softmax(z):
    d lse / dz_j = p_j, and sum_j q_j = 1, so d loss_row / dz_j = p_j - q_j.
    """
    xp = backend.xp
    _check_input(logits, "cross_entropy", -1, "logits")
    V = logits.shape[-1]
    check_real("cross_entropy", "label_smoothing", label_smoothing, 0.0, 1.0, high_open=False)
    if ignore_index is not None and (isinstance(ignore_index, bool)
                                     or not isinstance(ignore_index, (int, np.integer))):
        raise TypeError("cross_entropy: ignore_index must be an integer id or None, "
                        f"got {ignore_index!r}")
    eps = float(label_smoothing)
    t = data_of(target)
    t = np.asarray(t) if backend.device_of(t) == "cpu" else t  # lists, numbers, NumPy scalars
    check_target(t, logits.shape[:-1], V, ignore_index)
    t = backend.asarray(t).reshape(-1)                         # (N,)
    z = logits.data.reshape(-1, V)                             # (N, V)
    dtype = z.dtype
    rows = xp.arange(t.shape[0])
    valid = (t != ignore_index) if ignore_index is not None else xp.ones(t.shape, dtype=bool)
    t = xp.where(valid, t, 0)                                  # a safe id for ignored rows
    n = valid.sum(dtype=dtype)                                 # counted tokens, on the device
    w = valid.astype(dtype) / xp.maximum(n, 1)                 # (N,) 1/n, or 0 for ignored rows
    if fast.on(z):
        return fast.cross_entropy(logits, z, t, w, n, eps, return_count)
    p = z - z.max(axis=1, keepdims=True)                       # (N, V) shifted: a row's max is 0
    z_t = p[rows, t]                                           # (N,) each row's target logit
    z_mean = p.mean(axis=1) if eps else 0.0                    # (N,)
    xp.exp(p, out=p)                                           # (N, V) exp: softmax times s
    s = p.sum(axis=1)                                          # (N,)
    row_loss = xp.log(s) - (1.0 - eps) * z_t - eps * z_mean    # (N,)
    loss = xp.asarray((row_loss * w).sum(), dtype=dtype)       # ()

    def backward(g):
        c = w * g                                              # (N,) g/n per counted row, else 0
        dz = p                                                 # the saved exp, reused in place
        dz *= (c / s)[:, None]                                 # c * softmax(z)
        if eps:
            dz -= (c * (eps / V))[:, None]                     # - c * eps/V
        dz[rows, t] -= c * (1.0 - eps)                         # - c * (1 - eps) at the targets
        return (dz.reshape(logits.shape),)
    out = make_node(loss, (logits,), backward, "cross_entropy")
    return (out, int(n)) if return_count else out


# -------------------------------------------------------------------- layer normalisation
@traced
def layer_norm(x, gamma, beta, eps=1e-6):
    """y = gamma * xhat + beta over the last axis (size D): xhat = (x - mu) / sigma, mu = mean(x),
    sigma = sqrt(var(x) + eps). Plain form: plain.layer_norm.
    Note: the paper does not give eps; 1e-6 as in the tensor2tensor reference code.

    Backward: dx = (1/sigma) * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma;
    dgamma = sum(dy * xhat), dbeta = sum(dy). With
    dxhat_i/dx_j = (delta_ij - 1/D - xhat_i xhat_j / D) / sigma (mu and var both depend on every
    x_j), dx_j = (1/sigma) (g_j - mean(g) - xhat_j mean(g * xhat)). dgamma and dbeta are summed
    over all leading axes (every position shares gamma and beta).
    """
    _check_input(x, "layer_norm")
    if x.shape[-1:] != gamma.shape:
        raise ValueError(f"layer_norm: input of shape {tuple(x.shape)} does not end in "
                         f"d={gamma.shape[0]} (gamma shape {gamma.shape})")
    if fast.on(x, gamma, beta):
        return fast.layer_norm(x, gamma, beta, eps)
    xp = backend.xp
    D = x.shape[-1]
    x2 = x.data.reshape(-1, D)                                        # (N, D)
    mu = x2.mean(axis=1, keepdims=True)                               # (N, 1)
    xhat = x2 - mu                                                    # (N, D) centred ...
    var = xp.einsum("nd,nd->n", xhat, xhat)[:, None] / D              # (N, 1) mean of squares
    rstd = 1.0 / xp.sqrt(var + eps)                                   # (N, 1) 1 / sigma
    xhat *= rstd                                                      # ... and scaled: xhat
    y = xhat * gamma.data                                             # (N, D)
    y += beta.data

    def backward(gy):
        gy = gy.reshape(-1, D)                                        # (N, D)
        dgamma = xp.einsum("nd,nd->d", gy, xhat)                      # (D,) sum of dy * xhat
        dbeta = gy.sum(axis=0)                                        # (D,)
        g = gy * gamma.data                                           # (N, D)
        mean_g = g.mean(axis=1, keepdims=True)                        # (N, 1)
        mean_gx = xp.einsum("nd,nd->n", g, xhat)[:, None] / D         # (N, 1) mean(g * xhat)
        dx = g - mean_g - xhat * mean_gx                              # (N, D)
        dx *= rstd                                                    # times 1 / sigma
        return dx.reshape(x.shape), dgamma, dbeta
    return make_node(y.reshape(x.shape), (x, gamma, beta), backward, "layer_norm")


# -------------------------------------------------------------------- relu and dropout
@traced
def relu(x):
    """max(x, 0): Tensor.relu (ops.relu); on the GPU fast.relu, its backward in one launch."""
    if fast.on(x):
        return fast.relu(x)
    return x.relu()


def dropout(x, p, training=True):
    """y = x * mask, mask = keep / (1 - p), keep ~ Bernoulli(1 - p) drawn from backend.rng().

    Inverted dropout: survivors are scaled by 1/(1-p) at training time, so E[y] = x and evaluation
    needs no rescaling. The identity (the same Tensor) when not training or p == 0.
    Plain form: plain.dropout.

    Backward: dx = dy * mask (y is linear in x, the mask a constant).
    """
    _check_input(x, "dropout")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must lie in [0, 1), got {p}")
    if not training or p == 0:
        return x
    if fast.on(x):
        return fast.dropout(x, p)
    keep = backend.rng().random(x.shape, dtype=np.float32) >= p      # (...,) Bernoulli(1 - p)
    mask = keep * x.dtype.type(1.0 / (1.0 - p))                      # keep / (1 - p), in x's dtype
    return make_node(x.data * mask, (x,), lambda g: (g * mask,), "dropout")


# -------------------------------------------------------------------- embedding and linear
def _scatter_rows(shape, ids, g):
    """A zero (V, D) matrix with the rows of g (N, D) added at ids (N,); repeated ids add up. On the
    CPU by np.add.at over the flattened matrix (NumPy's fast path is the 1-D one); on the GPU
    fast.embedding_backward in the same order (the CPU's bits), else (fused off)
    backend.scatter_add: the same bits every run, where atomic adds would land in the hardware's
    order."""
    if fast.on(g):
        return fast.embedding_backward(shape, backend.xp.asarray(ids), g)
    out = backend.xp.zeros(shape, dtype=g.dtype)                      # (V, D)
    if backend.device_of(out) == "gpu":
        return backend.scatter_add(out, ids, g)
    D = shape[1]
    flat = (ids.astype(np.intp)[:, None] * D + np.arange(D)).reshape(-1)  # (N*D,) element indices
    np.add.at(out.reshape(-1), flat, g.reshape(-1))
    return out


@traced
def embedding(weight, ids):
    """weight[ids]: the rows of weight (V, D) at integer ids (...), an array or a Tensor
    -> (..., D).

    Ids are range-checked when they are on the host (a device array is not: that would sync).
    Plain form: weight[ids], Tensor indexing (ops.getitem).

    Backward: dweight[v] = the sum of dy over the positions whose id is v (a scatter-add: repeated
    ids add up).
    """
    ids = data_of(ids)
    # lists, numbers: checked on the host
    ids = np.asarray(ids) if backend.device_of(ids) == "cpu" else ids
    if ids.dtype.kind not in "iu":
        raise TypeError(f"embedding: ids must be integers, got dtype {ids.dtype}")
    V, D = weight.shape
    check_ids(ids, V)
    flat = ids.reshape(-1)  # (N,) kept where they came: the backward sorts them there
    ids = backend.asarray(ids)

    def backward(g):
        return (_scatter_rows((V, D), flat, g.reshape(-1, D)),)
    return make_node(weight.data[ids], (weight,), backward, "embedding")  # (..., D)


@traced
def linear(x, weight, bias=None):
    """y = x W + b: x (..., d_in), W (d_in, d_out), b (d_out,) or None -> (..., d_out).
    Plain form: plain.linear.

    One GEMM on (N, d_in) with N the product of the leading axes (one big GEMM is faster than a
    batched one), and the bias gradient is a column sum, with no broadcast to undo.

    Backward: dx = dy W^T, dW = x^T dy, db = sum(dy) over the rows (y is linear in each of x, W, b).
    """
    d_in, d_out = weight.shape
    _check_input(x, "linear")
    if x.shape[-1:] != (d_in,):
        raise ValueError(f"linear: input of shape {tuple(x.shape)} does not end in d_in={d_in} "
                         f"(weight shape {tuple(weight.shape)})")
    if fast.on(x, weight):
        return fast.linear(x, weight, bias)
    x2 = x.data.reshape(-1, d_in)                                     # (N, d_in)
    y = x2 @ weight.data                                              # (N, d_out)
    if bias is not None:
        y += bias.data

    def backward(g):
        g = g.reshape(-1, d_out)                                      # (N, d_out)
        dx = (g @ weight.data.T).reshape(x.shape) if x.requires_grad else None
        dw = x2.T @ g if weight.requires_grad else None               # (d_in, d_out)
        if bias is None:
            return dx, dw
        return dx, dw, g.sum(axis=0)                                  # (d_out,)
    parents = (x, weight) if bias is None else (x, weight, bias)
    return make_node(y.reshape(x.shape[:-1] + (d_out,)), parents, backward, "linear")
