"""Tensor: an array plus the graph that made it, and reverse-mode autodiff over that graph.

The elementary ops are in ops.py: each computes its output with `backend.xp` and attaches a
`backward(g)` closure returning one gradient array per parent; the engine alone unbroadcasts and
adds them up (an op may add a leaf's share into its existing .grad itself: grad_into). Saved inputs
must not change before backward: `version` ticks one clock at a tensor's making and at each write
the package sees (`t.data = ...`, `+=`, Adam's step, `assign`), so a parent newer than its node
makes backward name the op, and a node keeps its leaf parents' NumPy arrays read-only until freed,
so `w.data[...] = x` fails at once. A Tensor holds real numbers or booleans, and only a floating
one requires gradients (an integer gradient would be truncated): refused where it is made.
Left out on purpose: higher-order gradients, retain_graph (backward frees the graph), a guard on
CuPy arrays and op outputs, and on writes through another NumPy array that shares a leaf's memory
and existed before the forward pass (a view `v = w.data[:]`, or the array `w.data` is a view of):
NumPy cannot lock an existing view, and copying every saved input would double a step's memory;
such a write gives a wrong gradient silently unless `w.changed()` says so (docs/reliability.md).
"""
import contextlib
import itertools
import operator
import threading

import numpy as np

from . import backend

# grad mode per thread (.on, True unless set): a rank thread records its graph while rank 0
# evaluates under no_grad (distributed.run_threads)
_mode = threading.local()
_clock = itertools.count()  # versions: a tensor's is the tick of its making or of its latest write


class Tensor:
    """An n-d array that records how it was computed. `.data` is a numpy or cupy array."""

    __slots__ = ("_data", "version", "grad", "requires_grad", "_parents", "_backward", "_op",
                 "_saved", "__weakref__")
    __array_priority__ = 1000  # so that ndarray + Tensor calls Tensor.__radd__

    def __init__(self, data, requires_grad=False, _parents=(), _backward=None, _op=""):
        if getattr(getattr(data, "dtype", None), "kind", "") != "f":   # floats: one comparison
            _check_kind(data, requires_grad)
        self._data = data
        self.version = next(_clock)
        self.grad = None
        self.requires_grad = requires_grad
        self._parents = _parents
        self._backward = _backward
        self._op = _op

    # ---------------------------------------------------------------- the engine
    def backward(self, grad=None):
        """Reverse-mode autodiff: add dL/dleaf into `.grad` of every leaf that requires a gradient.

        Visits the nodes in reverse topological order, so that a node's gradient is complete (every
        consumer has added its share) before its closure passes it on: the chain rule, one node at a
        time. The engine alone unbroadcasts each parent's share and adds up the shares of a reused
        tensor; each closure is freed once it has run.
        """
        # tensor -> dL/dtensor (tensors hash by identity)
        grads = {self: _first_gradient(self, grad)}
        for node in reversed(_topological_order(self)):
            g = grads.pop(node, None)
            if g is None:                   # every path to it gave None: nothing to pass on
                continue
            # a leaf: keep its gradient, as a copy (gradients may alias each other: add returns
            # g twice)
            if node._backward is None:
                if node.grad is None:
                    node.grad = g.astype(node.data.dtype, copy=True)
                else:
                    node.grad += g
                continue
            _check_saved(node)              # its inputs are as the forward pass saw them
            pgrads = node._backward(g)      # the chain rule: dL/dparent for each parent
            for p, pg in _parent_gradients(node, pgrads):
                prev = grads.get(p)
                # accumulate over the parent's consumers
                grads[p] = pg if prev is None else prev + pg
            _free(node)                     # free the graph behind us

    # ---------------------------------------------------------------- operators (ops.py)
    def __add__(self, o): return ops.add(self, o)
    def __radd__(self, o): return ops.add(o, self)
    def __sub__(self, o): return ops.sub(self, o)
    def __rsub__(self, o): return ops.sub(o, self)
    def __mul__(self, o): return ops.mul(self, o)
    def __rmul__(self, o): return ops.mul(o, self)
    def __truediv__(self, o): return ops.div(self, o)
    def __rtruediv__(self, o): return ops.div(o, self)
    def __pow__(self, o): return ops.pow(self, o)
    def __matmul__(self, o): return ops.matmul(self, o)
    def __rmatmul__(self, o): return ops.matmul(o, self)
    def __neg__(self): return ops.neg(self)
    def __getitem__(self, idx): return ops.getitem(self, idx)

    def sum(self, axis=None, keepdims=False): return ops.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return ops.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return ops.max(self, axis, keepdims)
    def exp(self): return ops.exp(self)
    def log(self): return ops.log(self)
    def sqrt(self): return ops.sqrt(self)
    def relu(self): return ops.relu(self)
    def masked_fill(self, mask, value): return ops.masked_fill(self, mask, value)
    T = property(lambda self: ops.transpose(self))

    def reshape(self, *shape):
        """t.reshape(2, 3) or t.reshape((2, 3))."""
        return ops.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list))
                           else shape)

    def transpose(self, *axes):
        """Reverse the axes, or permute them: t.transpose(0, 2, 1) or t.transpose((0, 2, 1))."""
        return ops.transpose(self, axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list))
                             else (axes or None))

    # ---------------------------------------------------------------- information
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    device = property(lambda self: backend.device_of(self.data))

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        made = (f", op={self._op}" if self._op
                else (", requires_grad=True" if self.requires_grad else ""))
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

    # ---------------------------------------------------------------- versions and read-only locks
    # a node dropped without backward: the arrays it locked become writable again
    def __del__(self):
        for array in getattr(self, "_saved", ()):
            array.setflags(write=True)

    def _set_data(self, array):
        if getattr(getattr(array, "dtype", None), "kind", "") != "f":
            _check_kind(array, self.requires_grad)
        self._data = array
        self.version = next(_clock)
    data = property(operator.attrgetter("_data"), _set_data,
                    doc="The array; assigning it counts as a change (`version`).")

    def changed(self):
        """Say that `.data` was written in place (as Adam's step does): graphs that saved it refuse
        backward."""
        self.version = next(_clock)

    def assign(self, values):
        """Write `values` into `.data` in place, even while a graph holds it read-only (that graph
        then refuses backward): what load_state_dict does, so that views into `.data` stay
        valid."""
        # CuPy arrays have no flag
        if type(self._data) is np.ndarray and not self._data.flags.writeable:
            self._data.setflags(write=True)
        self._data[...] = values
        self.changed()


