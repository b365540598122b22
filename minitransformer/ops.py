"""The elementary ops behind Tensor's operators and methods, each with its backward beside it.

Every op returns `make_node(output, parents, backward, name)`; `backward(g)` returns one gradient
per parent (None where none is needed) and the engine in tensor.py unbroadcasts and adds them up.
Each docstring says what the op computes, then `Backward:` its derivative, dy being g, the gradient
of the output.
Fused ops with hand-derived gradients (softmax, cross-entropy, LayerNorm, attention) live in
functional.py and attention.py.
"""
import numpy as np

from . import backend
from .profiler import traced
from .tensor import Tensor, as_tensor, make_node


def _check_device(tensors):
    """Fail at once, naming both devices, when an op mixes NumPy- and CuPy-backed tensors."""
    devs = {backend.device_of(t.data) for t in tensors}
    if len(devs) > 1:
        raise RuntimeError(
            "an op got tensors on two devices, cpu (NumPy) and gpu (CuPy); move them to one "
            "device first (make them after mt.use(...), or convert with mt.tensor(t.numpy()))")


def _as_operands(a, b, op):
    """Both operands as Tensors on one device. A number, list or array beside a floating Tensor
    takes that Tensor's dtype (as PyTorch does with scalars): a float32 graph stays float32 even
    when it meets a float64 NumPy value. Complex numbers, strings and objects are refused, naming
    the op."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if type(a.data) is not type(b.data):
            _check_device((a, b))
        return a, b
    tensor, other = (a, b) if isinstance(a, Tensor) else (b, a)
    other = _operand(other, tensor, op)
    a, b = (tensor, other) if isinstance(a, Tensor) else (other, tensor)
    if type(a.data) is not type(b.data):
        _check_device((a, b))
    return a, b


def _operand(x, like, op):
    """x (not a Tensor) as a constant Tensor for an op with Tensor `like`; see _as_operands."""
    kind = getattr(x, "dtype", None)
    kind = kind.kind if kind is not None else np.asarray(x).dtype.kind
    if kind not in "biuf":
        raise TypeError(
            f"{op}: cannot combine a {like.dtype} Tensor with a value of dtype kind {kind!r} "
            f"({type(x).__name__}); only real numbers and booleans")
    if like.dtype.kind == "f":
        return Tensor(backend.asarray(x, dtype=like.dtype))
    return as_tensor(x)                              # an integer Tensor: NumPy's promotion rules


# -------------------------------------------------------------------- elementwise binary ops
@traced
def add(a, b):
    """a + b, broadcast.
    Backward: da = dy, db = dy (the engine sums each over the axes it was broadcast along)."""
    a, b = _as_operands(a, b, "add")
    return make_node(a.data + b.data, (a, b), lambda g: (g, g), "add")


@traced
def sub(a, b):
    """a - b, broadcast.
    Backward: da = dy, db = -dy."""
    a, b = _as_operands(a, b, "sub")
    return make_node(a.data - b.data, (a, b), lambda g: (g, -g), "sub")


@traced
def mul(a, b):
    """a * b, elementwise, broadcast.
    Backward: da = dy * b, db = dy * a."""
    a, b = _as_operands(a, b, "mul")
    return make_node(a.data * b.data, (a, b),
                     lambda g: (g * b.data if a.requires_grad else None,
                                g * a.data if b.requires_grad else None), "mul")


@traced
def div(a, b):
    """a / b, elementwise, broadcast.
    Backward: da = dy / b, db = -dy * a / b^2 (= -dy * out / b)."""
    a, b = _as_operands(a, b, "div")
    out = a.data / b.data
    return make_node(out, (a, b), lambda g: (g / b.data if a.requires_grad else None,
                                             -g * out / b.data if b.requires_grad else None), "div")


@traced
def pow(a, p):
    """a ** p, elementwise.
    Backward: da = dy * p a^(p-1); with a tensor exponent also dp = dy * a^p log(a)."""
    a, p = _as_operands(a, p, "pow")
    out = a.data ** p.data
    return make_node(out, (a, p),
                     lambda g: (g * p.data * a.data ** (p.data - 1) if a.requires_grad else None,
                                g * out * backend.xp.log(a.data) if p.requires_grad else None),
                     "pow")


@traced
def neg(a):
    """-a.
    Backward: da = -dy."""
    return make_node(-a.data, (a,), lambda g: (-g,), "neg")


@traced
def matmul(a, b):
    """C = A B, batched and broadcast over the leading axes (a vector is lifted to a matrix and
    back).
    Backward: dA = dC B^T, dB = A^T dC, from C_ij = sum_k A_ik B_kj."""
    a, b = _as_operands(a, b, "matmul")
    A = a.data
    B = b.data
    if A.ndim < 2 or B.ndim < 2:  # vectors: lift to matrices, matmul, then squeeze the axis back
        A2 = A[None, :] if A.ndim == 1 else A
        B2 = B[:, None] if B.ndim == 1 else B
        out = matmul(reshape(a, A2.shape), reshape(b, B2.shape))
        # drop the lifted axes again: a tuple times a bool is the tuple (True) or () (False)
        shape = out.shape[:-2] + out.shape[-2:-1] * (A.ndim > 1) + out.shape[-1:] * (B.ndim > 1)
        return reshape(out, shape)
    if A.shape[-1] != B.shape[-2]:
        raise ValueError(
            f"matmul: shapes {tuple(A.shape)} and {tuple(B.shape)} do not fit: the last axis of "
            f"the first ({A.shape[-1]}) must equal the second-to-last of the second "
            f"({B.shape[-2]})")
    xp = backend.xp
    # backend.matmul is A @ B (cuBLAS's own GEMM while CUDA graphs record a step: lesson 11)

    def backward(g):
        dA = backend.matmul(g, xp.swapaxes(B, -1, -2)) if a.requires_grad else None   # dC B^T
        dB = backend.matmul(xp.swapaxes(A, -1, -2), g) if b.requires_grad else None   # A^T dC
        return dA, dB
    return make_node(backend.matmul(A, B), (a, b), backward, "matmul")


# -------------------------------------------------------------------- elementwise unary ops
@traced
def exp(a):
    """exp(a), elementwise.
    Backward: da = dy * exp(a), the output itself."""
    out = backend.xp.exp(a.data)
    return make_node(out, (a,), lambda g: (g * out,), "exp")


@traced
def log(a):
    """log(a), the natural logarithm, elementwise.
    Backward: da = dy / a."""
    return make_node(backend.xp.log(a.data), (a,), lambda g: (g / a.data,), "log")


@traced
def sqrt(a):
    """sqrt(a), elementwise.
    Backward: da = dy / (2 sqrt(a))."""
    out = backend.xp.sqrt(a.data)
    return make_node(out, (a,), lambda g: (g / (2 * out),), "sqrt")


@traced
def relu(a):
    """relu(a) = max(a, 0), elementwise.
    Backward: da = dy where a > 0, else 0."""
    out = backend.xp.maximum(a.data, 0)
    return make_node(out, (a,), lambda g: (g * (out > 0),), "relu")


@traced
def where(cond, a, b):
    """a where cond holds, else b, elementwise (cond: a boolean array or Tensor).
    Backward: da = dy where cond holds, db = dy elsewhere, 0 in the other's places."""
    a, b = _as_operands(a, b, "where")
    c = cond.data if isinstance(cond, Tensor) else backend.asarray(cond)
    xp = backend.xp
    return make_node(xp.where(c, a.data, b.data), (a, b),
                     lambda g: (xp.where(c, g, 0) if a.requires_grad else None,
                                xp.where(c, 0, g) if b.requires_grad else None), "where")


