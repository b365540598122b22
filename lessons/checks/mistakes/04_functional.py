"""Lesson 04's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("softmax", """
        def softmax(x, axis=-1):
            return np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)
    """, "subtract the maximum"),
    ("softmax", (("x.max(axis=axis, keepdims=True)", "x.max(axis=-1, keepdims=True)"),
      ("e.sum(axis=axis, keepdims=True)", "e.sum(axis=-1, keepdims=True)")),
     "not the last axis"),
    ("softmax", ("x - x.max(axis=axis, keepdims=True)", "x - x.max()"),
     "each row's own maximum"),
    # fine near 1000
    ("softmax", ("x - x.max(axis=axis, keepdims=True)", "x - x.min(axis=axis, keepdims=True)"),
     "not its minimum or mean"),
    ("softmax", ("x - x.max(axis=axis, keepdims=True)", "x - x.mean(axis=axis, keepdims=True)"),
     "not its minimum or mean"),
    ("softmax_backward", """
        def softmax_backward(y, dy, axis=-1):
            return y * dy
    """, "you left out - sum(dy * y)"),
    ("softmax_backward", ("(dy * y).sum(axis=axis", "(dy * y).sum(axis=-1"),
     "sum along `axis`"),
    ("softmax_backward", ("y * (dy - (dy * y).sum(", "(dy - (dy * y).sum("),
     "multiply by y"),
    ("softmax_backward",
     ("return y * (dy - (dy * y).sum(axis=axis, keepdims=True))", "return y * (1 - y) * dy"),
     "only the diagonal of the Jacobian"),
    ("cross_entropy_backward", """
        _right = cross_entropy_backward
        def cross_entropy_backward(logits, target, label_smoothing=0.0, ignore_index=None):
            valid = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
            return _right(logits, target, label_smoothing, ignore_index) * max(int(valid.sum()), 1)
    """, "divide by the number of counted rows"),
    ("cross_entropy_backward", ("return (p - q) * valid[..., None] / n", "return (p - q) / n"),
     "rows whose target is ignore_index get a zero gradient"),
    ("cross_entropy_backward", ("n = max(int(valid.sum()), 1)", "n = valid.size"),
     "divide by the rows that count"),
    ("cross_entropy_backward", ("1 - eps + eps / V, axis=-1)", "1 - eps, axis=-1)"),
     "the target gets eps / V too"),
    ("cross_entropy_backward",
     (("q = np.full(logits.shape, eps / V)", "q = np.zeros(logits.shape)"),
      ("1 - eps + eps / V, axis=-1)", "1.0, axis=-1)")),
     "not onehot"),
    ("cross_entropy_backward", ("p = softmax(logits)", "p = logits"),
     "the probabilities p, not the logits z"),
    ("cross_entropy_backward", """
        # np.eye(V)[-100]
        def cross_entropy_backward(logits, target, label_smoothing=0.0, ignore_index=None):
            V, eps = logits.shape[-1], label_smoothing
            valid = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
            q = (1 - eps) * np.eye(V)[target] + eps / V
            return (softmax(logits) - q) * valid[..., None] / max(int(valid.sum()), 1)
    """, "give it a safe id"),
    ("cross_entropy_backward",
     ("t = np.where(valid, target, 0)", "target[~valid] = 0\n    t = target"),
     "changed its input target in place"),
    ("cross_entropy_backward",
     ("n = max(int(valid.sum()), 1)", "n = logits.shape[0] if valid.any() else 1"),
     "not by the batch size"),
    ("layer_norm_backward", ("keepdims=True) + eps)", "keepdims=True))"),
     "you left out eps"),
    # right for the default eps
    ("layer_norm_backward", ("keepdims=True) + eps)", "keepdims=True) + 1e-6)"),
     "use the eps you are given"),
    ("layer_norm_backward", ("keepdims=True) + eps)", "keepdims=True) + 1e-5)"),
     "PyTorch's default"),
    # dgamma and dbeta then wrong too
    ("layer_norm_backward", ("g = dy * gamma ", "dy *= gamma\n    g = dy "),
     "changed its input dy in place"),
    ("layer_norm_backward", ("    mu = x.mean(axis=-1, keepdims=True)\n",
                             "    x -= x.mean(axis=-1, keepdims=True)\n    mu = 0\n"),
     "changed its input x in place"),
    ("layer_norm_backward", ("(dy * xhat).reshape(-1, D)", "(dy * x).reshape(-1, D)"),
     "the normalised x"),
    ("layer_norm_backward", ("dy.reshape(-1, D).sum(axis=0)", "dy.reshape(-1, D).mean(axis=0)"),
     "not mean"),
    ("layer_norm_backward", ("(g - g.mean(axis=-1, keepdims=True)\n", "(g\n"),
     "you left out - mean(g)"),
    ("layer_norm_backward",
     ("((x - mu) ** 2).mean(axis=-1, keepdims=True)", "x.var(axis=-1, ddof=1, keepdims=True)"),
     "not by D - 1"),
    ("layer_norm_backward", ("(dy * xhat).reshape(-1, D).sum(axis=0)", "(dy * xhat).sum(axis=-1)"),
     "sum dy * xhat over every leading axis"),
    ("layer_norm_backward", """
        def layer_norm_backward(x, gamma, dy, eps=1e-6):   # mu and sigma taken as constants
            mu = x.mean(-1, keepdims=True)
            sigma = np.sqrt(x.var(-1, keepdims=True) + eps)
            D = x.shape[-1]
            xhat = (x - mu) / sigma
            return dy * gamma / sigma, (dy * xhat).reshape(-1, D).sum(0), dy.reshape(-1, D).sum(0)
    """, "you treated them as constants"),
    ("softmax_backward", ("return y * (dy - (dy * y).sum(axis=axis, keepdims=True))",
                          "dy -= (dy * y).sum(axis=axis, keepdims=True)\n    return y * dy"),
     "writing into it corrupts other tensors' gradients"),
    ("cross_entropy_backward", ("p = softmax(logits)",
                                # right in float64
                                "p = np.exp(logits)\n    p = p / p.sum(axis=-1, keepdims=True)"),
     "exp of a float32 logit near 100 overflows"),
    ("layer_norm_backward", ("sigma = np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)",
                             "sigma = np.sqrt((x * x).mean(axis=-1, keepdims=True) "
                             "- mu ** 2 + eps)"),
     "compute the variance as mean((x - mu)^2)"),
]
