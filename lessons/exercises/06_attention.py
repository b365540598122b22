"""Lesson 06, build it: the causal mask, and scaled dot-product attention forward and backward.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 06

NumPy arrays in, NumPy arrays out: q (B, H, Tq, d_k), k (B, H, Tk, d_k), v (B, H, Tk, d_v); masks
are booleans, True where a query may attend to a key, broadcastable to (B, H, Tq, Tk). The grader
compares with minitransformer.attention (causal_mask, scaled_dot_product_attention without dropout),
on cases that include scores near 1e4, and gradient-checks your backward. The answers are in
lessons/solutions/06_attention.py; try first.
"""
import math

import numpy as np


def causal_mask(T):
    """A (1, 1, T, T) boolean array: True where query i may see key j, i.e. where j <= i."""
    raise NotImplementedError("causal_mask: your turn")


def attention_forward(q, k, v, mask=None):
    """(out, weights) of eq. (1): weights = softmax(q k^T / sqrt(d_k)) over the keys,
    out = weights v.

    Where the mask is False, set the score to -1e9 before the softmax (not -inf:
    lesson 06 says why). A query whose keys are ALL masked gets weights 0 and output 0. Shapes: out
    (B, H, Tq, d_v), weights (B, H, Tq, Tk).
    """
    raise NotImplementedError("attention_forward: your turn")


def attention_backward(q, k, v, weights, dout):
    """(dq, dk, dv) for out = attention_forward(q, k, v, mask)[0], given its weights P and
    dout = dL/dout.

    The mask is not an argument: masked weights are 0. Shapes: dq, dk, dv as q, k, v.
    """
    raise NotImplementedError("attention_backward: your turn")
