"""Lesson 06's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("causal_mask", """
        def causal_mask(T):
            return np.triu(np.ones((T, T), dtype=bool))[None, None]
    """, "the LOWER triangle"),
    ("causal_mask",
     ("np.tril(np.ones((T, T), dtype=bool))", "np.tril(np.ones((T, T), dtype=bool), -1)"),
     "a query may attend to itself"),
    ("causal_mask",
     ("np.tril(np.ones((T, T), dtype=bool))[None, None]", "np.tril(np.ones((T, T), dtype=bool))"),
     "(1, 1, T, T), to broadcast over batch and heads"),
    ("causal_mask", ("np.tril(np.ones((T, T), dtype=bool))", "np.tril(np.ones((T, T)))"),
     "make it boolean"),
    ("attention_forward", """
        _right = attention_forward
        def attention_forward(q, k, v, mask=None):
            return _right(q * math.sqrt(q.shape[-1]), k, v, mask)
    """, "divide the scores by sqrt(d_k)"),
    ("attention_forward", ("p = np.exp(s - s.max(axis=-1, keepdims=True))", "p = np.exp(s)"),
     "subtract each row's largest score before exp"),
    ("attention_forward", (("s = np.where(mask, s, -1e9)", "pass"),
      ("p = p * mask.any(axis=-1, keepdims=True)", "p = p * mask")),
     "mask before the softmax"),
    ("attention_forward", (("s.max(axis=-1", "s.max(axis=-2"),
      ("p.sum(axis=-1", "p.sum(axis=-2")),
     "the softmax runs over the keys (the last axis)"),
    ("attention_forward", ("k, -1, -2) / math.sqrt(q.shape[-1])", "k, -1, -2) / q.shape[-1]"),
     "not by d_k"),
    ("attention_forward", ("s = np.where(mask, s, -1e9)", "s = np.where(mask, -1e9, s)"),
     "the mask is True where attention is ALLOWED"),
    ("attention_forward", ("s = np.where(mask, s, -1e9)", "s = np.where(mask, s, 0.0)"),
     "not 0: exp(0) = 1"),
    ("attention_forward",
     ("k, -1, -2) / math.sqrt(q.shape[-1])", "k, -1, -2) / math.sqrt(v.shape[-1])"),
     "not of v"),                                   # d_v = d_k in every case, once
    ("attention_forward", ("s = np.where(mask, s, -1e9)", "s = np.where(mask, s, -1e4)"),
     "a fill such as -1e4"),
    ("attention_forward", ("s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])",
                           "q /= math.sqrt(q.shape[-1])\n    s = q @ np.swapaxes(k, -1, -2)"),
     "changed its input q in place"),
    ("attention_backward", """
        _right = attention_backward
        def attention_backward(q, k, v, weights, dout):
            dq, dk, dv = _right(q, k, v, weights, dout)
            return dq * math.sqrt(q.shape[-1]), dk * math.sqrt(q.shape[-1]), dv
    """, "you left out the 1/sqrt(d_k)"),
    ("attention_backward", ("dv = np.swapaxes(p, -1, -2) @ dout", "dv = p @ dout"),
     "dV = P^T dO: transpose P"),
    ("attention_backward", ("ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))", "ds = p * dp"),
     "the softmax backward of lesson 04"),
    ("attention_backward", ("c * np.swapaxes(ds, -1, -2) @ q", "c * ds @ q"),
     "transpose dS"),
    ("attention_backward",
     ("(dp * p).sum(axis=-1, keepdims=True)", "(dp * p).sum(axis=-2, keepdims=True)"),
     "sums over the keys, the last axis"),
    ("attention_backward",
     ("c = weights, 1.0 / math.sqrt(q.shape[-1])", "c = weights, 1.0 / math.sqrt(v.shape[-1])"),
     "not of v"),
    ("attention_backward", ("return c * ds @ k, c * np.swapaxes(ds, -1, -2) @ q, dv",
                            "return c * c * ds @ k, c * c * np.swapaxes(ds, -1, -2) @ q, dv"),
     "you divided by sqrt(d_k) twice"),
    ("attention_backward",
     ("(dp * p).sum(axis=-1, keepdims=True)", "dp.sum(axis=-1, keepdims=True)"),
     "not of dP alone"),
    ("attention_backward",
     ("dv = np.swapaxes(p, -1, -2) @ dout", "dv = c * np.swapaxes(p, -1, -2) @ dout"),
     "only the scores S are scaled"),
    ("attention_backward", ("ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))",
                            # dv was computed first
                            "p *= dp - (dp * p).sum(axis=-1, keepdims=True)\n    ds = p"),
     "changed its input weights in place"),
]
