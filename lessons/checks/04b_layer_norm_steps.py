"""Lesson 04, step by step: the gradient of each intermediate of LayerNorm (mu, xc, var, rstd, xhat,
and gamma, beta, x), each step graded on its own against autograd on the same intermediates: a zero
leaf added to an intermediate gets that intermediate's gradient. Each step is given autograd's
gradients from above, so a wrong step fails alone, with the hint of its known mistake."""
import numpy as np

from .common import leaf


def layer_norm_cases():
    """(what, values, grads): the forward values and autograd's gradient of every intermediate, on
    four cases; the last two have rows of small variance and eps = 0.01 and 0.1,
    where eps matters."""
    r = np.random.default_rng(44).standard_normal
    cases = []
    for case, x, eps in [("x (2, 3, 6)", 4 * r((2, 3, 6)) + 1, 1e-6), ("x (4, 5)", r((4, 5)), 1e-6),
                         ("x (3, 8), rows of variance ~0.003, eps=0.01", 1 + 0.05 * r((3, 8)),
                          1e-2),
                         ("x (2, 2, 4), rows of variance ~0.01, eps=0.1", 1 + 0.1 * r((2, 2, 4)),
                          1e-1)]:
        D = x.shape[-1]
        gamma, beta, dy = r(D), r(D), r(x.shape)
        taps, leaves = {}, {"x": leaf(x), "gamma": leaf(gamma), "beta": leaf(beta)}

        def tap(name, t):
            taps[name] = leaf(np.zeros(t.shape))   # adds 0: its gradient is dL/d(that intermediate)
            return t + taps[name]
        mu = tap("mu", leaves["x"].mean(-1, keepdims=True))
        xc = tap("xc", leaves["x"] - mu)
        var = tap("var", (xc * xc).mean(-1, keepdims=True))
        rstd = tap("rstd", (var + eps) ** -0.5)
        xhat = tap("xhat", xc * rstd)
        values = {name: t.numpy().copy() for name, t in
                  (("mu", mu), ("xc", xc), ("var", var), ("rstd", rstd), ("xhat", xhat))}
        (leaves["gamma"] * xhat + leaves["beta"]).backward(dy)
        grads = {name: t.grad for name, t in {**taps, **leaves}.items()}
        cases.append((case, {**values, "gamma": gamma, "eps": eps}, {**grads, "y": dy}))
    return cases


def step(name, inputs, mistakes=lambda v, d: [], shape_hint=""):
    """The checker of one step: call it with `inputs` (names of values v or, as
    "dNAME", gradients d) and compare with autograd's gradient of `name`; mistakes(v, d) are the
    known wrong answers."""
    def check(fn, g):
        for case, v, d in layer_norm_cases():
            g.start(case)
            args = [d[a[1:]].copy() if a.startswith("d") else v[a] if a == "eps" else v[a].copy()
                    for a in inputs]
            g.write_hints = {a: STEPS_READ_IT for a in inputs}   # dxhat feeds both drstd and dxc
            got = g.call(fn, *args)
            g.cmp(f"d{name}", got, d[name], known=mistakes(v, d), shape_hint=shape_hint)
    return check


STEPS_READ_IT = ("the other steps read it too (dxhat feeds both drstd and dxc), and in a graph the "
                 "engine may hand one gradient array to several nodes: compute into a new array (a "
                 "* b makes one, a *= b does not)")


def shared(what):
    return f"{what} (D,) is shared by every position: sum over every leading axis"


def leading_mean(a):
    return a.reshape(-1, a.shape[-1]).mean(axis=0)


def var_mistakes(v, d):
    ve, dr = v["var"] + v["eps"], d["rstd"]
    return [(-ve ** -1.5 * dr,
             "the power rule brings down the exponent: d v^(-1/2) / dv = -1/2 v^(-3/2); the 1/2 is "
             "missing"),
            (0.5 * ve ** -1.5 * dr,
             "the exponent is -1/2, so the factor is -1/2: the minus sign is missing"),
            (-0.5 * ve ** -0.5 * dr,
             "the power rule lowers the exponent by one: -1/2 - 1 = -3/2, not -1/2"),
            (-0.5 * ve ** -1.5,
             "multiply by drstd, the gradient arriving from above (the chain rule)"),
            (-0.5 * v["var"] ** -1.5 * dr, "you left out eps: rstd = (var + eps) ** -0.5"),
            (-0.5 * ve ** -3 / 2 * dr,
             "** -3/2 is (** -3) / 2 in Python, ** binds tighter than /: write ** -1.5"),
            (0.5 * ve ** -0.5 * dr,
             "that is the derivative of sqrt(v); rstd = 1 / sqrt(v) = v^(-1/2), and d v^(-1/2) / "
             "dv = -1/2 v^(-3/2)"),
            (-1.5 * ve ** -2.5 * dr,
             "that is the derivative of v^(-3/2); rstd = v^(-1/2): n = -1/2, so -1/2 v^(-3/2)")] + \
        ([(-0.5 * (v["var"] + 1e-6) ** -1.5 * dr,
           "that is eps = 1e-6, the default: use the eps you are given")]
         if v["eps"] != 1e-6 else [])