@traced
def masked_fill(a, mask, value):
    """a with `value` where mask is True.
    Backward (through where): da = dy, but 0 at the filled positions."""
    return where(mask, as_tensor(value, like=a), a)


# -------------------------------------------------------------------- reductions
def _axes(axis, ndim):
    """The reduced axes as a tuple of non-negative ints: _axes(-1, 3) -> (2,); None -> all axes.
    An axis outside [-ndim, ndim) is an error, as in NumPy (no wrapping around)."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise ValueError(f"axis {ax} is out of range for a tensor of {ndim} dimensions")
    return tuple(ax % ndim for ax in axes)


def _restore_axes(g, axes, keepdims):
    """Put reduced axes back as size 1 so that g broadcasts against the input."""
    return g if keepdims else backend.xp.expand_dims(g, axes)


@traced
def sum(a, axis=None, keepdims=False):
    """The sum of a over `axis` (every axis by default).
    Backward: da = dy broadcast back over the summed axes (d sum / da_i = 1)."""
    axes = _axes(axis, a.ndim)
    out = backend.xp.asarray(a.data.sum(axis=axes, keepdims=keepdims))
    return make_node(
        out, (a,),
        lambda g: (backend.xp.broadcast_to(_restore_axes(g, axes, keepdims), a.shape),), "sum")


@traced
def mean(a, axis=None, keepdims=False):
    """The mean of a over `axis` (every axis by default).
    Backward: da = dy / n broadcast back over the n reduced elements."""
    axes = _axes(axis, a.ndim)
    n = int(np.prod([a.shape[i] for i in axes]))
    out = backend.xp.asarray(a.data.mean(axis=axes, keepdims=keepdims))
    return make_node(
        out, (a,),
        lambda g: (backend.xp.broadcast_to(_restore_axes(g, axes, keepdims) / n, a.shape),),
        "mean")


@traced
def max(a, axis=None, keepdims=False):
    """The largest entry of a over `axis` (every axis by default).
    Backward: da = dy at the maximum (split evenly between ties), 0 elsewhere."""
    axes = _axes(axis, a.ndim)
    out = backend.xp.asarray(a.data.max(axis=axes, keepdims=True))

    def backward(g):
        hit = a.data == out
        share = _restore_axes(g, axes, keepdims) / hit.sum(axis=axes, keepdims=True).astype(g.dtype)
        return (hit * share,)
    return make_node(
        out if keepdims else out.reshape(tuple(n for i, n in enumerate(a.shape) if i not in axes)),
        (a,), backward, "max")


# -------------------------------------------------------------------- shapes and indexing
@traced
def reshape(a, shape):
    """a with a new shape: the same entries in the same order.
    Backward: da = dy reshaped back."""
    return make_node(a.data.reshape(shape), (a,), lambda g: (g.reshape(a.shape),), "reshape")


@traced
def transpose(a, axes=None):
    """a with its axes permuted (reversed by default).
    Backward: da = dy under the inverse permutation."""
    axes = tuple(range(a.ndim))[::-1] if axes is None else tuple(ax % a.ndim for ax in axes)
    inverse = tuple(np.argsort(axes))
    return make_node(a.data.transpose(axes), (a,), lambda g: (g.transpose(inverse),), "transpose")


def _is_basic(idx):
    """True for indices made only of ints, slices, None and Ellipsis (no repeats possible)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(isinstance(i, (int, slice, type(None), type(Ellipsis))) for i in items)


