"""Lesson 11, answers: what a copy costs, the plain LayerNorm that a fused kernel must match, how cuBLAS
reads a NumPy matrix, and a column sum in a GPU kernel's order.

Graded by `python lessons/check.py 11 --solutions`; your own go in lessons/exercises/11_gpu.py.

Answers to the lesson's questions:
1. 64 * 30 * 37000 float32 numbers of 4 bytes: about 284 MB cross the bus.
2. Reading a GPU value back makes the CPU wait until every queued kernel has run: the pipeline of
   asynchronous launches drains at each read. On the CPU, work is already synchronous: nothing waits.
3. 284 MB / 25e9 B/s = 11.4 ms (bandwidth rules). The ids are 64 * 30 * 8 = 15,360 bytes: 0.6 us of
   bandwidth and 10 us of latency, about 10.6 us (latency rules): copy batches whole, once each.
4. Plain: the max reads x (1), the subtraction reads x and writes y (2), exp reads and writes y (2), the
   sum reads y (1), the division reads and writes y (2): 8. Fused: x read twice, y written, read and
   rewritten: 5. About 1.6x less traffic, and one launch instead of five.
5. CuPy's memory pool keeps the blocks the first step freed and hands them out again, without asking
   the driver. The driver, and nvidia-smi, count those kept blocks as in use.
6. cuBLAS chooses its matrix kernels by GPU model, and another kernel sums the products in another
   order: float addition is not associative (lesson 01), so the last bits differ, and the runs drift
   apart within float32 rounding.
7. Each 4-byte number brings its own 32-byte sector: 8 bytes cross for each useful one, 8 x 16.8 MB =
   134 MB for the sum. Reading along a row, a warp's 32 numbers are one 128-byte line, all used: 16.8 MB.
   (Measured on an H200: 135 us a call for the stock sum over axis 0, about 10 us for kernels.column_sum.)
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


def gemm_operand(shape, strides, itemsize):
    """Column-major memory at leading dimension ld holds element (i, j) at i + j * ld. A C-ordered (rows,
    cols) matrix has element (r, c) at r * s0 + c: the column-major (cols, rows) matrix, its transpose,
    at ld = s0. A transposed view has (r, c) at r + c * s1: the matrix itself, column-major, at ld = s1."""
    rows, cols = shape
    if strides[0] % itemsize or strides[1] % itemsize:
        return None                                               # not a whole number of elements apart
    to_next_row, to_next_col = strides[0] // itemsize, strides[1] // itemsize
    rows_contiguous = (cols == 1 or to_next_col == 1) and (rows == 1 or to_next_row >= cols)
    cols_contiguous = (rows == 1 or to_next_row == 1) and (cols == 1 or to_next_col >= rows)
    if rows_contiguous:                                           # each row a column of the transpose
        return False, cols if rows == 1 else max(to_next_row, cols)
    if cols_contiguous:                                           # each column a column of the matrix
        return True, rows if cols == 1 else max(to_next_col, rows)
    return None


def column_sums(g):
    """The order of kernels.column_sum (the chunks' sums, then the last block's total), in NumPy: each row
    addition below is one float32 addition per column, as each GPU thread makes it."""
    n, d = g.shape
    chunk = max(8, -(-n // 64))                                   # ceil(n / 64) rows, at least 8
    total = np.zeros(d, np.float32)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        part = np.zeros((8, d), np.float32)                       # a block's 8 thread rows
        for k in range(8):
            for row in range(start + k, stop, 8):                 # every 8th row of the chunk
                part[k] += g[row]
        for k in range(1, 8):                                     # thread row 0 adds the others, in order
            part[0] += part[k]
        total += part[0]                                          # the last block: chunk after chunk
    return total


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    assert round(transfer_megabytes((64, 30, 37000), np.float32)) == 284
    logits = transfer_megabytes((64, 30, 37000), np.float32) * 1e6                                 # 3
    assert round(logits / 25e9 * 1e3, 1) == 11.4
    assert round((64 * 30 * 8 / 25e9 + 10e-6) * 1e6, 1) == 10.6
    plain, fused = 1 + 2 + 2 + 1 + 2, 2 + 3                                                        # 4
    assert round(plain / fused, 1) == 1.6
    useful = transfer_megabytes((8192, 512), np.float32)                                           # 7
    assert 32 // 4 == 8 and round(useful, 1) == 16.8 and round(8 * useful) == 134
