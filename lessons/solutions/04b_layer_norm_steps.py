"""Lesson 04, step by step, answers: the gradient of every intermediate of LayerNorm.

Graded by `python lessons/check.py 04b --solutions`; your own go in
lessons/exercises/04b_layer_norm_steps.py.
The forward (x: (..., D); mu, var, rstd: (..., 1)): mu = mean(x); xc = x - mu; var = mean(xc ** 2);
rstd = (var + eps) ** -0.5; xhat = xc * rstd; y = gamma * xhat + beta.

The answers to the lesson's questions, explained, are in lessons/answers/04_functional.md.
"""
import numpy as np


def grad_gamma(dy, xhat):
    """dgamma = sum of dy * xhat over every leading axis: y_i = gamma_i xhat_i + beta_i
    at every position."""
    return (dy * xhat).reshape(-1, dy.shape[-1]).sum(axis=0)


def grad_beta(dy):
    """dbeta = sum of dy over every leading axis: dy_i / dbeta_i = 1 at every position."""
    return dy.reshape(-1, dy.shape[-1]).sum(axis=0)


def grad_xhat(dy, gamma):
    """dxhat = dy * gamma: dy_i / dxhat_i = gamma_i."""
    return dy * gamma


def grad_rstd(dxhat, xc):
    """drstd = sum_j dxhat_j * xc_j over the last axis: rstd was broadcast over the D
    features, each adds."""
    return (dxhat * xc).sum(axis=-1, keepdims=True)


def grad_var(drstd, var, eps=1e-6):
    """dvar = drstd * (-1/2) (var + eps) ** -3/2: the power rule,
    d v^n / dv = n v^(n - 1) with n = -1/2."""
    return -0.5 * (var + eps) ** -1.5 * drstd


def grad_xc(dxhat, rstd, dvar, xc):
    """dxc = dxhat * rstd + dvar * 2 xc / D: the path through xhat plus the path through
    var = mean(xc ** 2)."""
    return dxhat * rstd + dvar * 2 * xc / xc.shape[-1]


def grad_mu(dxc):
    """dmu = -sum_j dxc_j over the last axis: every xc_j = x_j - mu uses mu, with a minus sign."""
    return -dxc.sum(axis=-1, keepdims=True)


def grad_x(dxc, dmu):
    """dx = dxc + dmu / D: the direct path through xc, plus the path through mu = mean(x),
    d mu / dx_j = 1/D."""
    return dxc + dmu / dxc.shape[-1]
