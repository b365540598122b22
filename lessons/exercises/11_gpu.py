"""Lesson 11, build it: what a device-host copy moves, and the plain LayerNorm a fused kernel must match.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 11

Everything here runs on the CPU (the grader needs no GPU). The answers are in
lessons/solutions/11_gpu.py; try first.
"""
import math

import numpy as np


def transfer_megabytes(shape, dtype):
    """How many megabytes (10^6 bytes) a to_numpy() of an array of this shape and dtype moves."""
    raise NotImplementedError("transfer_megabytes: your turn")


def layer_norm(x, gamma, beta, eps=1e-6):
    """LayerNorm over the last axis, written plainly: gamma * (x - mu) / sqrt(var + eps) + beta, with mu
    the mean and var the mean of squared deviations (ddof=0). x (..., D), gamma and beta (D,)."""
    raise NotImplementedError("layer_norm: your turn")
