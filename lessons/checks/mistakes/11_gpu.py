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
]
