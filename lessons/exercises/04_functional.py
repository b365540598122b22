"""Lesson 04, build it: fused ops, and their backward passes derived by hand.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 04            # or one function: python lessons/check.py 04 softmax

NumPy arrays in, NumPy arrays out (float64 in the grader). Derive each gradient on paper first, as
the lesson does, then write it in a line or three: no loops over elements. The grader compares with
the fused ops of minitransformer.functional on several shapes, then puts your backward behind the
package's forward and runs mt.gradcheck on it. The answers are in
lessons/solutions/04_functional.py; try first.
"""
import numpy as np


def softmax(x, axis=-1):
    """softmax(x) along `axis`: exp(x_i) / sum_j exp(x_j). It must not overflow
    for logits near 1000."""
    raise NotImplementedError("softmax: your turn")


def softmax_backward(y, dy, axis=-1):
    """dx = dL/dx for y = softmax(x, axis), given the output y and dy = dL/dy
    (both of x's shape)."""
    raise NotImplementedError("softmax_backward: your turn")


def cross_entropy_backward(logits, target, label_smoothing=0.0, ignore_index=None):
    """dL/dlogits for L = F.cross_entropy(logits, target, ignore_index, label_smoothing).

    logits: (..., V) floats; target: integer ids of shape (...). L is the MEAN, over the n rows
    whose target is not ignore_index, of -sum_j q_j log softmax(z)_j with q = (1 - eps)
    onehot(target) + eps/V. Rows whose target is ignore_index do not count and get a zero gradient;
    with every row ignored, the gradient is all zeros. Logits may be float32 and near 1000. Returns
    an array of logits' shape.
    """
    raise NotImplementedError("cross_entropy_backward: your turn")


def layer_norm_backward(x, gamma, dy, eps=1e-6):
    """(dx, dgamma, dbeta) for y = gamma * (x - mu) / sqrt(var + eps) + beta over the last axis
    (size D).

    x and dy: (..., D); gamma: (D,). mu and var (the mean of squares, ddof=0) are over the last
    axis. dgamma and dbeta have shape (D,): every position shares gamma and beta. (beta does not
    appear in the gradients, so it is not an argument.) A row may have a mean of 300 and a variance
    of 1e-4.
    """
    raise NotImplementedError("layer_norm_backward: your turn")