LAST_AXIS = "D is the size of the last axis, xc.shape[-1], not of the first (len(xc))"


def xc_mistakes(v, d):
    D, through_xhat, through_var = v["xc"].shape[-1], d["xhat"] * v["rstd"], d["var"] * 2 * v["xc"]
    return [(through_xhat,
             "xc is used twice, in xhat and in var: add the path through var, dvar * 2 xc / D"),
            (d["xhat"] / v["rstd"] + through_var / D,
             "multiply by rstd, do not divide: xhat = xc * rstd"),
            (through_xhat - through_var / D,
             "var = mean(xc ** 2): the path through var has a plus sign, + dvar * 2 xc / D"),
            (through_var / D, "xc is used twice: add the path through xhat, dxhat * rstd"),
            (through_xhat + through_var,
             "var is a MEAN of xc ** 2: d var / d xc_j = 2 xc_j / D; the 1/D is missing"),
            (through_xhat + through_var / 2 / D,
             "d (xc_j ** 2) / d xc_j = 2 xc_j: the factor 2 is missing"),
            (through_xhat + through_var / v["xc"].shape[0], LAST_AXIS)]


def x_mistakes(v, d):
    D, dxc, dmu = v["xc"].shape[-1], d["xc"], d["mu"]
    return [(dxc + dmu, "mu is a mean: d mu / d x_j = 1/D, so the path through mu adds dmu / D"),
            (dxc + dmu * D,
             "mu is a mean: d mu / d x_j = 1/D, so divide dmu by D, do not multiply"),
            (dxc, "x is used twice, in xc = x - mu and in mu = mean(x): add the path through mu, "
                  "dmu / D"),
            (dxc - dmu / D, "dmu already holds the minus sign of xc = x - mu: add dmu / D"),
            (dxc + dmu / dxc.shape[0], LAST_AXIS)]


BROADCAST = ("has shape (..., 1) and was broadcast over the D features: sum over the last axis, "
             "keepdims=True")
ITEMS = [
    ("grad_gamma", step("gamma", ["dy", "xhat"], shape_hint=shared("gamma"), mistakes=lambda v, d: [
        (d["beta"], "multiply by xhat: d y_i / d gamma_i = xhat_i"),
        (leading_mean(d["y"] * v["xhat"]),
         "sum over the leading axes, not mean: every position adds its share")])),
    ("grad_beta", step("beta", ["dy"], shape_hint=shared("beta"), mistakes=lambda v, d: [
        (leading_mean(d["y"]),
         "sum over the leading axes, not mean: every position adds its share")])),
    ("grad_xhat", step("xhat", ["dy", "gamma"], mistakes=lambda v, d: [
        (d["y"], "multiply by gamma: y = gamma * xhat + beta"),
        (d["y"] / v["gamma"], "multiply by gamma, do not divide: d y_i / d xhat_i = gamma_i"),
        (np.broadcast_to(v["gamma"], d["y"].shape),
         "multiply by dy, the gradient arriving from above (the chain rule)")])),
    ("grad_rstd",
     step("rstd", ["dxhat", "xc"], shape_hint="rstd " + BROADCAST, mistakes=lambda v, d: [
        ((d["xhat"] * v["xc"]).mean(-1, keepdims=True),
         "sum over the last axis, not mean: every feature adds its share"),
        (d["xhat"].sum(-1, keepdims=True), "multiply by xc: d xhat_j / d rstd = xc_j"),
        (-d["rstd"],
         "xhat = xc * rstd: d xhat_j / d rstd = +xc_j, no minus sign (the minus comes in dvar)")])),
    ("grad_var", step("var", ["drstd", "var", "eps"], mistakes=var_mistakes)),
    ("grad_xc", step("xc", ["dxhat", "rstd", "dvar", "xc"], mistakes=xc_mistakes)),
    ("grad_mu", step("mu", ["dxc"], shape_hint="mu " + BROADCAST, mistakes=lambda v, d: [
        (-d["mu"], "xc = x - mu: d xc_j / d mu = -1; the minus sign is missing"),
        (d["mu"] / v["xc"].shape[-1],
         "sum over the last axis, not mean: every feature adds its share")])),
    ("grad_x", step("x", ["dxc", "dmu"], mistakes=x_mistakes,
                    shape_hint="x is (..., D): the direct path dxc plus dmu / D, broadcast over "
                               "the last axis")),
]
