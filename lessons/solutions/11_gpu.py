"""Lesson 11, answers: what a copy costs, and the plain LayerNorm that a fused kernel must match.

Graded by `python lessons/check.py 11 --solutions`; your own go in lessons/exercises/11_gpu.py.

Answers to the lesson's questions:
1. 64 * 30 * 37000 float32 numbers of 4 bytes: about 284 MB cross the bus.
2. Reading a GPU value back makes the CPU wait until every queued kernel has run: the pipeline of
   asynchronous launches drains at each read. On the CPU, work is already synchronous: nothing waits.
"""
import math

import numpy as np


def transfer_megabytes(shape, dtype):
    """Bytes = number of elements x bytes per element; MB = 10^6 bytes."""
    return math.prod(shape) * np.dtype(dtype).itemsize / 1e6


def layer_norm(x, gamma, beta, eps=1e-6):
    """y = gamma (x - mu) / sqrt(var + eps) + beta over the last axis, var the mean of squares (ddof=0)."""
    mu = x.mean(axis=-1, keepdims=True)                           # pass 1: the mean
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)            # pass 2: the variance
    return gamma * (x - mu) / np.sqrt(var + eps) + beta           # pass 3: normalise, scale, shift


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    assert round(transfer_megabytes((64, 30, 37000), np.float32)) == 284
