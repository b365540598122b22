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
]
