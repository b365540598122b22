"""Lesson 11, build it: what a device-host copy moves, the plain LayerNorm a fused kernel must
match, how cuBLAS (column-major) reads a NumPy matrix, and a column sum in a GPU kernel's order of
additions.

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
    """LayerNorm over the last axis, written plainly: gamma * (x - mu) / sqrt(var + eps) + beta,
    with mu the mean and var the mean of squared deviations (ddof=0). x (..., D),
    gamma and beta (D,)."""
    raise NotImplementedError("layer_norm: your turn")


def gemm_operand(shape, strides, itemsize):
    """How cuBLAS, which reads matrices column-major (down the columns), sees a row-major matrix of
    `shape` (rows, cols) whose elements lie `strides` bytes apart (NumPy's .strides: to the next
    row, to the next column) and `itemsize` bytes each: (transposed, ld).
    transposed is False where the memory, read column-major, holds the matrix's transpose (each
    row's elements one after the other: a C-ordered matrix), True where it holds the matrix itself
    (each column's elements one after the other: a transposed view). ld, the leading dimension,
    counts the elements from one column-major column to the next: at least the length of that column
    (a dimension of 1 has no step: then ld is that length). None where the memory is neither, or a
    stride is not a whole number of elements (cublas.plan then copies the
    operand C-ordered first)."""
    raise NotImplementedError("gemm_operand: your turn")


def column_sums(g):
    """The sums down the columns of a float32 array g (N, D), as a float32 (D,) array, added in
    kernels.column_sum's order (lesson 11, "Reading the GPU's clock"): the rows cut into chunks of
    max(8, ceil(N / 64)) rows; in each chunk, 8 partial sums k = 0..7, each starting from zero and
    adding rows k, k + 8, k + 16, ... of the chunk; then partial sum 0 plus 1, plus 2, ..., plus 7;
    the total starts from zero and adds each chunk's sum, chunk after chunk. All in float32."""
    raise NotImplementedError("column_sums: your turn")
