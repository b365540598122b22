"""Lesson 11, gpu: transfer_megabytes against shape and itemsize (in MB of 10^6 bytes), a plain
NumPy layer_norm forward against F.layer_norm, gemm_operand against the layouts cublas.plan reads
(C-ordered, padded rows, transposed views, vectors, and strides cuBLAS cannot read), and column_sums
against kernels.column_sum_order, to the last bit (other orders of the additions named when met)."""
import math

import numpy as np

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.fast import cublas, kernels


def check_transfer_megabytes(fn, g):
    g.error_hint = ("dtype may be a type (np.float32) or an array's .dtype: "
                    "np.dtype(dtype).itemsize reads both")
    for shape, dtype in (((64, 30, 37000), np.float32), ((1024, 1024), np.float32),
                         ((10,), np.float64), ((3, 4), np.float16), ((2, 5), np.dtype(np.int64))):
        g.start(f"{shape} {np.dtype(dtype).name}"
                + (", as x.dtype gives it" if isinstance(dtype, np.dtype) else ""))
        ref = math.prod(shape) * np.dtype(dtype).itemsize / 1e6
        g.cmp("megabytes", g.call(fn, shape, dtype), ref,
              known=transfer_megabytes_mistakes(ref, dtype))


def check_layer_norm(fn, g):
    r = np.random.default_rng(110).standard_normal
    for shape, eps, scale, mean in (((8, 16), None, 3, 1), ((2, 3, 5), None, 3, 1),
                                    ((1, 4), None, 3, 1), ((4, 6), 0.5, 3, 1), ((3, 8), 0.1, 1, 0),
                                    ((6, 8), None, 1e-3, 300), ((2, 16), None, 1e-3, -300)):
        g.start(f"x {shape}" + (f", eps={eps}" if eps else "") +
                (f", mean {mean} and variance {scale ** 2:g}: eps matters" if scale < 1 else ""))
        x, gamma, beta = scale * r(shape) + mean, r(shape[-1]), r(shape[-1])
        given = {} if eps is None else {"eps": eps}
        ref = F.layer_norm(mt.tensor(x), mt.tensor(gamma), mt.tensor(beta), **given).numpy()
        g.write_hints = {"x": "x - mu makes a new array (x -= mu does not)"}
        yours = g.call(fn, x, gamma, beta, **given)
        g.cmp("y", yours, ref, known=layer_norm_mistakes(x, gamma, beta, eps or 1e-6))


def gemm_operand_cases():
    """(shape, strides in bytes, itemsize): the layouts a GEMM's operands come in."""
    cases = []
    for itemsize in (4, 8):
        c = (lambda rows, cols, pad=0:
             ((rows, cols), ((cols + pad) * itemsize, itemsize), itemsize))
        t = (lambda rows, cols, pad=0:
             ((rows, cols), (itemsize, (rows + pad) * itemsize), itemsize))
        cases += [c(3, 4), c(4, 3, 3), t(4, 3), t(3, 5, 2), c(1, 5), t(5, 1), c(6, 1), t(1, 6)]
    return cases + [((3, 4), (32, 8), 4), ((3, 4), (4, 24), 4), ((2, 3), (6, 2), 4),
                    ((3, 3), (12, 12), 4),
                    # a row of a padded matrix; a stride of 4.5
                    ((1, 5), (100, 4), 4), ((3, 4), (18, 4), 4)]


def check_gemm_operand(fn, g):
    for shape, strides, itemsize in gemm_operand_cases():
        g.start(f"shape {shape}, strides {strides} bytes, itemsize {itemsize}")
        ref = cublas._layout(shape, strides, itemsize)
        ref = None if ref is None else (ref[0] == cublas.OP_T, ref[1])
        yours = g.call(fn, shape, strides, itemsize)
        if ref is None:
            if yours is not None:
                g.fail(f"got {yours!r}: cuBLAS cannot read this memory as a column-major matrix (a "
                       f"stride neither 1 element nor the other dimension's step, or not a whole "
                       f"number of elements): return None")
            continue
        if yours is None:
            g.fail(f"got None; expected {ref}: the memory holds "
                   + ("the matrix itself, column-major (a transposed view)" if ref[0]
                      else "its transpose, column-major (rows one after the other)")
                   + f" (strides count bytes: a stride of {itemsize} is one element, the next one)")
        if not (isinstance(yours, tuple) and len(yours) == 2):
            g.fail(f"return (transposed, ld), a pair, got {yours!r}")
        transposed, ld = yours
        if bool(transposed) != ref[0]:
            g.fail(f"transposed should be {ref[0]}: "
                   + ("columns lie one after the other (strides[0] is one element): column-major "
                      "memory holding the matrix itself" if ref[0]
                      else "rows lie one after the other (strides[1] is one element): read "
                           "column-major, that is the transpose"))
        if ld != ref[1]:
            hints = {ref[1]
                     * itemsize: "ld counts elements, not bytes: divide the stride by itemsize",
                     shape[1] if not ref[0]
                     else shape[0]: "ld is the stride between rows (or columns) in elements, which "
                                    "can exceed the row's length when rows are padded"}
            if 1 in shape:
                hints.setdefault(ld, "a matrix of one row (or one column) takes no step to the "
                                     "next: ld is then the length of that row (or column)")
            g.fail(f"ld should be {ref[1]}, got {ld!r}" + (f": {hints[ld]}" if ld in hints else ""))


