"""Lesson 04, answers: fused ops, their backward passes derived by hand.

Graded by `python lessons/check.py 04 --solutions`; your own go in
lessons/exercises/04_functional.py. NumPy arrays in, NumPy arrays out; the grader wraps your
backward around the package's forward and runs mt.gradcheck on it.

The answers to the lesson's questions, explained, are in lessons/answers/04_functional.md.
"""
import numpy as np


def softmax(x, axis=-1):
    """y_i = exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j: the shift cancels and
    nothing overflows."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_backward(y, dy, axis=-1):
    """dx = y * (dy - sum(dy * y)), from dy_i/dx_j = y_i (delta_ij - y_j)."""
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def cross_entropy_backward(logits, target, label_smoothing=0.0, ignore_index=None):
    """dz = (softmax(z) - q) / n on counted rows, 0 on ignored ones; q = (1 - eps) onehot + eps / V.

    The loss is the mean over the n rows whose target is not ignore_index of lse(z) - sum_j q_j z_j,
    and d lse / dz_j = p_j: prediction minus target.
    """
    V, eps = logits.shape[-1], label_smoothing
    p = softmax(logits)                                             # (..., V)
    valid = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
    q = np.full(logits.shape, eps / V)                            # every token gets eps / V ...
    t = np.where(valid, target, 0)                                # (a safe id on ignored rows)
    # ... and the target 1 - eps more
    np.put_along_axis(q, t[..., None], 1 - eps + eps / V, axis=-1)
    n = max(int(valid.sum()), 1)                                  # all ignored: gradient 0, not 0/0
    return (p - q) * valid[..., None] / n


def layer_norm_backward(x, gamma, dy, eps=1e-6):
    """dx = (g - mean(g) - xhat * mean(g * xhat)) / sigma with g = dy * gamma;
    dgamma = sum(dy * xhat), dbeta = sum(dy), both over every leading axis.

    mu and sigma depend on every x_j: the gradient loses its mean (a shift does nothing to xhat) and
    its component along xhat (neither does a scale), then is divided by sigma.
    """
    mu = x.mean(axis=-1, keepdims=True)
    sigma = np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) / sigma
    g = dy * gamma                                                  # the gradient arriving at xhat
    dx = (g - g.mean(axis=-1, keepdims=True)
          - xhat * (g * xhat).mean(axis=-1, keepdims=True)) / sigma
    D = x.shape[-1]
    return dx, (dy * xhat).reshape(-1, D).sum(axis=0), dy.reshape(-1, D).sum(axis=0)
