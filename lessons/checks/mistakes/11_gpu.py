"""Lesson 11's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("transfer_megabytes", """
        def transfer_megabytes(shape, dtype):
            return math.prod(shape) * np.dtype(dtype).itemsize / 2 ** 20
    """, "not 2^20 (MiB)"),
    # a type works, x.dtype not
    ("transfer_megabytes", ("np.dtype(dtype).itemsize / 1e6", "dtype(0).itemsize / 1e6"),
     "np.dtype(dtype).itemsize reads both"),
    ("transfer_megabytes", ("np.dtype(dtype).itemsize / 1e6", "4 / 1e6"),
     "the bytes per element depend on the dtype"),
    ("layer_norm", """
        def layer_norm(x, gamma, beta, eps=1e-6):
            return (gamma * (x - x.mean(-1, keepdims=True))
                    / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta)
    """, "ddof=0"),
    ("layer_norm", ("np.sqrt(var + eps)", "np.sqrt(var)"),
     "you left out eps"),
    ("layer_norm", ("np.sqrt(var + eps)", "np.sqrt(var + 1e-6)"), "use the eps given, not 1e-6"),
    ("layer_norm", """
        def layer_norm(x, gamma, beta, eps=1e-6):    # the variance as E[x^2] - E[x]^2
            mu = x.mean(axis=-1, keepdims=True)
            var = (x * x).mean(axis=-1, keepdims=True) - mu * mu
            return gamma * (x - mu) / np.sqrt(var + eps) + beta
    """, "cancels catastrophically"),
    ("layer_norm", """
        def layer_norm(x, gamma, beta, eps=1e-6):    # x centred in place
            x -= x.mean(axis=-1, keepdims=True)
            return gamma * x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) + beta
    """, "layer_norm changed its input x"),
    ("gemm_operand", ("strides[0] // itemsize, strides[1] // itemsize", "strides[0], strides[1]"),
     "strides count bytes"),
    ("gemm_operand", ("return False, cols if rows == 1", "return True, cols if rows == 1"),
     "transposed should be False"),
    ("gemm_operand", ("max(to_next_row, cols)", "cols"),
     "can exceed the row's length when rows are padded"),
    ("gemm_operand", ("max(to_next_row, cols)", "max(strides[0], cols)"),
     "ld counts elements, not bytes"),
    ("gemm_operand", ("max(to_next_col, rows)", "rows"), "can exceed the row's length"),
    ("gemm_operand", """
        def gemm_operand(shape, strides, itemsize):            # every layout taken as C-ordered
            return False, strides[0] // itemsize
    """, "transposed should be True"),
    ("gemm_operand", ("    return None\n\n", "    return False, shape[1]\n\n"), "return None"),
    ("gemm_operand",
     ("return None                                           # not a whole number", "pass  #"),
     "not a whole number of elements"),
    ("gemm_operand", ("return False, cols if rows == 1 else max(to_next_row, cols)",
                      "return False, max(to_next_row, cols)"),
     "a matrix of one row (or one column) takes no step"),
    ("column_sums", """
        def column_sums(g):
            return g.sum(axis=0)
    """, "that is NumPy's order"),
    ("column_sums", ("range(start + k, stop, 8)", "range(start + k * (stop - start) // 8, start + "
                                                  "(k + 1) * (stop - start) // 8)"),
     "added in another order"),
    ("column_sums", ("for k in range(8):\n            for row in range(start + k, stop, 8):",
                     "for k in range(1):\n            for row in range(start, stop):"),
     "every 8th row"),
    ("column_sums", ("chunk = max(8, -(-n // 64))", "chunk = 64"), "at most 64 chunks"),
    ("column_sums", ("chunk = max(8, -(-n // 64))", "chunk = max(8, n // 64)"), "round N / 64 up"),
    ("column_sums", ("chunk = max(8, -(-n // 64))", "chunk = -(-n // 64)"), "at least 8 rows"),
    ("column_sums", ("for k in range(1, 8):", "for k in range(7, 0, -1):"),
     "the 8 partial sums in order"),
    ("column_sums",
     ("for start in range(0, n, chunk):", "for start in reversed(range(0, n, chunk)):"),
     "the chunks' sums in order"),
    ("column_sums", (("total = np.zeros(d, np.float32)", "total = np.zeros(d)"),
                     ("np.zeros((8, d), np.float32)", "np.zeros((8, d))"),
                     ("return total\n", "return total.astype(np.float32)\n")), "add in float32"),
    ("column_sums", ("total = np.zeros(d, np.float32)", "total = np.zeros(d)"), "return float32"),
    ("column_sums", ("range(start + k, stop, 8)", "range(start + k, stop - 1, 8)"), "a row missed"),
    ("column_sums", """
        # the partial sums are views of g's rows: g changes
        def column_sums(g):
            n, d = g.shape
            chunk = max(8, -(-n // 64))
            total = np.zeros(d, np.float32)
            for start in range(0, n, chunk):
                stop = min(start + chunk, n)
                part = g[start:start + 8]
                for k in range(len(part)):
                    for row in range(start + k + 8, stop, 8):
                        part[k] += g[row]
                for k in range(1, len(part)):
                    part[0] += part[k]
                total += part[0]
            return total
    """, "column_sums changed its input g"),
]
