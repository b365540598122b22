"""Lesson 04, functional: softmax, and the backward passes of softmax, cross-entropy (label
smoothing, ignore_index) and LayerNorm, against F.softmax, F.cross_entropy and F.layer_norm and
their gradients; each backward also goes through mt.gradcheck behind the package's forward."""
import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from .common import EPS, GRADIENT, NEW_ARRAY, leaf, with_your_backward

CANCELS = ("on rows of mean 300 and variance 1e-4, mean(x^2) - mu^2 loses about 9 of float64's 16 "
           "digits (two numbers near 90000 whose difference is 1e-4): compute the variance as "
           "mean((x - mu)^2)")


def check_softmax(fn, g):
    r = np.random.default_rng(40).standard_normal
    overflow = "exp(1000) overflows: subtract the maximum along the axis first (it cancels)"
    underflow = ("subtract each row's own maximum (along `axis`), not the whole array's: exp(0 - "
                 "1000) underflows to 0 and the row is 0/0")
    span = ("subtract each row's maximum, not its minimum or mean: exp(x - min) overflows in a row "
            "that spans 1000, while x - max is at most 0")
    cases = [("shape (3, 5)", 3 * r((3, 5)), -1, overflow),
             ("shape (2, 3, 4), axis=0", r((2, 3, 4)), 0, overflow),
             ("logits near 1000", 1000 + r((2, 4)), -1, overflow),
             ("shape (4, 3), axis=0", r((4, 3)), 0, overflow),
             ("shape (6,)", r(6), -1, overflow),
             ("one row near 1000, one near 0", np.array([[1000, 999, 998], [0, 1, -1]]) + r((2, 3)),
              -1, underflow),
             ("rows that span 1000", np.array([[1000, 0, 1, -1], [-1000, 0, 2, 1]]) + r((2, 4)), -1,
              span)]
    for case, x, axis, nan_hint in cases:
        g.start(case)
        ref = F.softmax(mt.tensor(x), axis=axis).numpy()
        last = np.exp(x - x.max(-1, keepdims=True))
        known = [] if axis in (-1, x.ndim - 1) else [(last / last.sum(-1, keepdims=True),
                                                      "take the max and the sum along `axis`, not "
                                                      "the last axis")]
        g.cmp("softmax", g.call(fn, x.copy(), axis=axis), ref, known=known, nan_hint=nan_hint)


def check_softmax_backward(fn, g):
    r = np.random.default_rng(41).standard_normal
    for case, shape, axis in [("shape (3, 5)", (3, 5), -1),
                              ("shape (2, 3, 4), axis=1", (2, 3, 4), 1),
                              ("shape (4, 3), axis=0", (4, 3), 0), ("shape (7,)", (7,), -1)]:
        g.start(case)
        x, dy = leaf(2 * r(shape)), r(shape)
        y = F.softmax(x, axis=axis)
        y.backward(dy)
        y = y.numpy()
        g.cmp("dx", g.call(fn, y.copy(), dy.copy(), axis=axis), x.grad,
              known=softmax_backward_mistakes(y, dy, axis))
    g.gradcheck(lambda x: with_your_backward(F.softmax,
                                             lambda gr: (fn(F.softmax(x.detach()).data, gr),), [x]),
                leaf(r((3, 4))), case="mt.gradcheck, x (3, 4)")


