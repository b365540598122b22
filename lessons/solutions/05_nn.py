"""Lesson 05, answers: Xavier's bound, the Linear layer's backward, and a Module of your own.

Graded by `python lessons/check.py 05 --solutions`; your own go in lessons/exercises/05_nn.py.

The answers to the lesson's questions, explained, are in lessons/answers/05_nn.md.
"""
import math

import numpy as np

import minitransformer as mt
from minitransformer import nn


def xavier_bound(d_in, d_out):
    """a = sqrt(6 / (d_in + d_out)): U(-a, a) has variance a^2 / 3 = 2 / (d_in + d_out)
    (Glorot's compromise)."""
    return math.sqrt(6.0 / (d_in + d_out))


def linear_backward(x, weight, dy):
    """dx = dy W^T, dW = X^T dY over the flattened rows, db = sum(dy over every leading axis)."""
    d_in, d_out = weight.shape
    X, G = x.reshape(-1, d_in), dy.reshape(-1, d_out)         # (N, d_in), (N, d_out)
    return dy @ weight.T, X.T @ G, G.sum(axis=0)              # (..., d_in), (d_in, d_out), (d_out,)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2): two Linear layers, w_1 and w_2,
    with a ReLU between."""

    def __init__(self, d_model, d_ff):
        super().__init__()                                      # first: it makes the registries
        self.w_1 = nn.Linear(d_model, d_ff)                     # registered as w_1.weight, w_1.bias
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(x).relu())                     # (..., D) -> (..., F) -> (..., D)
