"""Lesson 03's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("numeric_gradient", """
        def numeric_gradient(f, x, eps=1e-6):       # one-sided
            grad, base = np.empty(x.shape), f(x)
            for i in range(x.size):
                old = x.flat[i]
                x.flat[i] = old + eps
                grad.flat[i] = (f(x) - base) / eps
                x.flat[i] = old
            return grad
    """, "one-sided difference"),
    ("numeric_gradient", ("out[i] = (up - down) / (2 * eps)", "out[i] = (up - down) / eps"),
     "yours is twice the answer"),
    ("numeric_gradient", """
        # the eps argument ignored: right on the quadratic, at any step
        def numeric_gradient(f, x, eps=1e-6):
            grad, h = np.empty(x.shape), 1e-5
            for i in range(x.size):
                old = x.flat[i]
                x.flat[i] = old + h
                up = f(x)
                x.flat[i] = old - h
                down = f(x)
                x.flat[i] = old
                grad.flat[i] = (up - down) / (2 * h)
            return grad
    """, "use the eps you are given"),
    ("gradcheck", """
        def gradcheck(op, *arrays, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0):   # R = ones
            xs = [np.array(a, dtype=np.float64) for a in arrays]
            leaves = [mt.tensor(x, requires_grad=True) for x in xs]
            op(*leaves).sum().backward()
            for i, leaf in enumerate(leaves):
                def loss(xi, i=i):
                    with mt.no_grad():
                        return float(op(*[mt.tensor(xi if j == i else x)
                                          for j, x in enumerate(xs)]).data.sum())
                numeric = numeric_gradient(loss, xs[i], eps)
                analytic = leaf.grad if leaf.grad is not None else np.zeros(xs[i].shape)
                if np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric)):
                    return False
            return True
    """, "fixed random R"),
    ("gradcheck", ("analytic = leaf.grad if leaf.grad is not None else np.zeros(xs[i].shape)",
                   "analytic = leaf.grad"),
     "keeps .grad None: its gradient is zeros"),
    ("gradcheck", ("np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric))",
                   "np.any(np.abs(analytic - numeric) > rtol * np.abs(numeric))"),
     "keep the atol"),
    # CS231n's relative error
    ("gradcheck", ("np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric))",
                   "np.any(np.abs(analytic - numeric) > rtol * np.maximum(np.abs(analytic), "
                   "np.abs(numeric)))"),
     "keep the atol"),
    ("gradcheck", ("np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric))",
                   "np.mean(np.abs(analytic - numeric)) > atol + rtol * np.mean(np.abs(numeric))"),
     "not the mean, the sum or the max"),
    ("gradcheck", ("np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric))",
                   "np.abs(analytic - numeric).max() > atol + rtol * np.abs(numeric).max()"),
     "not the mean, the sum or the max"),
    ("gradcheck", ("np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric))",
                   # NumPy's own atol and rtol, not the ones given
                   "not np.allclose(analytic, numeric)"),
     "the atol and rtol you are given"),
    ("numeric_gradient", """
        def numeric_gradient(f, x, eps=1e-6):       # x "put back" by adding eps again
            grad = np.zeros(x.shape)
            for i in range(x.size):
                x.flat[i] += eps
                up = f(x)
                x.flat[i] -= 2 * eps
                down = f(x)
                x.flat[i] += eps
                grad.flat[i] = (up - down) / (2 * eps)
            return grad
    """, "is not always x in floating point"),
]
