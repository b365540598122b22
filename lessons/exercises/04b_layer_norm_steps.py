"""Lesson 04, step by step: backpropagate through every intermediate of LayerNorm (as in Karpathy's
"Backprop Ninja"), one line each, before you meet the closed form of lesson 04's section 4.

The forward, written out as intermediates (x: (..., D); gamma, beta: (D,); D the last axis):

    mu   = x.mean(-1, keepdims=True)           # (..., 1)
    xc   = x - mu                              # (..., D) centred
    var  = (xc ** 2).mean(-1, keepdims=True)   # (..., 1)
    rstd = (var + eps) ** -0.5                 # (..., 1) the reciprocal standard deviation
    xhat = xc * rstd                           # (..., D)
    y    = gamma * xhat + beta                 # (..., D)

Go backwards from dy = dL/dy: each function below returns the gradient of L with respect to one
intermediate, given the gradients already found above it and the forward values it needs. An
intermediate used twice (xc feeds both xhat and var) gets the sum of both paths; one of shape
(..., 1) was broadcast over the D features, so its gradient is a sum over that axis (keepdims=True).

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 04b                 # or one step: python lessons/check.py 04b grad_var

Each step is graded on its own against autograd on the same intermediates, given the right gradients
from above, so one wrong step does not fail the next. Once all eight pass, chain them: they give
lesson 04's closed form, layer_norm_backward. The answers are in
lessons/solutions/04b_layer_norm_steps.py.
"""
import numpy as np


def grad_gamma(dy, xhat):
    """dL/dgamma, shape (D,): gamma is shared by every position of every leading axis."""
    raise NotImplementedError("grad_gamma: your turn")


def grad_beta(dy):
    """dL/dbeta, shape (D,)."""
    raise NotImplementedError("grad_beta: your turn")


def grad_xhat(dy, gamma):
    """dL/dxhat, shape (..., D), from y = gamma * xhat + beta."""
    raise NotImplementedError("grad_xhat: your turn")


def grad_rstd(dxhat, xc):
    """dL/drstd, shape (..., 1), from xhat = xc * rstd."""
    raise NotImplementedError("grad_rstd: your turn")


def grad_var(drstd, var, eps=1e-6):
    """dL/dvar, shape (..., 1), from rstd = (var + eps) ** -0.5."""
    raise NotImplementedError("grad_var: your turn")


def grad_xc(dxhat, rstd, dvar, xc):
    """dL/dxc, shape (..., D): xc reaches L through xhat = xc * rstd and through
    var = mean(xc ** 2)."""
    raise NotImplementedError("grad_xc: your turn")


def grad_mu(dxc):
    """dL/dmu, shape (..., 1), from xc = x - mu."""
    raise NotImplementedError("grad_mu: your turn")


def grad_x(dxc, dmu):
    """dL/dx, shape (..., D): x reaches L through xc = x - mu and through mu = mean(x)."""
    raise NotImplementedError("grad_x: your turn")
