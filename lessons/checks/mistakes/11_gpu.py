"""Lesson 11's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py says how to read it)."""
MISTAKES = [
    ("transfer_megabytes", """
        def transfer_megabytes(shape, dtype):
            return math.prod(shape) * np.dtype(dtype).itemsize / 2 ** 20
    """, "not 2^20 (MiB)"),
    ("layer_norm", """
        def layer_norm(x, gamma, beta, eps=1e-6):
            return gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta
    """, "ddof=0"),
    ("layer_norm", ("np.sqrt(var + eps)", "np.sqrt(var)"),
     "you left out eps"),
    ("gemm_operand", ("strides[0] // itemsize, strides[1] // itemsize", "strides[0], strides[1]"),
     "strides count bytes"),
    ("gemm_operand", ("return False, cols if rows == 1", "return True, cols if rows == 1"), "transposed should be False"),
    ("gemm_operand", ("max(to_next_row, cols)", "cols"), "can exceed the row's length when rows are padded"),
    ("gemm_operand", ("max(to_next_row, cols)", "max(strides[0], cols)"), "ld counts elements, not bytes"),
    ("gemm_operand", ("max(to_next_col, rows)", "rows"), "can exceed the row's length"),
    ("gemm_operand", """
        def gemm_operand(shape, strides, itemsize):            # every layout taken as C-ordered
            return False, strides[0] // itemsize
    """, "transposed should be True"),
    ("gemm_operand", ("    return None\n\n", "    return False, shape[1]\n\n"), "return None"),
    ("column_sums", """
        def column_sums(g):
            return g.sum(axis=0)
    """, "that is NumPy's order"),
    ("column_sums", ("range(start + k, stop, 8)", "range(start + k * (stop - start) // 8, start + (k + 1) * (stop - start) // 8)"),
     "added in another order"),
    ("column_sums", ("for k in range(8):\n            for row in range(start + k, stop, 8):",
                     "for k in range(1):\n            for row in range(start, stop):"), "every 8th row"),
    ("column_sums", ("chunk = max(8, -(-n // 64))", "chunk = 64"), "at most 64 chunks"),
    ("column_sums", ("chunk = max(8, -(-n // 64))", "chunk = max(8, n // 64)"), "round N / 64 up"),
    ("column_sums", ("chunk = max(8, -(-n // 64))", "chunk = -(-n // 64)"), "at least 8 rows"),
    ("column_sums", ("for k in range(1, 8):", "for k in range(7, 0, -1):"), "the 8 partial sums in order"),
    ("column_sums", ("for start in range(0, n, chunk):", "for start in reversed(range(0, n, chunk)):"),
     "the chunks' sums in order"),
    ("column_sums", (("total = np.zeros(d, np.float32)", "total = np.zeros(d)"), ("np.zeros((8, d), np.float32)", "np.zeros((8, d))"),
                     ("return total\n", "return total.astype(np.float32)\n")), "add in float32"),
    ("column_sums", ("total = np.zeros(d, np.float32)", "total = np.zeros(d)"), "return float32"),
    ("column_sums", ("range(start + k, stop, 8)", "range(start + k, stop - 1, 8)"), "a row missed"),
]
