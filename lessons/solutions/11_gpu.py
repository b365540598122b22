"""Lesson 11, answers: what a copy costs, the plain LayerNorm that a fused kernel must match, how
cuBLAS reads a NumPy matrix, and a column sum in a GPU kernel's order.

Graded by `python lessons/check.py 11 --solutions`; your own go in lessons/exercises/11_gpu.py.

The answers to the lesson's questions, explained, are in lessons/answers/11_gpu.md.
"""
import math

import numpy as np


def transfer_megabytes(shape, dtype):
    """Bytes = number of elements x bytes per element; MB = 10^6 bytes."""
    return math.prod(shape) * np.dtype(dtype).itemsize / 1e6


def layer_norm(x, gamma, beta, eps=1e-6):
    """y = gamma (x - mu) / sqrt(var + eps) + beta over the last axis, var the mean
    of squares (ddof=0)."""
    mu = x.mean(axis=-1, keepdims=True)                           # pass 1: the mean
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)            # pass 2: the variance
    return gamma * (x - mu) / np.sqrt(var + eps) + beta           # pass 3: normalise, scale, shift


def gemm_operand(shape, strides, itemsize):
    """Column-major memory at leading dimension ld holds element (i, j) at i + j * ld. A C-ordered
    (rows, cols) matrix has element (r, c) at r * s0 + c: the column-major (cols, rows) matrix, its
    transpose, at ld = s0. A transposed view has (r, c) at r + c * s1: the matrix itself,
    column-major, at ld = s1."""
    rows, cols = shape
    if strides[0] % itemsize or strides[1] % itemsize:
        return None                                           # not a whole number of elements apart
    to_next_row, to_next_col = strides[0] // itemsize, strides[1] // itemsize
    rows_contiguous = (cols == 1 or to_next_col == 1) and (rows == 1 or to_next_row >= cols)
    cols_contiguous = (rows == 1 or to_next_row == 1) and (cols == 1 or to_next_col >= rows)
    if rows_contiguous:                                       # each row a column of the transpose
        return False, cols if rows == 1 else max(to_next_row, cols)
    if cols_contiguous:                                       # each column a column of the matrix
        return True, rows if cols == 1 else max(to_next_col, rows)
    return None


def column_sums(g):
    """The order of kernels.column_sum (the chunks' sums, then the last block's total), in NumPy:
    each row addition below is one float32 addition per column, as each GPU thread makes it."""
    n, d = g.shape
    chunk = max(8, -(-n // 64))                             # ceil(n / 64) rows, at least 8
    total = np.zeros(d, np.float32)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        part = np.zeros((8, d), np.float32)                 # a block's 8 thread rows
        for k in range(8):
            for row in range(start + k, stop, 8):           # every 8th row of the chunk
                part[k] += g[row]
        for k in range(1, 8):                               # thread row 0 adds the others, in order
            part[0] += part[k]
        total += part[0]                                    # the last block: chunk after chunk
    return total