_FREED = object()  # the _backward of a node whose graph backward() has walked and freed


def _topological_order(root):
    """Nodes that need a gradient, each after all of its parents (iterative depth-first search)."""
    order = []
    seen = set()
    todo = [(root, False)]
    while todo:
        node, done = todo.pop()
        if done:
            order.append(node)
        elif node not in seen:
            if node._backward is _FREED:
                raise RuntimeError(
                    f"backward() reached a {node._op!r} node whose graph an earlier backward() "
                    "freed: run the forward pass again, or add the losses up and call backward() "
                    "once")
            if node._backward is None and node._data.dtype.kind != "f":
                # requires_grad set on an integer leaf after its making: refused before any work
                raise TypeError(
                    f"backward() reached a leaf of dtype {node.dtype} with requires_grad=True: "
                    "only floating-point tensors can require gradients (token ids and masks are "
                    "constants: leave requires_grad False)")
            seen.add(node)
            todo.append((node, True))
            for p in node._parents:
                if p.requires_grad and p not in seen:
                    todo.append((p, False))
    return order


def make_node(data, parents, backward, op):
    """Wrap an op's output; record `backward` only when grad mode is on and a parent needs it."""
    if getattr(_mode, "on", True):
        for p in parents:
            if p.requires_grad:
                node = Tensor(data, True, parents, backward, op)
                node._saved = _lock(parents)   # its leaf inputs, read-only until it is freed
                return node
    return Tensor(data, False, (), None, op)