def _in_order(x, chunk, stride=8, dtype=np.float32, reverse_parts=False, reverse_chunks=False):
    """Column sums of x in kernels.column_sum's order, or in one of the orders a
    learner may take instead."""
    n, d = x.shape
    total = np.zeros(d, dtype)
    starts = list(range(0, n, chunk))
    for start in reversed(starts) if reverse_chunks else starts:
        stop, part = min(start + chunk, n), np.zeros((stride, d), dtype)
        for k in range(stride):
            for row in range(start + k, stop, stride):
                part[k] += x[row]
        for k in range(stride - 1, 0, -1) if reverse_parts else range(1, stride):
            part[0] += part[k]
        total += part[0]
    return total.astype(np.float32)


def column_sum_orders(x):
    """[(the column sums in another order, hint)]: the orders a learner may take
    instead of the kernel's."""
    n = len(x)
    up = -(-n // 64)
    return [(x.sum(axis=0),
             "that is NumPy's order (x.sum(axis=0), row after row): the kernel cuts the rows into "
             "chunks, each added by 8 thread rows"),
            (_in_order(x, max(8, up), stride=1),
             "in a chunk, partial sum k adds every 8th row (k, k + 8, ...), one per thread row: "
             "not the rows one after the other"),
            (_in_order(x, 64),
             "chunk = max(8, ceil(N / 64)) rows: at most 64 chunks, not chunks of 64 rows"),
            (_in_order(x, max(8, n // 64)), "round N / 64 up: chunk = max(8, ceil(N / 64))"),
            (_in_order(x, max(up, 1)),
             "a chunk holds at least 8 rows: chunk = max(8, ceil(N / 64))"),
            (_in_order(x, max(8, up), reverse_parts=True),
             "add the 8 partial sums in order: 0, then 1, ..., 7"),
            (_in_order(x, max(8, up), reverse_chunks=True),
             "add the chunks' sums in order, first chunk first"),
            (_in_order(x, max(8, up), dtype=np.float64),
             "add in float32, as the kernel does (float64 rounds otherwise)")]


def check_column_sums(fn, g):
    r = np.random.default_rng(111)
    for n, d in ((1, 3), (5, 2), (1000, 4), (513, 6), (100, 7), (4097, 3), (9, 3), (64, 5)):
        g.start(f"g of shape ({n}, {d}), float32")
        # wide range
        x = (r.standard_normal((n, d)) * 10.0 ** r.uniform(-3, 3, (n, d))).astype(np.float32)
        ref = kernels.column_sum_order(x)
        g.write_hints = {"g": "add into new arrays (np.zeros((8, d), np.float32) for the partial "
                              "sums)"}
        yours = g.call(fn, x)
        g.cmp("the sums", yours, ref, tol=np.inf)        # its shape, its kind: within any tolerance
        if np.asarray(yours).dtype != np.float32:
            g.fail(f"return float32 numbers, got {np.asarray(yours).dtype}: add in float32, as the "
                   f"kernel does")
        if np.array_equal(yours, ref):
            continue
        for wrong, hint in column_sum_orders(x):
            if np.array_equal(yours, wrong):
                g.fail(f"the last bits differ from the kernel's in {int((yours != ref).sum())} of "
                       f"{d} columns: {hint}")
        worst = float(np.max(np.abs(np.asarray(yours, np.float64) - ref)))
        close = worst <= 8 * np.finfo(np.float32).eps * np.sqrt(n) * float(np.abs(x).sum(0).max())
        g.fail(f"max diff {worst:.3g} from the kernel's sums: "
               + ("the same sums added in another order (the kernel: chunks of max(8, ceil(N / "
                  "64)) rows, 8 partial sums of every 8th row, then in order)" if close
               else "more than another order of additions explains: a row missed or counted "
                    "twice?"))


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def transfer_megabytes_mistakes(ref, dtype):
    return [(ref * 1e6 / 2 ** 20, "a megabyte here is 10^6 bytes (MB), not 2^20 (MiB)"),
            (ref / np.dtype(dtype).itemsize,
             "times the bytes per element (np.dtype(dtype).itemsize)"),
            (ref / np.dtype(dtype).itemsize * 4,
             "the bytes per element depend on the dtype: np.dtype(dtype).itemsize (4 only for "
             "float32)")]


def layer_norm_mistakes(x, gamma, beta, eps=1e-6):
    centred = x - x.mean(-1, keepdims=True)
    default = [(gamma * centred / np.sqrt(x.var(-1, keepdims=True) + 1e-6) + beta,
                "use the eps given, not 1e-6")] if eps != 1e-6 else []
    return default + [(gamma * centred / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta,
                       "the variance is the mean of squares (ddof=0), not the sample variance"),
                      (gamma * centred / (np.sqrt(x.var(-1, keepdims=True)) + eps) + beta,
                       "eps goes inside the sqrt"),
                      (gamma * centred / np.sqrt(x.var(-1, keepdims=True)) + beta,
                       "you left out eps: divide by sqrt(var + eps)"),
                      (gamma * centred / np.sqrt(np.maximum((x * x).mean(-1, keepdims=True) -
                                                            x.mean(-1, keepdims=True) ** 2, 0)
                                                 + eps) + beta,
                       "the variance as E[x^2] - E[x]^2 cancels catastrophically when the mean is "
                       "large against the spread: take the mean of the squared deviations, ((x - "
                       "mu) ** 2).mean()")]


ITEMS = [("transfer_megabytes", check_transfer_megabytes), ("layer_norm", check_layer_norm),
         ("gemm_operand", check_gemm_operand), ("column_sums", check_column_sums)]
