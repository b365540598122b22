"""Lesson 03, build it: central differences, and your own gradient check.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 03

The grader compares numeric_gradient with known derivatives, and asks your gradcheck for a verdict on
right and deliberately wrong backward passes, comparing it with mt.gradcheck's. The answers are in
lessons/solutions/03_gradcheck.py; try first.
"""
import numpy as np

import minitransformer as mt


def numeric_gradient(f, x, eps=1e-6):
    """The gradient of a scalar function f at x by central differences: an array of x's shape.

    f takes a float64 array of x's shape and returns a float. Perturb one element of x at a time
    (x itself, in place, is fine), and leave x exactly as you found it. Which difference is accurate
    to O(eps^2)?
    """
    raise NotImplementedError("numeric_gradient: your turn")


def gradcheck(op, *arrays, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0):
    """True when the backward pass of `op` is right at `arrays`, else False.

    op takes Tensors (one per array) and returns a Tensor, as mt.gradcheck's function does. Your check:
      1. make float64 copies of the arrays (never change the caller's arrays) and leaf Tensors of them
         (mt.tensor(x, requires_grad=True));
      2. reduce the output to a scalar with a FIXED RANDOM R of its shape (np.random.default_rng(seed)),
         L = sum(op(...) * R), and call backward: the leaves' .grad are the analytic gradients
         (a .grad left None means a zero gradient);
      3. for each input, the numeric gradient of L with numeric_gradient above (evaluate L under
         mt.no_grad(), the other inputs held fixed);
      4. every element must satisfy |analytic - numeric| <= atol + rtol * |numeric|.
    """
    raise NotImplementedError("gradcheck: your turn")
