"""Lesson 05, build it: Xavier's bound, the Linear layer's backward pass, and a Module of your own.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 05

The grader compares with nn.Linear's arithmetic (F.linear) and with minitransformer.transformer's
FeedForward, and gradient-checks your backward and your whole module. The answers are in
lessons/solutions/05_nn.py; try first.
"""
import numpy as np

from minitransformer import nn


def xavier_bound(d_in, d_out):
    """The bound a of Xavier-uniform initialisation, W ~ U(-a, a), for a (d_in, d_out) weight.

    Choose a so that Var(W) = 2 / (d_in + d_out) (Glorot and Bengio's compromise, lesson 05).
    """
    raise NotImplementedError("xavier_bound: your turn")


def linear_backward(x, weight, dy):
    """(dx, dweight, dbias) for y = x W + b, x (..., d_in), W (d_in, d_out), b (d_out,), dy
    (..., d_out).

    Every leading axis is a batch of rows, as in Linear. Each gradient has its parent's shape.
    """
    raise NotImplementedError("linear_backward: your turn")


class FeedForward(nn.Module):
    """The position-wise feed-forward network of eq. (2): FFN(x) = max(0, x W1 + b1) W2 + b2.

    Build it from two nn.Linear layers named w_1 (d_model -> d_ff) and w_2 (d_ff -> d_model), so
    that its parameters are w_1.weight, w_1.bias, w_2.weight, w_2.bias (as
    transformer.FeedForward's, whose checkpoints it can then load). forward: x (..., d_model) ->
    (..., d_model).
    """

    def __init__(self, d_model, d_ff):
        super().__init__()
        raise NotImplementedError("FeedForward.__init__: your turn")

    def forward(self, x):
        raise NotImplementedError("FeedForward.forward: your turn")