# The elementary ops live in ops.py, which needs Tensor and make_node from this module: the one
# import circle of the package, closed here at the bottom (ops.py imports this module at its top).
# Tensor's methods above call them as ops.add, ops.sum, ... (never a bare `sum`: the builtins stay
# builtins).


def _first_gradient(root, grad):
    """dL/droot, where backward() starts: ones for a one-element root, else `grad` as an array of
    root's shape."""
    if not root.requires_grad:
        raise RuntimeError(
            "backward() on a tensor that does not require grad (made under no_grad, "
            "or from inputs without requires_grad=True)")
    if grad is None:
        if root.size != 1:
            raise RuntimeError(
                f"backward() without a gradient needs a scalar, got shape {root.shape}")
        return backend.xp.ones_like(root.data)
    grad = data_of(grad)
    if not hasattr(grad, "dtype") or backend.device_of(grad) != backend.device_of(root.data):
        # a list, a number, a NumPy array for a GPU tensor
        grad = backend.asarray(grad, dtype=root.dtype)
    if grad.shape != root.shape:
        raise ValueError(
            f"backward(grad): grad has shape {tuple(grad.shape)}, "
            f"but the tensor has shape {root.shape}")
    return grad


def _parent_gradients(node, pgrads):
    """Yield (parent, dL/dparent) for each parent that needs a gradient, summed down to the
    parent's shape (unbroadcast). `pgrads` is what the node's backward returned: when it is not one
    array (or None) per parent, each broadcasting to its parent's shape, a TypeError names the op
    (_bad_backward)."""
    if type(pgrads) is not tuple or len(pgrads) != len(node._parents):
        _bad_backward(node, pgrads)
    for p, pg in zip(node._parents, pgrads):
        if pg is None or not p.requires_grad:
            continue
        try:
            if pg.shape != p.data.shape and (pg := unbroadcast(pg, p.data.shape)) is None:
                # a gradient that does not broadcast from the parent's shape
                _bad_backward(node, pgrads)
        except AttributeError:                # not an array
            _bad_backward(node, pgrads)
        yield p, pg


