"""Lesson 02, autograd: the ops mul, reduce_sum and matmul, each built with make_node, against the
Tensor's own *, .sum and @: the output, every input's gradient, and
mt.gradcheck of your backward."""
import numpy as np

from minitransformer.tensor import Tensor, unbroadcast

from .common import GRADIENT, argument_names, leaf


def check_op(fn, g, reference, cases, mistakes=lambda i, arrays, G, how: ()):
    """An op made with make_node, on each case: its output, its backward called alone on the
    incoming gradient (which it must not write into), every input's gradient, mt.gradcheck. A case's
    `how`: "plain" op(*inputs); "same" op(x, x), one tensor as both parents; "twice" op(w, a) +
    op(w, b), one weight used by two nodes."""
    rng = np.random.default_rng(2)
    for case, arrays, kwargs, *how in cases:
        how = how[0] if how else "plain"
        g.start(case)
        mine, theirs = [leaf(a) for a in arrays], [leaf(a) for a in arrays]
        out = g.call(build, fn, mine, how, kwargs)
        if not isinstance(out, Tensor):
            g.fail(f"returned {type(out).__name__}, not a Tensor: return make_node(output, "
                   f"parents, backward, name)")
        ref = build(reference, theirs, how, kwargs)
        g.cmp("the output", out.data, ref.data)
        if out._backward is None:
            g.fail("the output has no backward: build it with make_node(output, parents, backward, "
                   "name)")
        G = np.asarray(rng.standard_normal(ref.shape))
        if how == "plain":                       # your backward alone, as the engine calls it
            g.write_hints = dict.fromkeys(argument_names(out._backward, (G,), {}), GRADIENT)
            with g.contract(may_share=True):    # a gradient may be a view (np.broadcast_to(g, ...))
                g.call(out._backward, G.copy())
            g.write_hints = {}
        g.call(out.backward, G.copy())
        ref.backward(G.copy())
        for i, (a, b) in enumerate(zip(mine, theirs)):
            g.cmp(f"the gradient of input {i}", a.grad, b.grad, known=mistakes(i, arrays, G, how))
        g.gradcheck(lambda *xs: build(fn, list(xs), how, kwargs), *[leaf(a) for a in arrays])


def build(op, leaves, how, kwargs):
    """The case's graph: op(*leaves), op(x, x) or op(w, a) + op(w, b)."""
    if how == "same":
        return op(leaves[0], leaves[0], **kwargs)
    if how == "twice":
        return op(leaves[0], leaves[1], **kwargs) + op(leaves[0], leaves[2], **kwargs)
    return op(*leaves, **kwargs)


def check_mul(fn, g):
    r = np.random.default_rng(20).standard_normal
    cases = [("(3,) * (3,)", [r(3), r(3)], {}),
             ("x * x, x (3,): one tensor as both factors", [r(3)], {}, "same"),
             ("(2, 3) * (3,): b is broadcast", [r((2, 3)), r(3)], {}),
             ("(4, 1, 3) * (2, 1)", [r((4, 1, 3)), r((2, 1))], {}),
             ("(2, 3) * a 0-d scalar", [r((2, 3)), r(())], {}),
             ("x * x, x (2, 3): one tensor as both factors", [r((2, 3))], {}, "same"),
             ("w * a + w * b, w (2, 3): one weight in two products", [r((2, 3)), r((2, 3)), r(3)],
              {}, "twice")]
    check_op(fn, g, lambda a, b: a * b, cases, mul_mistakes)


def check_reduce_sum(fn, g):
    r = np.random.default_rng(21).standard_normal
    g.error_hint = ("backward must return a gradient of x's shape: put the summed axes back "
                    "(np.expand_dims(g, axes) when keepdims=False: all at once, so their order "
                    "does not matter) and copy g along them (np.broadcast_to)")
    cases = [("(2, 3, 4), axis=None", [r((2, 3, 4))], {}),
             ("(2, 3, 4), axis=0", [r((2, 3, 4))], {"axis": 0}),
             ("(2, 3, 4), axis=-1, keepdims=True", [r((2, 3, 4))], {"axis": -1, "keepdims": True}),
             ("(2, 3, 4), axis=(0, 2)", [r((2, 3, 4))], {"axis": (0, 2)}),
             ("(2, 3, 4), axis=(2, 0): the axes in any order", [r((2, 3, 4))], {"axis": (2, 0)}),
             ("(5,), axis=0", [r(5)], {"axis": 0}),
             ("(2, 3), keepdims=True", [r((2, 3))], {"keepdims": True})]
    check_op(fn, g, lambda x, axis=None, keepdims=False: x.sum(axis=axis, keepdims=keepdims), cases)


def check_matmul(fn, g):
    r = np.random.default_rng(22).standard_normal
    g.error_hint = ("shapes: dA = g B^T is (m, n)(n, k) = (m, k); dB = A^T g is (k, m)(m, n) = (k, "
                    "n)")
    cases = [("(2, 3) @ (3, 4)", [r((2, 3)), r((3, 4))], {}),
             ("(4, 4) @ (4, 4)", [r((4, 4)), r((4, 4))], {}),
             ("(1, 5) @ (5, 3)", [r((1, 5)), r((5, 3))], {}),
             ("x @ x, x (3, 3): one tensor as both factors", [r((3, 3))], {}, "same"),
             ("x @ x, x (4, 4): one tensor as both factors", [r((4, 4))], {}, "same"),
             ("w @ a + w @ b, w (2, 3): one weight in two products",
              [r((2, 3)), r((3, 4)), r((3, 4))], {},
              "twice")]
    check_op(fn, g, lambda a, b: a @ b, cases, matmul_mistakes)


# ---------------------------- known mistakes of input i's gradient, G the output's: [(wrong, hint)]
SAME = ("x is both parents: the engine adds what backward returns for each parent slot, so give "
        "each slot its own share (g * b for a, g * a for b) and let the engine add them; giving "
        "each the whole gradient counts it twice")


def mul_mistakes(i, arrays, G, how):
    if how == "same":                           # (swapped gradients are right for x * x)
        return [(4 * G * arrays[0], SAME),
                (2 * np.broadcast_to(arrays[0], G.shape),
                 "multiply by the incoming gradient g (the chain rule)")]
    if how == "twice":
        return []
    own, other = np.asarray(arrays[i]), np.asarray(arrays[1 - i])
    return [(unbroadcast(G * own, own.shape),
             "the gradients are swapped: a's is g * b, b's is g * a"),
            (unbroadcast(np.broadcast_to(other, G.shape), own.shape),
             "multiply by the incoming gradient g (the chain rule)")]


def matmul_mistakes(i, arrays, G, how):          # lazy: a product of the wrong shapes is skipped
    if how == "same":
        X = arrays[0]
        return [(2 * (G @ X.T + X.T @ G), SAME)]
    if how == "twice":
        return []
    A, B = arrays
    if i == 0:
        return [(lambda: G @ B, "transpose B: dA = g B^T"), (lambda: B @ G, "dA = g B^T")]
    return [(lambda: A @ G, "transpose A: dB = A^T g"),
            (lambda: G.T @ A, "that is dB transposed: dB = A^T g")]


ITEMS = [("mul", check_mul), ("reduce_sum", check_reduce_sum), ("matmul", check_matmul)]
