"""Lesson 02, answers: three ops of the engine, each a forward and its backward.

Graded by `python lessons/check.py 02 --solutions`; your own go in lessons/exercises/02_autograd.py.

Answers to the lesson's questions:
1. x.grad = 2x: `x * x` uses x as both factors of one mul, so it receives g * x twice.
2. (1, 3) + (4, 1) broadcasts to (4, 3); the gradient of the sum is ones (4, 3), summed over the
   broadcast axes: p.grad = [[4, 4, 4]] (4 rows each), q.grad = [[3], [3], [3], [3]] (3 columns each).
3. a is used twice: its gradient is complete only when both consumers, d (16) and c (48), have added
   their shares. Passed on after d alone, it would be 16 instead of 64: the topological order makes every
   node wait for all its consumers.
4. W.grad has W's shape, (D, E): the sum over all B * T positions of x_n^T g_n, one product of the
   flattened arrays, x.reshape(-1, D).T @ g.reshape(-1, E).
5. Two forward passes per parameter: 120 million. Reverse mode runs one backward pass from the one scalar
   loss, and each node's closure costs about what its forward did, whatever the number of inputs.
6. The first backward frees the closures of h's graph (their saved arrays): the second reaches a freed
   node. Add the losses and walk the graph once: (L1 + L2).backward(), which gives the sum of both
   gradients (the gradient is linear).
7. mul's closure reads w.data when backward runs: x.grad would be the new w (2w), but the gradient of
   the y that was computed is the old w. The version counter refuses it, naming the mul node.
"""
import numpy as np

import minitransformer as mt
from minitransformer.tensor import make_node


def mul(a, b):
    """d(ab)/da = b, d(ab)/db = a: each factor's gradient is g times the other factor.

    The output may be broadcast (a (2, 3) times b (3,)); backward returns gradients of the output's
    shape and the engine sums them down to each parent's shape (unbroadcast).
    """
    def backward(g):
        return g * b.data, g * a.data
    return make_node(a.data * b.data, (a, b), backward, "mul")


def reduce_sum(x, axis=None, keepdims=False):
    """d sum(x) / dx_i = 1: the gradient is g copied back along the summed axes."""
    axes = tuple(range(x.ndim)) if axis is None else tuple(int(i) % x.ndim for i in np.atleast_1d(axis))
    out = np.asarray(x.data.sum(axis=axes, keepdims=keepdims))

    def backward(g):
        if not keepdims:
            g = np.expand_dims(g, axes)                   # the summed axes come back with size 1 ...
        return (np.broadcast_to(g, x.shape),)             # ... and g is copied along them
    return make_node(out, (x,), backward, "sum")


def matmul(a, b):
    """C = A B: dA = g B^T, dB = A^T g (from C_ij = sum_p A_ip B_pj; the shapes check themselves)."""
    A, B = a.data, b.data

    def backward(g):
        return g @ B.T, A.T @ g                           # (m, n)(n, k) = (m, k) and (k, m)(m, n) = (k, n)
    return make_node(A @ B, (a, b), backward, "matmul")


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    x = mt.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, -4.0, 6.0]
    p = mt.tensor(np.zeros((1, 3)), requires_grad=True)
    q = mt.tensor(np.zeros((4, 1)), requires_grad=True)
    (p + q).sum().backward()
    assert p.grad.tolist() == [[4.0] * 3] and q.grad.tolist() == [[3.0]] * 4
    a = mt.tensor([2.0], requires_grad=True)                                                      # 3
    c = a * mt.tensor([3.0])
    ((c + a) * (c + a)).sum().backward()
    assert a.grad.tolist() == [64.0]                        # 16 from d, 48 through c
    rng = np.random.default_rng(0)                                                                # 4
    x = mt.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)                             # (B, T, D)
    W = mt.tensor(rng.standard_normal((4, 5)), requires_grad=True)                                # (D, E)
    g = rng.standard_normal((2, 3, 5))
    (x @ W).backward(g)
    assert W.grad.shape == (4, 5) and np.allclose(W.grad, x.numpy().reshape(-1, 4).T @ g.reshape(-1, 5))
    h = x * x                                                                                     # 6
    L1, L2 = h.sum(), (h * 3.0).sum()
    x.grad = None
    (L1 + L2).backward()
    assert np.allclose(x.grad, 8 * x.numpy())               # 2x from L1, 6x from L2
    w, v = mt.tensor([1.0, 2.0], requires_grad=True), mt.tensor([3.0, 4.0], requires_grad=True)  # 7
    y = (w * v).sum()
    w.data = w.data * 2
    try:
        y.backward()
        raise AssertionError("backward must refuse a changed input")
    except RuntimeError as e:
        assert "'mul'" in str(e)
