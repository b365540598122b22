"""Lesson 02, answers: three ops of the engine, each a forward and its backward.

Graded by `python lessons/check.py 02 --solutions`; your own go in lessons/exercises/02_autograd.py.

Answers to the lesson's questions:
1. x.grad = 2x: `x * x` uses x as both factors of one mul, so it receives g * x twice.
2. (1, 3) + (4, 1) broadcasts to (4, 3); the gradient of the sum is ones (4, 3), summed over the
   broadcast axes: p.grad = [[4, 4, 4]] (4 rows each), q.grad = [[3], [3], [3], [3]] (3 columns each).
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
