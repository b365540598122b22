"""Lesson 11, gpu: transfer_megabytes against shape and itemsize (in MB of 10^6 bytes), a plain
NumPy layer_norm forward against F.layer_norm, and gemm_operand against the layouts cublas.plan reads
(C-ordered, padded rows, transposed views, vectors, and strides cuBLAS cannot read)."""
import math

import numpy as np

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import cublas


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


def gemm_operand_cases():
    """(shape, strides in bytes, itemsize): the layouts a GEMM's operands come in."""
    cases = []
    for itemsize in (4, 8):
        c = (lambda rows, cols, pad=0: ((rows, cols), ((cols + pad) * itemsize, itemsize), itemsize))
        t = (lambda rows, cols, pad=0: ((rows, cols), (itemsize, (rows + pad) * itemsize), itemsize))
        cases += [c(3, 4), c(4, 3, 3), t(4, 3), t(3, 5, 2), c(1, 5), t(5, 1), c(6, 1), t(1, 6)]
    return cases + [((3, 4), (32, 8), 4), ((3, 4), (4, 24), 4), ((2, 3), (6, 2), 4), ((3, 3), (12, 12), 4)]


def check_gemm_operand(fn, g):
    for shape, strides, itemsize in gemm_operand_cases():
        g.start(f"shape {shape}, strides {strides} bytes, itemsize {itemsize}")
        ref = cublas._layout(shape, strides, itemsize)
        ref = None if ref is None else (ref[0] == cublas.OP_T, ref[1])
        yours = g.call(fn, shape, strides, itemsize)
        if ref is None:
            if yours is not None:
                g.fail(f"got {yours!r}: cuBLAS cannot read this memory as a column-major matrix (a stride "
                       f"neither 1 element nor the other dimension's step, or not a whole number of elements): "
                       f"return None")
            continue
        if yours is None:
            g.fail(f"got None; expected {ref}: the memory holds "
                   + ("the matrix itself, column-major (a transposed view)" if ref[0] else "its transpose, "
                      "column-major (rows one after the other)")
                   + f" (strides count bytes: a stride of {itemsize} is one element, the next one)")
        if not (isinstance(yours, tuple) and len(yours) == 2):
            g.fail(f"return (transposed, ld), a pair, got {yours!r}")
        transposed, ld = yours
        if bool(transposed) != ref[0]:
            g.fail(f"transposed should be {ref[0]}: " + ("columns lie one after the other (strides[0] is one "
                   "element): column-major memory holding the matrix itself" if ref[0] else "rows lie one after "
                   "the other (strides[1] is one element): read column-major, that is the transpose"))
        if ld != ref[1]:
            hints = {ref[1] * itemsize: "ld counts elements, not bytes: divide the stride by itemsize",
                     shape[1] if not ref[0] else shape[0]: "ld is the stride between rows (or columns) in "
                     "elements, which can exceed the row's length when rows are padded"}
            g.fail(f"ld should be {ref[1]}, got {ld!r}" + (f": {hints[ld]}" if ld in hints else ""))


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


ITEMS = [("transfer_megabytes", check_transfer_megabytes), ("layer_norm", check_layer_norm),
         ("gemm_operand", check_gemm_operand)]
