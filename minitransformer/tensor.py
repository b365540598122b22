"""Tensor: an array plus the graph that made it, and reverse-mode autodiff over that graph.

Every op computes its output with `backend.xp` and attaches a `backward(g)` closure that returns one
gradient array per parent; the engine alone reduces broadcast gradients (`unbroadcast`) and adds
them up. Left out on purpose: higher-order gradients, in-place ops on tensors that need gradients,
and retain_graph (the graph is freed as backward walks it).
"""
import contextlib

import numpy as np

from . import backend

_grad_enabled = True


class no_grad(contextlib.ContextDecorator):
    """Build no graph inside `with no_grad():` (or a function decorated with @no_grad())."""

    def __enter__(self):
        global _grad_enabled
        self._prev, _grad_enabled = _grad_enabled, False

    def __exit__(self, *exc):
        global _grad_enabled
        _grad_enabled = self._prev


def is_grad_enabled():
    return _grad_enabled


def unbroadcast(g, shape):
    """Sum `g` down to `shape`: the adjoint of NumPy broadcasting.

    unbroadcast(ones((2, 3)), (1, 3)) -> [[2, 2, 2]];  unbroadcast(ones((2, 3)), ()) -> 6
    """
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(i + extra for i, n in enumerate(shape) if n == 1 and g.shape[i + extra] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g.reshape(shape)


def _check_device(tensors):
    """Fail at once, naming both devices, when an op mixes NumPy- and CuPy-backed tensors."""
    devs = {backend.device_of(t.data) for t in tensors}
    if len(devs) > 1:
        raise RuntimeError(
            "an op got tensors on two devices, cpu (NumPy) and gpu (CuPy); move them to one "
            "device first (make them after mt.use(...), or convert with mt.tensor(t.numpy()))")


class Tensor:
    """An n-d array that records how it was computed. `.data` is a numpy or cupy array."""

    __slots__ = ("data", "grad", "requires_grad", "_parents", "_backward", "_op", "__weakref__")
    __array_priority__ = 1000  # so that ndarray + Tensor calls Tensor.__radd__

    def __init__(self, data, requires_grad=False, _parents=(), _backward=None, _op=""):
        self.data = data
        self.grad = None
        self.requires_grad = requires_grad
        self._parents = _parents
        self._backward = _backward
        self._op = _op

    # ---------------------------------------------------------------- information
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    device = property(lambda self: backend.device_of(self.data))

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        made = f", op={self._op}" if self._op else (", requires_grad=True" if self.requires_grad else "")
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device}{made})"

    def numpy(self):
        """The values as a NumPy array (a copy from the GPU)."""
        return backend.to_numpy(self.data)

    def item(self):
        """The value of a one-element tensor as a Python number (synchronises on the GPU)."""
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.data.reshape(()).item()

    def detach(self):
        """The same array, cut from the graph."""
        return Tensor(self.data)

    # ---------------------------------------------------------------- the engine
    def backward(self, grad=None):
        """Reverse-mode autodiff: fill `.grad` of every leaf tensor that requires a gradient.

        Walks the graph in reverse topological order (iteratively: no recursion limit), passes each
        node's gradient to its closure, reduces broadcasting, adds up gradients of reused tensors,
        and frees each closure after use.
        """
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (made under no_grad, "
                               "or from inputs without requires_grad=True)")
        if grad is None:
            if self.size != 1:
                raise RuntimeError(f"backward() without a gradient needs a scalar, got shape {self.shape}")
            grad = backend.xp.ones_like(self.data)
        grads = {self: grad}  # tensors hash by identity
        for node in reversed(_topological_order(self)):
            g = grads.pop(node, None)
            if g is None:
                continue
            if node._backward is None:  # a leaf: keep its gradient
                if node.grad is None:  # a copy: gradients may alias each other (add returns g twice)
                    node.grad = g.astype(node.data.dtype, copy=True)
                else:
                    node.grad += g
                continue
            for p, pg in zip(node._parents, node._backward(g)):
                if pg is None or not p.requires_grad:
                    continue
                if pg.shape != p.data.shape:
                    pg = unbroadcast(pg, p.data.shape)
                prev = grads.get(p)
                grads[p] = pg if prev is None else prev + pg
            node._parents, node._backward = (), None  # free the graph behind us

    # ---------------------------------------------------------------- operators
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __pow__(self, o): return pow(self, o)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __neg__(self): return neg(self)
    def __getitem__(self, idx): return getitem(self, idx)

    def sum(self, axis=None, keepdims=False): return sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return max(self, axis, keepdims)
    def reshape(self, *shape): return reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
    def transpose(self, *axes): return transpose(self, axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else (axes or None))
    permute = transpose
    T = property(lambda self: transpose(self))
    def exp(self): return exp(self)
    def log(self): return log(self)
    def sqrt(self): return sqrt(self)
    def relu(self): return relu(self)
    def masked_fill(self, mask, value): return masked_fill(self, mask, value)


