"""Lesson 11, gpu: transfer_megabytes against shape and itemsize (in MB of 10^6 bytes), and a plain
NumPy layer_norm forward against F.layer_norm."""
import math

import numpy as np

import minitransformer as mt
import minitransformer.functional as F


def check_transfer_megabytes(fn, g):
    for shape, dtype in (((64, 30, 37000), np.float32), ((1024, 1024), np.float32), ((10,), np.float64),
                         ((3, 4), np.float16)):
        g.start(f"{shape} {np.dtype(dtype).name}")
        ref = math.prod(shape) * np.dtype(dtype).itemsize / 1e6
        g.cmp("megabytes", g.call(fn, shape, dtype), ref, known=transfer_megabytes_mistakes(ref, dtype))


def check_layer_norm(fn, g):
    r = np.random.default_rng(110).standard_normal
    for shape in ((8, 16), (2, 3, 5), (1, 4)):
        g.start(f"x {shape}")
        x, gamma, beta = 3 * r(shape) + 1, r(shape[-1]), r(shape[-1])
        ref = F.layer_norm(mt.tensor(x), mt.tensor(gamma), mt.tensor(beta)).numpy()
        g.cmp("y", g.call(fn, x.copy(), gamma.copy(), beta.copy()), ref, known=layer_norm_mistakes(x, gamma, beta))


# -------------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def transfer_megabytes_mistakes(ref, dtype):
    return [(ref * 1e6 / 2 ** 20, "a megabyte here is 10^6 bytes (MB), not 2^20 (MiB)"),
            (ref / np.dtype(dtype).itemsize, "times the bytes per element (np.dtype(dtype).itemsize)")]


def layer_norm_mistakes(x, gamma, beta):
    centred = x - x.mean(-1, keepdims=True)
    return [(gamma * centred / np.sqrt(x.var(-1, ddof=1, keepdims=True) + 1e-6) + beta,
             "the variance is the mean of squares (ddof=0), not the sample variance"),
            (gamma * centred / (np.sqrt(x.var(-1, keepdims=True)) + 1e-6) + beta, "eps goes inside the sqrt"),
            (gamma * centred / np.sqrt(x.var(-1, keepdims=True)) + beta,
             "you left out eps: divide by sqrt(var + eps), eps = 1e-6")]


ITEMS = [("transfer_megabytes", check_transfer_megabytes), ("layer_norm", check_layer_norm)]
