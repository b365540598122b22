"""Lesson 03, build it: central differences, and your own gradient check.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 03

The grader compares numeric_gradient with known derivatives, and asks your gradcheck for a verdict
on right and deliberately wrong backward passes, comparing it with mt.gradcheck's. The answers are
in lessons/solutions/03_gradcheck.py; try first.
"""
import numpy as np

import minitransformer as mt


def numeric_gradient(f, x, eps=1e-6):
    """The gradient of a scalar function f at x by central differences: an array of x's shape.

    f takes a float64 array of x's shape and returns a float; eps is the step. The difference must
    be accurate to O(eps^2). You may perturb x itself, but on return it must be exactly as you found
    it.
    """
    raise NotImplementedError("numeric_gradient: your turn")


def gradcheck(op, *arrays, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0):
    """True when the backward pass of `op` is right at `arrays`, else False.

    op takes Tensors (one per array) and returns a Tensor, as mt.gradcheck's function does. Right
    means: for L = sum(op(...) * R), R a fixed random array of the output's shape drawn from
    np.random.default_rng(seed), every element of every input's analytic gradient (backward, in
    float64) is within atol + rtol * |numeric| of the numeric one (numeric_gradient, step eps). An
    input the output does not use has gradient zero. The caller's arrays stay unchanged.
    """
    raise NotImplementedError("gradcheck: your turn")
