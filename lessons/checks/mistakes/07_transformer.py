"""Lesson 07's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("sinusoids", """
        _right = sinusoids
        def sinusoids(n_positions, d_model):       # cosines in the even columns, sines in the odd
            table = _right(n_positions, d_model)
            table[:, 0::2], table[:, 1::2] = table[:, 1::2].copy(), table[:, 0::2].copy()
            return table
    """, "even columns are sines"),
    ("sinusoids",
     ("-np.arange(0, d_model, 2) / d_model", "-np.arange(0, d_model, 2) / 2 / d_model"),
     "the exponent is 2i / d_model"),
    ("sinusoids", """
        def sinusoids(n_positions, d_model):       # all the sines, then all the cosines
            pos = np.arange(n_positions)[:, None]
            omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
            return np.concatenate([np.sin(pos * omega), np.cos(pos * omega)], axis=1)
    """, "interleave them"),
    ("sinusoids",
     ("pos = np.arange(n_positions)[:, None]", "pos = np.arange(1, n_positions + 1)[:, None]"),
     "positions count from 0"),
    ("sinusoids", ("table = np.empty((n_positions, d_model))",
                   "table = np.empty((n_positions, d_model), np.float32)"),
     "a float64 table"),
    ("count_parameters", """
        _right = count_parameters
        # one attention per decoder layer
        def count_parameters(vocab_size, d_model, d_ff, n_layers):
            return (_right(vocab_size, d_model, d_ff, n_layers)
                    - n_layers * 4 * (d_model ** 2 + d_model))
    """, "two attentions"),
    ("count_parameters", ("norm = 2 * D ", "norm = D "),
     "each LayerNorm has gamma and beta"),
    # = the LayerNorms at F = 4 D
    ("count_parameters", ("ffn = D * F + F + F * D + D", "ffn = D * F + F * D"),
     "each feed-forward network has two biases"),
    ("count_parameters", ("return V * D + N", "return V * D + V + N"),
     "the output projection has no bias"),
]
