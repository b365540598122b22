"""Lesson 06, answers: the causal mask, and eq. (1) forward and backward.

Graded by `python lessons/check.py 06 --solutions`; your own go in
lessons/exercises/06_attention.py.

The answers to the lesson's questions, explained, are in lessons/answers/06_attention.md.
"""
import math

import numpy as np

import minitransformer as mt


def causal_mask(T):
    """(1, 1, T, T) booleans, True where key j <= query i: the lower triangle, diagonal included."""
    return np.tril(np.ones((T, T), dtype=bool))[None, None]


def attention_forward(q, k, v, mask=None):
    """O = softmax(Q K^T / sqrt(d_k)) V, masked scores set to -1e9; rows with no
    allowed key give 0."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])    # (B, H, Tq, Tk)
    if mask is not None:
        s = np.where(mask, s, -1e9)                            # finite: an empty row stays NaN-free
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    if mask is not None:
        p = p * mask.any(axis=-1, keepdims=True)               # no key to look at: weights 0
    return p @ v, p                                            # (B, H, Tq, d_v), (B, H, Tq, Tk)


def attention_backward(q, k, v, weights, dout):
    """dV = P^T dO; dP = dO V^T; dS = P * (dP - rowsum(dP * P));
    dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k)."""
    p, c = weights, 1.0 / math.sqrt(q.shape[-1])
    dv = np.swapaxes(p, -1, -2) @ dout                           # (B, H, Tk, d_v)
    dp = dout @ np.swapaxes(v, -1, -2)                           # (B, H, Tq, Tk)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))         # softmax backward, row by row
    return c * ds @ k, c * np.swapaxes(ds, -1, -2) @ q, dv