def unbroadcast(g, shape):
    """Sum `g` down to `shape`: the adjoint of NumPy broadcasting.

    unbroadcast(ones((2, 3)), (1, 3)) -> [[2, 2, 2]];  unbroadcast(ones((2, 3)), ()) -> 6
    """
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    if extra < 0 or any(n not in (1, m) for n, m in zip(shape, g.shape[extra:])):
        return None  # g does not broadcast from `shape`: the caller names the op
    axes = tuple(range(extra)) + tuple(
        i + extra for i, n in enumerate(shape) if n == 1 and g.shape[i + extra] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g.reshape(shape)


def _bad_backward(node, pgrads):
    """A TypeError naming the op whose backward returned something else than one array (or None)
    per parent."""
    n = len(node._parents)
    # then a wrong shape may be the fault
    shaped = isinstance(pgrads, (tuple, list)) and len(pgrads) == n
    name = lambda g: type(g).__name__ + (
        f" of shape {tuple(g.shape)}" if shaped and hasattr(g, "shape") else "")
    got = (
        f"a {type(pgrads).__name__} of {len(pgrads)}: " + ", ".join(map(name, pgrads))
        if isinstance(pgrads, (tuple, list)) else type(pgrads).__name__)
    raise TypeError(
        f"the backward of {node._op!r} returned {got}; it must return a tuple of {n} "
        f"array{'s' * (n != 1)} (or None), one gradient per parent, each of the output's shape "
        f"or the parent's (output {node.shape}; "
        f"parents {', '.join(str(p.shape) for p in node._parents)})")


def grad_into(t):
    """t's .grad where an op's backward may add its share of dL/dt there itself, returning None for
    t: a leaf holding a gradient already (Adam.gradient_buffers, an earlier backward). In the op's
    last kernel (a GEMM with beta 1, a column sum that adds: llm.c's way) the engine's add costs no
    launch. Else None."""
    return t.grad if t._backward is None and t.requires_grad and t.grad is not None else None


class no_grad(contextlib.ContextDecorator):
    """Build no graph inside `with no_grad():` (or a function decorated with @no_grad())."""

    def __enter__(self):
        self._prev = is_grad_enabled()
        _mode.on = False

    def __exit__(self, *exc):
        _mode.on = self._prev


def is_grad_enabled():
    return getattr(_mode, "on", True)


def tensor(data, requires_grad=False, dtype=None):
    """A Tensor on the current backend. Python floats and lists become float32 (the default dtype);
    arrays keep their dtype unless `dtype` is given."""
    if isinstance(data, Tensor):
        data = data.data
    kind = (data.dtype if hasattr(data, "dtype") else np.asarray(data).dtype).kind
    if kind not in "biuf":   # checked on the host: CuPy refuses text with its own words
        raise TypeError(
            f"tensor: a Tensor holds real numbers or booleans, got dtype kind {kind!r} "
            f"(text must become token ids first)")
    if dtype is None and not hasattr(data, "dtype"):
        dtype = backend.DEFAULT_DTYPE if kind == "f" else None
    array = backend.asarray(data, dtype=dtype)
    if requires_grad and array.dtype.kind != "f":
        raise TypeError(
            f"tensor: only floating-point tensors can require gradients, got dtype {array.dtype} "
            f"(write 1.0, not 1, or pass dtype=np.float32)")
    return Tensor(array, requires_grad=requires_grad)


def data_of(x):
    """The array inside a Tensor, or x itself (an array, a list, a number):
    data_of(tensor([1.0])) -> array([1.])."""
    return x.data if isinstance(x, Tensor) else x


def as_tensor(x, like=None):
    """Tensors pass through; numbers and arrays become constant tensors (numbers take `like`'s
    dtype)."""
    if isinstance(x, Tensor):
        return x
    if like is not None and isinstance(x, (int, float)):
        return Tensor(backend.xp.asarray(x, dtype=like.dtype))
    return Tensor(backend.asarray(x))


def _check_kind(data, requires_grad):
    """Refuse, in one sentence, an array a Tensor cannot hold: not an array, not real numbers or
    booleans (complex, text, objects), or not floating-point with requires_grad (an integer or
    boolean gradient would be cast to zeros). Integer tensors without gradients (token ids) pass."""
    dtype = getattr(data, "dtype", None)
    if not isinstance(getattr(dtype, "kind", None), str):
        raise TypeError(f"Tensor: data must be a NumPy or CuPy array, got {type(data).__name__} "
                        "(mt.tensor(...) converts numbers and lists)")
    if dtype.kind not in ("b", "i", "u", "f"):
        raise TypeError(f"Tensor: a Tensor holds real numbers or booleans, got dtype {dtype} "
                        "(complex numbers, text and objects have no gradients here)")
    if requires_grad:
        raise TypeError(f"Tensor: only floating-point tensors can require gradients, got dtype "
                        f"{dtype} (token ids and masks are constants: leave requires_grad False)")


# ------------------------------------------------------------ the version clock and read-only locks
def _lock(parents):
    """The NumPy arrays of the leaf parents that were writable, now read-only (until _free)."""
    locked = ()
    for p in parents:
        if p._backward is None and type(p._data) is np.ndarray and p._data.flags.writeable:
            p._data.setflags(write=False)
            locked += (p._data,)
    return locked


def _check_saved(node):
    """Fail, naming the op, when an input of `node` was written after the forward pass made the
    node."""
    for i, p in enumerate(node._parents):
        if p.version > node.version:
            raise RuntimeError(
                f"backward() reached a {node._op!r} node whose input {i} (shape {p.shape}) was "
                "changed after the forward pass (t.data = ..., an optimizer step): run the "
                "forward pass again after the change")


def _free(node):
    """Drop a node's graph once backward has passed it, and make its inputs' arrays writable
    again."""
    for array in node._saved:
        array.setflags(write=True)
    node._parents = ()
    node._backward = _FREED
    node._saved = ()


from . import ops  # noqa: E402
# re-exported: mt.concat, mt.stack, mt.where
from .ops import concat, stack, where  # noqa: E402,F401