def check_cross_entropy_backward(fn, g):
    r = np.random.default_rng(42).standard_normal
    z4 = r((4, 5))
    z32 = r((3, 6))                              # float32 logits near 100 and 1000: exp overflows
    cases = [("logits (4, 5), no smoothing", z4, np.array([0, 3, 3, 1]), 0.0, None),
             ("logits (4, 5), label_smoothing=0.1", z4, np.array([0, 3, 3, 1]), 0.1, None),
             ("logits (2, 3, 6), label_smoothing=0.1, ignore_index=0", r((2, 3, 6)),
              np.array([[2, 4, 0], [1, 0, 0]]), 0.1, 0),
             ("every row ignored", r((2, 4)), np.array([0, 0]), 0.1, 0),
             ("logits (2, 3, 5), ignore_index=-100 (PyTorch's)", r((2, 3, 5)),
              np.array([[1, -100, 4], [-100, 0, 2]]), 0.0, -100),
             ("float32 logits near 100, label_smoothing=0.1", (100 + z32).astype(np.float32),
              np.array([1, 0, 5]), 0.1, None),
             ("float32 logits near 1000, label_smoothing=0.1", (1000 + z32).astype(np.float32),
              np.array([2, 2, 4]), 0.1, None)]
    g.write_hints = {"target": "give ignored rows a safe id in a new array (np.where(valid, "
                               "target, 0) makes one)"}
    for case, z, t, eps, ignore in cases:
        g.start(case)
        # (values below 1)
        tol = None if z.dtype == np.float64 else 64 * float(np.finfo(np.float32).eps)
        g.error_hint = ("an ignored row's target is ignore_index, -100 here, and no id of the "
                        "vocabulary: give it a safe id (np.where(valid, target, 0)) before "
                        "indexing with it") if ignore == -100 else ""
        z_leaf = leaf(z)
        F.cross_entropy(z_leaf, t, ignore_index=ignore, label_smoothing=eps).backward()
        got = g.call(fn, z.copy(), t.copy(), label_smoothing=eps, ignore_index=ignore)
        g.cmp("dlogits", got, z_leaf.grad, tol=tol,
              known=cross_entropy_backward_mistakes(z, t, eps, ignore),
              nan_hint="with every row ignored the gradient is 0, not 0/0" if z.dtype == np.float64
              else
              "exp of a float32 logit near 100 overflows (float32 ends near 3.4e38, e^89): "
              "subtract each row's largest logit before exp (it cancels)")
    g.error_hint = ""
    z, t = r((3, 4)), np.array([1, 0, 3])

    def ce(z):
        return with_your_backward(lambda z: F.cross_entropy(z, t, ignore_index=0,
                                                            label_smoothing=0.1),
                                  lambda gr: (gr * fn(z.data, t, label_smoothing=0.1,
                                                      ignore_index=0),), [z])
    g.gradcheck(ce, leaf(z),
                case="mt.gradcheck, logits (3, 4), label_smoothing=0.1, ignore_index=0")


def check_layer_norm_backward(fn, g):
    r = np.random.default_rng(43).standard_normal
    cases = [("x (2, 3, 6)", 4 * r((2, 3, 6)) + 1, {}), ("x (4, 5)", r((4, 5)), {}),
             ("x (1, 8)", 3 * r((1, 8)), {}),
             ("x (3, 4), rows of variance ~0.01, eps=0.1", 1 + 0.1 * r((3, 4)), {"eps": 0.1}),
             ("x (2, 5), rows of variance ~0.003, eps=0.01", 1 + 0.05 * r((2, 5)), {"eps": 0.01}),
             ("x (3, 8), rows of mean 300 and variance 1e-4", 300 + 0.01 * r((3, 8)), {})]
    g.write_hints = {"x": NEW_ARRAY + ": x - mu makes one", "dy": GRADIENT}
    for case, x, kwargs in cases:
        g.start(case)
        big = abs(x.mean()) > 100            # float64 round-off grows with |mean| / std: 300 / 0.01
        tol = 64 * EPS * abs(x.mean()) / x.std() if big else None
        D = x.shape[-1]
        gamma, beta, dy = r(D), r(D), r(x.shape)
        leaves = [leaf(x), leaf(gamma), leaf(beta)]
        F.layer_norm(*leaves, **kwargs).backward(dy)
        dx, dgamma, dbeta = g.unpack(g.call(fn, x.copy(), gamma.copy(), dy.copy(), **kwargs),
                                     ["dx", "dgamma", "dbeta"])
        g.cmp("dx", dx, leaves[0].grad,
              known=[] if big else layer_norm_backward_mistakes(x, gamma, dy, **kwargs),
              tol=None if tol is None else tol * float(np.abs(leaves[0].grad).max()),
              otherwise=CANCELS if big else "")
        lead = x.reshape(-1, D).shape[0]
        g.cmp("dgamma", dgamma, leaves[1].grad,
              shape_hint="sum dy * xhat over every leading axis: gamma is shared",
              known=[((dy * x).reshape(-1, D).sum(0),
                      "dgamma = sum(dy * xhat): the normalised x, not x"),
                     (leaves[1].grad / lead, "sum over the leading axes, not mean")])
        g.cmp("dbeta", dbeta, leaves[2].grad,
              shape_hint="sum dy over every leading axis: beta is shared",
              known=[(leaves[2].grad / lead, "sum over the leading axes, not mean")])
    g.gradcheck(lambda x, gm, bt: with_your_backward(F.layer_norm,
                                                     lambda gy: tuple(fn(x.data, gm.data, gy)),
                                                     [x, gm, bt]),
                leaf(r((2, 5))), leaf(r(5)), leaf(r(5)), case="mt.gradcheck, x (2, 5)")


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def softmax_backward_mistakes(y, dy, axis):
    known = [(y * dy,
              "you left out - sum(dy * y): every y_i depends on every x_j (lesson 04, section 1)"),
             (dy - (dy * y).sum(axis, keepdims=True), "multiply by y: dx = y * (dy - sum(dy * y))"),
             (y * (dy - dy.sum(axis, keepdims=True)), "the sum is of dy * y, not of dy alone"),
             (y * (1 - y) * dy, "y_i (1 - y_i) is only the diagonal of the Jacobian: dy_i / dx_j = "
                                "y_i (delta_ij - y_j) for every j, so dx = y * (dy - sum(dy * y))")]
    if axis != -1:
        known.append((y * (dy - (dy * y).sum(-1, keepdims=True)),
                      "sum along `axis`, the softmax's axis"))
    return known


