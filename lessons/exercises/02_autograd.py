"""Lesson 02, build it: three ops of the engine, each with its backward pass.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 02

An op reads its parents' arrays (`a.data`), computes the output array, defines `backward(g)` that
returns a tuple of one gradient per parent (g is dL/d(output), an array of the output's shape), and
returns `make_node(output, parents, backward, name)`, as lesson 03's bad_square does. Two rules of
the engine:
  * return gradients of the OUTPUT's shape when a parent was broadcast: the engine sums them down to
    the parent's shape (unbroadcast, lesson 02), so no op has to;
  * use NumPy (`np`) on the `.data` arrays; never build Tensors inside backward.
The grader compares your outputs and gradients with minitransformer's own ops on several shapes, one
tensor as both parents (x * x) and one weight used twice among them, then runs mt.gradcheck on your
op. A backward must not write into g: in a graph that same array may be another node's gradient.
The answers are in lessons/solutions/02_autograd.py (and the package's plain forms in
minitransformer/plain.py): open them once yours pass.
"""
import numpy as np

from minitransformer.tensor import make_node


def mul(a, b):
    """a * b elementwise, with NumPy broadcasting: Tensors a, b -> a Tensor.

    Shapes may differ: (2, 3) * (3,), (4, 1, 3) * (2, 1), (2, 3) * a 0-d scalar. What is d(ab)/da?
    """
    raise NotImplementedError("mul: your turn")


def reduce_sum(x, axis=None, keepdims=False):
    """x summed over `axis` (None: every axis; an int, negative allowed; or a tuple of ints),
    keeping the summed axes with size 1 when keepdims=True, like np.sum. Tensor -> Tensor.

    backward(g) gets g of the OUTPUT's shape and must return a gradient of x's shape.
    """
    raise NotImplementedError("reduce_sum: your turn")


def matmul(a, b):
    """The matrix product of 2-D Tensors a (m, k) and b (k, n) -> a Tensor (m, n).

    Lesson 02 derives both gradients; let the shapes guide you: dA is (m, k), dB is (k, n), g is
    (m, n).
    """
    raise NotImplementedError("matmul: your turn")
