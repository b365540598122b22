"""Lesson 02, answers: three ops of the engine, each a forward and its backward.

Graded by `python lessons/check.py 02 --solutions`; your own go in lessons/exercises/02_autograd.py.

The answers to the lesson's questions, explained, are in lessons/answers/02_autograd.md.
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
    axes = tuple(range(x.ndim)) if axis is None else tuple(int(i) % x.ndim
                                                           for i in np.atleast_1d(axis))
    out = np.asarray(x.data.sum(axis=axes, keepdims=keepdims))

    def backward(g):
        if not keepdims:
            g = np.expand_dims(g, axes)                  # the summed axes come back with size 1 ...
        return (np.broadcast_to(g, x.shape),)            # ... and g is copied along them
    return make_node(out, (x,), backward, "sum")


def matmul(a, b):
    """C = A B: dA = g B^T, dB = A^T g (from C_ij = sum_p A_ip B_pj; the shapes
    check themselves)."""
    A, B = a.data, b.data

    def backward(g):
        return g @ B.T, A.T @ g                    # (m, n)(n, k) = (m, k) and (k, m)(m, n) = (k, n)
    return make_node(A @ B, (a, b), backward, "matmul")
