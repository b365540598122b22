"""Lesson 07's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py says how to read it)."""
MISTAKES = [
    ("sinusoids", """
        _right = sinusoids
        def sinusoids(n_positions, d_model):       # cosines in the even columns, sines in the odd
            table = _right(n_positions, d_model)
            table[:, 0::2], table[:, 1::2] = table[:, 1::2].copy(), table[:, 0::2].copy()
            return table
    """, "even columns are sines"),
    ("sinusoids", ("-np.arange(0, d_model, 2) / d_model", "-np.arange(0, d_model, 2) / 2 / d_model"),
     "the exponent is 2i / d_model"),
    ("count_parameters", """
        _right = count_parameters
        def count_parameters(vocab_size, d_model, d_ff, n_layers):   # one attention per decoder layer
            return _right(vocab_size, d_model, d_ff, n_layers) - n_layers * 4 * (d_model ** 2 + d_model)
    """, "two attentions"),
    ("count_parameters", ("norm = 2 * D ", "norm = D "),
     "each LayerNorm has gamma and beta"),
]