def cross_entropy_backward_mistakes(z, t, eps, ignore_index):
    """The usual wrong dz of the mean cross-entropy, by hand in NumPy."""
    V = z.shape[-1]
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    onehot = np.eye(V)[np.where(t == ignore_index, 0, t) if ignore_index is not None else t]
    valid = (t != ignore_index)[..., None] if ignore_index is not None else np.ones(t.shape + (1,),
                                                                                    bool)
    n = max(int(valid.sum()), 1)
    q = (1 - eps) * onehot + eps / V
    t2t = (1 - eps) * onehot + eps / (V - 1) * (1 - onehot)
    bare = (1 - eps) * onehot + eps / V * (1 - onehot)
    known = [((p - q) * valid, "divide by the number of counted rows: the loss is their mean"),
             ((z - q) * valid / n, "dz = softmax(z) - q: the probabilities p, not the logits z"),
             ((p - onehot) * valid / n,
              "label smoothing: the target is q = (1 - eps) onehot + eps / V, not onehot"),
             ((p - q) * valid / valid.size,
              "divide by the rows that count (target != ignore_index), not all rows"),
             ((p - q) / n, "rows whose target is ignore_index get a zero gradient"),
             ((p - t2t) * valid / n,
              "q = (1 - eps) onehot + eps / V: every token, the target included, gets eps / V"),
             ((p - bare) * valid / n, "the target gets eps / V too: q_t = 1 - eps + eps / V")]
    if z.ndim > 2:                               # (batch, time, V): the batch size is not the count
        known.append(((p - q) * valid / z.shape[0],
                      "divide by the number of counted rows (every position of every sequence), "
                      "not by the batch size"))
    return known


def layer_norm_backward_mistakes(x, gamma, dy, eps=1e-6):
    mu, sigma = x.mean(-1, keepdims=True), np.sqrt(x.var(-1, keepdims=True) + eps)
    xhat, gx = (x - mu) / sigma, dy * gamma

    def mean(a):
        return a.mean(-1, keepdims=True)
    unbiased = np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps)
    xu = (x - mu) / unbiased
    return [(gx / sigma, "mu and sigma depend on every x_j: you treated them as constants (lesson "
                         "04, section 4)"),
            ((gx - mean(gx) - xu * mean(gx * xu)) / unbiased,
             "the variance divides by D (ddof=0), as LayerNorm's forward does, not by D - 1"),
            ((gx - xhat * mean(gx * xhat)) / sigma,
             "you left out - mean(g): mu depends on every x_j"),
            ((gx - mean(gx)) / sigma,
             "you left out - xhat * mean(g * xhat): sigma depends on every x_j"),
            ((dy - mean(dy) - xhat * mean(dy * xhat)) / sigma,
             "g = dy * gamma: multiply by gamma first"),
            ((gx - mean(gx) - xhat * mean(gx * xhat)) * sigma, "divide by sigma, do not multiply"),
            (lambda: dx_with_eps(x, gx, 0.0), "you left out eps: sigma = sqrt(var + eps)"),
            # (a wrong shape is skipped)
            (lambda: dx_with_eps(x, gx, 1e-5) if eps != 1e-5 else np.zeros(0),
             "that is eps = 1e-5, PyTorch's default: use the eps you are given"),
            (lambda: dx_with_eps(x, gx, 1e-6) if eps != 1e-6 else np.zeros(0),
             "that is eps = 1e-6, the default: use the eps you are given")]


def dx_with_eps(x, gx, eps):
    """LayerNorm's dx with sigma = sqrt(var + eps) (eps = 0: no eps)."""
    sigma = np.sqrt(x.var(-1, keepdims=True) + eps)
    xhat = (x - x.mean(-1, keepdims=True)) / sigma
    return (gx - gx.mean(-1, keepdims=True) - xhat * (gx * xhat).mean(-1, keepdims=True)) / sigma


ITEMS = [("softmax", check_softmax), ("softmax_backward", check_softmax_backward),
         ("cross_entropy_backward", check_cross_entropy_backward),
         ("layer_norm_backward", check_layer_norm_backward)]