def _topological_order(root):
    """Nodes that need a gradient, each after all of its parents (iterative depth-first search)."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))
            for p in node._parents:
                if p.requires_grad and p not in seen:
                    stack.append((p, False))
    return order


def tensor(data, requires_grad=False, dtype=None):
    """A Tensor on the current backend. Python floats and lists become float32 (the default dtype);
    arrays keep their dtype unless `dtype` is given."""
    if isinstance(data, Tensor):
        data = data.data
    if dtype is None and not hasattr(data, "dtype"):
        arr = np.asarray(data)
        dtype = backend.DEFAULT_DTYPE if arr.dtype.kind == "f" else None
    return Tensor(backend.asarray(data, dtype=dtype), requires_grad=requires_grad)


def as_tensor(x, like=None):
    """Tensors pass through; numbers and arrays become constant tensors (numbers take `like`'s dtype)."""
    if isinstance(x, Tensor):
        return x
    if like is not None and isinstance(x, (int, float)):
        return Tensor(backend.xp.asarray(x, dtype=like.dtype))
    return Tensor(backend.asarray(x))


def make(data, parents, backward, op):
    """Wrap an op's output; record `backward` only when grad mode is on and a parent needs it."""
    if _grad_enabled:
        for p in parents:
            if p.requires_grad:
                return Tensor(data, True, parents, backward, op)
    return Tensor(data, False, (), None, op)


def _pair(a, b):
    """Both operands as Tensors on one device (numbers take the other operand's dtype)."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if type(a.data) is not type(b.data):
            _check_device((a, b))
        return a, b
    a = as_tensor(a, like=b if isinstance(b, Tensor) else None)
    b = as_tensor(b, like=a)
    if type(a.data) is not type(b.data):
        _check_device((a, b))
    return a, b


# -------------------------------------------------------------------- elementwise binary ops
def add(a, b):
    """d(a+b)/da = 1, d(a+b)/db = 1 (the engine unbroadcasts)."""
    a, b = _pair(a, b)
    return make(a.data + b.data, (a, b), lambda g: (g, g), "add")


def sub(a, b):
    """d(a-b)/da = 1, d(a-b)/db = -1."""
    a, b = _pair(a, b)
    return make(a.data - b.data, (a, b), lambda g: (g, -g), "sub")


def mul(a, b):
    """d(ab)/da = b, d(ab)/db = a."""
    a, b = _pair(a, b)
    return make(a.data * b.data, (a, b),
                lambda g: (g * b.data if a.requires_grad else None, g * a.data if b.requires_grad else None), "mul")


def div(a, b):
    """d(a/b)/da = 1/b, d(a/b)/db = -a/b^2."""
    a, b = _pair(a, b)
    out = a.data / b.data
    return make(out, (a, b), lambda g: (g / b.data if a.requires_grad else None,
                                        -g * out / b.data if b.requires_grad else None), "div")


def pow(a, p):
    """d(a^p)/da = p a^(p-1); with a tensor exponent also d(a^p)/dp = a^p log a."""
    a, p = _pair(a, p)
    out = a.data ** p.data
    return make(out, (a, p), lambda g: (g * p.data * a.data ** (p.data - 1) if a.requires_grad else None,
                                        g * out * backend.xp.log(a.data) if p.requires_grad else None), "pow")


def neg(a):
    """d(-a)/da = -1."""
    return make(-a.data, (a,), lambda g: (-g,), "neg")


def matmul(a, b):
    """C = A B (batched, broadcast over leading axes): dA = dC B^T, dB = A^T dC."""
    a, b = _pair(a, b)
    A, B = a.data, b.data
    if A.ndim < 2 or B.ndim < 2:  # vectors: lift to matrices, matmul, then squeeze the axis back
        A2 = A[None, :] if A.ndim == 1 else A
        B2 = B[:, None] if B.ndim == 1 else B
        out = matmul(reshape(a, A2.shape), reshape(b, B2.shape))
        shape = out.shape[:-2] + out.shape[-2:-1] * (A.ndim > 1) + out.shape[-1:] * (B.ndim > 1)
        return reshape(out, shape)
    xp = backend.xp
    return make(xp.matmul(A, B), (a, b),
                lambda g: (xp.matmul(g, xp.swapaxes(B, -1, -2)) if a.requires_grad else None,
                           xp.matmul(xp.swapaxes(A, -1, -2), g) if b.requires_grad else None), "matmul")


# -------------------------------------------------------------------- elementwise unary ops
def exp(a):
    """d exp(a) = exp(a)."""
    out = backend.xp.exp(a.data)
    return make(out, (a,), lambda g: (g * out,), "exp")


def log(a):
    """d log(a) = 1/a."""
    return make(backend.xp.log(a.data), (a,), lambda g: (g / a.data,), "log")


def sqrt(a):
    """d sqrt(a) = 1 / (2 sqrt(a))."""
    out = backend.xp.sqrt(a.data)
    return make(out, (a,), lambda g: (g / (2 * out),), "sqrt")


def relu(a):
    """d relu(a) = 1 where a > 0, else 0."""
    out = backend.xp.maximum(a.data, 0)
    return make(out, (a,), lambda g: (g * (out > 0),), "relu")


def where(cond, a, b):
    """where(cond, a, b): the gradient goes to a where cond holds, to b elsewhere."""
    a, b = _pair(a, b)
    c = cond.data if isinstance(cond, Tensor) else backend.asarray(cond)
    xp = backend.xp
    return make(xp.where(c, a.data, b.data), (a, b),
                lambda g: (xp.where(c, g, 0) if a.requires_grad else None,
                           xp.where(c, 0, g) if b.requires_grad else None), "where")


def masked_fill(a, mask, value):
    """a with `value` where mask is True; no gradient flows through the filled positions."""
    return where(mask, as_tensor(value, like=a), a)


# -------------------------------------------------------------------- reductions
def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    return tuple(ax % ndim for ax in (axis if isinstance(axis, (tuple, list)) else (axis,)))


def _keep(g, axes, keepdims):
    """Put reduced axes back as size 1 so that g broadcasts against the input."""
    return g if keepdims else backend.xp.expand_dims(g, axes)


def sum(a, axis=None, keepdims=False):
    """d sum(a) / da = 1, broadcast back over the summed axes."""
    axes = _axes(axis, a.ndim)
    out = backend.xp.asarray(a.data.sum(axis=axes, keepdims=keepdims))
    return make(out, (a,), lambda g: (backend.xp.broadcast_to(_keep(g, axes, keepdims), a.shape),), "sum")


def mean(a, axis=None, keepdims=False):
    """d mean(a) / da = 1/n over the n reduced elements."""
    axes = _axes(axis, a.ndim)
    n = int(np.prod([a.shape[i] for i in axes]))
    return sum(a, axes, keepdims) / n


def max(a, axis=None, keepdims=False):
    """d max(a) / da = 1 at the maximum (split evenly between ties), 0 elsewhere."""
    axes = _axes(axis, a.ndim)
    out = backend.xp.asarray(a.data.max(axis=axes, keepdims=True))

    def backward(g):
        hit = a.data == out
        share = _keep(g, axes, keepdims) / hit.sum(axis=axes, keepdims=True).astype(g.dtype)
        return (hit * share,)
    return make(out if keepdims else out.reshape(tuple(n for i, n in enumerate(a.shape) if i not in axes)),
                (a,), backward, "max")


# -------------------------------------------------------------------- shapes and indexing
def reshape(a, shape):
    """Reshape; the gradient is reshaped back."""
    return make(a.data.reshape(shape), (a,), lambda g: (g.reshape(a.shape),), "reshape")


def transpose(a, axes=None):
    """Permute axes (reverse them by default); the gradient takes the inverse permutation."""
    axes = tuple(range(a.ndim))[::-1] if axes is None else tuple(ax % a.ndim for ax in axes)
    inverse = tuple(np.argsort(axes))
    return make(a.data.transpose(axes), (a,), lambda g: (g.transpose(inverse),), "transpose")


def _is_basic(idx):
    """True for indices made only of ints, slices, None and Ellipsis (no repeats possible)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(isinstance(i, (int, slice, type(None), type(Ellipsis))) for i in items)


def getitem(a, idx):
    """a[idx]; backward writes g into zeros at idx, adding up repeated integer indices."""
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
    return make(a.data[idx], (a,), backward, "getitem")


def concat(tensors, axis=0):
    """Join along an existing axis; each input gets its slice of the gradient."""
    tensors = [as_tensor(t) for t in tensors]
    _check_device(tensors)
    xp = backend.xp
    ax = axis % tensors[0].ndim
    bounds = np.cumsum([t.shape[ax] for t in tensors])[:-1].tolist()
    return make(xp.concatenate([t.data for t in tensors], axis=ax), tuple(tensors),
                lambda g: tuple(xp.split(g, bounds, axis=ax)), "concat")


def stack(tensors, axis=0):
    """Join along a new axis; each input gets its slice of the gradient."""
    tensors = [as_tensor(t) for t in tensors]
    _check_device(tensors)
    xp = backend.xp
    ax = axis % (tensors[0].ndim + 1)
    return make(xp.stack([t.data for t in tensors], axis=ax), tuple(tensors),
                lambda g: tuple(xp.moveaxis(g, ax, 0)), "stack")
