"""Lesson 03, gradcheck: numeric_gradient against gradients known in closed form, and gradcheck,
whose True or False must agree with mt.gradcheck's on right backward passes and on
deliberately wrong ones."""
import numpy as np

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.tensor import make_node

from .common import leaf


def quadratic(rng, shape, eps):
    """A case: sum(a x^2 + b x) + x_first x_last, on which central differences are exact."""
    a, b = rng.uniform(0.5, 2.0, shape), rng.standard_normal(shape)
    x = rng.standard_normal(shape)
    ref = 2 * a * x + b
    ref.flat[0] += x.flat[-1]
    ref.flat[-1] += x.flat[0]
    return (f"a quadratic, shape {shape}, eps={eps:g} (central differences are exact on it)",
            lambda x: float(np.sum(a * x * x + b * x) + x.flat[0] * x.flat[-1]), x, {"eps": eps},
            ref, 1e-8, numeric_gradient_mistakes(ref, a, eps))


def sines(x, eps, times):
    """A case: `times` sum(sin(x)) at step eps, whose central difference is times
    cos(x) sin(eps) / eps."""
    return (f"{times} sum(sin(x)), eps={eps:g}: the central difference is {times} cos(x) sin(eps) "
            f"/ eps", lambda x: times * float(np.sum(np.sin(x))), x, {"eps": eps},
            times * np.cos(x) * np.sin(eps) / eps, 1e-10,
            [(times * np.cos(x), "that is the gradient at a tiny step, not at the eps given: use "
                                 "the eps you are given")])


def check_numeric_gradient(fn, g):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, 3, 2))
    x2, x3 = rng.standard_normal((2, 3, 2)), rng.standard_normal(5)
    cases = [quadratic(rng, (3, 4), 1e-3), quadratic(rng, (5,), 1e-2),
             ("sum(tanh(x) * w), shape (2, 3, 2), the default eps",
              lambda x: float(np.sum(np.tanh(x) * w)), x2, {}, (1 - np.tanh(x2) ** 2) * w, 1e-7,
              []),
             ("2 sum(sin(x)), shape (5,)", lambda x: 2 * float(np.sum(np.sin(x))), x3, {},
              2 * np.cos(x3), 1e-7, []),
             sines(x3, 0.1, 2), sines(rng.standard_normal((2, 2)), 0.3, 3)]
    g.write_hints = {"x": "put each element back after perturbing it: save it and restore it (x + "
                          "eps - 2 eps + eps is not always x in floating point), or perturb a copy"}
    for case, f, x, kwargs, ref, tol, known in cases:
        g.start(case)
        got = g.call(fn, f, x, **kwargs)
        g.cmp("the gradient", got, ref, tol=tol, known=known)


def check_gradcheck(fn, g):
    r = np.random.default_rng(30).standard_normal
    # (what, op, arrays, hint when your verdict is wrong[, hint when your gradcheck raises])
    cases = [
        ("a softmax from elementary ops (right)",
         lambda x: x.exp() / x.exp().sum(axis=-1, keepdims=True), [r((3, 4))],
         "a right backward was rejected: compare |analytic - numeric| <= atol + rtol |numeric| in "
         "float64"),
        ("F.layer_norm, three inputs (right)", F.layer_norm, [r((2, 5)), r(5), r(5)],
         "a right backward was rejected: check each input with the others held fixed"),
        ("exp(a @ b) given float32 arrays (right)", lambda a, b: (a @ b).exp(),
         [r((3, 4)).astype(np.float32), r((4, 2)).astype(np.float32)],
         "a right backward was rejected: convert the inputs to float64 first (float32 cannot "
         "resolve central differences, lesson 03)"),
        ("bad_square, 3x instead of 2x (wrong)", bad_square, [r(5)],
         "it accepted bad_square: compare the analytic gradient (backward) with the numeric one"),
        ("a softmax whose backward returns zeros (wrong)", softmax_with_zero_backward, [r((2, 4))],
         "it accepted a zero softmax gradient: reduce the output with a fixed random R, L = "
         "sum(out * R); with R = ones, sum(softmax(x)) = 1 is constant and hides every error"),
        ("a matmul with a wrong gradient for b only (wrong)", matmul_with_wrong_b,
         [r((2, 3)), r((3, 2))],
         "it accepted a wrong gradient of the second input: check every input"),
        ("exp with one element of its gradient 5% off (wrong)", exp_with_one_wrong_element,
         [r((3, 3))],
         "it accepted a gradient wrong in one element: every element must pass, not the mean, the "
         "sum or the max"),
        ("a * 2 that does not use its second input b (right)", lambda a, b: a * 2.0,
         [r((2, 3)), r(3)],
         "a right backward was rejected: b's .grad stays None, which means a zero gradient",
         "an input the output does not use keeps .grad None: its gradient is zeros of its shape"),
        ("the row sums of a softmax, all 1: a zero gradient (right)",
         lambda x: (x.exp() / x.exp().sum(axis=-1, keepdims=True)).sum(axis=-1), [r((3, 4))],
         "a right backward was rejected: where the gradient is 0, the numeric one is round-off "
         "(~1e-10) and its relative error is 1; keep the atol: |analytic - numeric| <= atol + rtol "
         "|numeric|"),
        ("bad_square given rtol=0.6, which accepts 3x for 2x (right at that tolerance)", bad_square,
         [r(5)],
         "it rejected what mt.gradcheck accepts at rtol=0.6: compare with the atol and rtol you "
         "are given", "", {"rtol": 0.6}),
    ]
    g.write_hints = {"arrays": "work on float64 copies of the arrays"}
    for case, op, arrays, hint, *rest in cases:
        on_error, kwargs = rest + ["", {}][len(rest):]
        g.start(case)
        g.error_hint = on_error
        try:
            expected = mt.gradcheck(op, *[leaf(a) for a in arrays], **kwargs)
        except mt.GradcheckError:
            expected = False
        verdict = g.call(fn, op, *[a.copy() for a in arrays], **kwargs)
        if not isinstance(verdict, (bool, np.bool_)):
            g.fail(f"return True or False, got {type(verdict).__name__}")
        if bool(verdict) != expected:
            g.fail(f"returned {bool(verdict)}, mt.gradcheck says {expected}; {hint}")


# ----------------------------------------------------- wrong backward passes a gradcheck must catch
def bad_square(x):
    return make_node(x.data ** 2, (x,), lambda gr: (3 * x.data * gr,), "bad_square")


def softmax_with_zero_backward(x):
    return make_node(F.softmax(x.detach()).data, (x,), lambda gr: (np.zeros_like(gr),), "softmax")


def matmul_with_wrong_b(a, b):
    return make_node(a.data @ b.data, (a, b), lambda gr: (gr @ b.data.T, 2 * a.data.T @ gr),
                     "matmul")


def exp_with_one_wrong_element(x):
    out = np.exp(x.data)

    def backward(gr):
        dx = gr * out
        dx.flat[0] *= 1.05                      # off by 5%: beyond rtol there, within it on average
        return (dx,)
    return make_node(out, (x,), backward, "exp")


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def numeric_gradient_mistakes(ref, a, eps):
    """Of the quadratic sum(a x^2 + b x) + ..., whose one-sided difference is off
    by exactly eps * a."""
    return [(ref + eps * a,
             "that is the one-sided difference (f(x + eps) - f(x)) / eps, off by O(eps): use (f(x "
             "+ eps) - f(x - eps)) / (2 eps)"),
            (2 * ref, "yours is twice the answer: the central difference divides by 2 eps")]


ITEMS = [("numeric_gradient", check_numeric_gradient), ("gradcheck", check_gradcheck)]