@traced
def getitem(a, idx):
    """a[idx]: ints, slices, None, Ellipsis, integer or boolean arrays, as NumPy indexes.
    Backward: dy written into zeros at idx, repeated integer indices adding up (a scatter-add)."""
    if isinstance(idx, Tensor):
        idx = idx.data
    elif isinstance(idx, tuple):
        idx = tuple(i.data if isinstance(i, Tensor) else i for i in idx)
    if isinstance(idx, list):
        idx = backend.asarray(idx)

    def backward(g):
        full = backend.xp.zeros(a.shape, dtype=g.dtype)
        if _is_basic(idx):
            full[idx] = g
        else:
            backend.scatter_add(full, idx, g)
        return (full,)
    return make_node(a.data[idx], (a,), backward, "getitem")


@traced
def concat(tensors, axis=0):
    """The tensors joined along an existing axis.
    Backward: each input gets its slice of dy."""
    tensors = [as_tensor(t) for t in tensors]
    _check_device(tensors)
    xp = backend.xp
    ax = axis % tensors[0].ndim
    bounds = np.cumsum([t.shape[ax] for t in tensors])[:-1].tolist()
    return make_node(xp.concatenate([t.data for t in tensors], axis=ax), tuple(tensors),
                     lambda g: tuple(xp.split(g, bounds, axis=ax)), "concat")


@traced
def stack(tensors, axis=0):
    """The tensors stacked along a new axis.
    Backward: each input gets its slice of dy."""
    tensors = [as_tensor(t) for t in tensors]
    _check_device(tensors)
    xp = backend.xp
    ax = axis % (tensors[0].ndim + 1)
    return make_node(xp.stack([t.data for t in tensors], axis=ax), tuple(tensors),
                     lambda g: tuple(xp.moveaxis(g, ax, 0)), "stack")
