"""Lesson 02, autograd: the ops mul, reduce_sum and matmul, each built with make_node, against the
Tensor's own *, .sum and @: the output, every input's gradient, and mt.gradcheck of your backward."""
import numpy as np

from minitransformer.tensor import Tensor, unbroadcast

from .common import leaf


def check_op(fn, g, reference, cases, mistakes=lambda i, arrays, G: ()):
    """An op made with make_node, on each case: its output, every input's gradient, mt.gradcheck."""
    rng = np.random.default_rng(2)
    for case, arrays, kwargs in cases:
        g.start(case)
        mine, theirs = [leaf(a) for a in arrays], [leaf(a) for a in arrays]
        out = g.call(fn, *mine, **kwargs)
        if not isinstance(out, Tensor):
            g.fail(f"returned {type(out).__name__}, not a Tensor: return make_node(output, parents, backward, name)")
        ref = reference(*theirs, **kwargs)
        g.cmp("the output", out.data, ref.data)
        if out._backward is None:
            g.fail("the output has no backward: build it with make_node(output, parents, backward, name)")
        G = np.asarray(rng.standard_normal(ref.shape))
        g.call(out.backward, G.copy())
        ref.backward(G.copy())
        for i, (a, b) in enumerate(zip(mine, theirs)):
            g.cmp(f"the gradient of input {i}", a.grad, b.grad, known=mistakes(i, arrays, G))
        g.gradcheck(lambda *xs: fn(*xs, **kwargs), *[leaf(a) for a in arrays])


def check_mul(fn, g):
    r = np.random.default_rng(20).standard_normal
    cases = [("(3,) * (3,)", [r(3), r(3)], {}), ("(2, 3) * (3,): b is broadcast", [r((2, 3)), r(3)], {}),
             ("(4, 1, 3) * (2, 1)", [r((4, 1, 3)), r((2, 1))], {}), ("(2, 3) * a 0-d scalar", [r((2, 3)), r(())], {})]
    check_op(fn, g, lambda a, b: a * b, cases, mul_mistakes)


def check_reduce_sum(fn, g):
    r = np.random.default_rng(21).standard_normal
    g.error_hint = ("backward must return a gradient of x's shape: put the summed axes back "
                    "(np.expand_dims(g, axes) when keepdims=False: all at once, so their order does not matter) "
                    "and copy g along them (np.broadcast_to)")
    cases = [("(2, 3, 4), axis=None", [r((2, 3, 4))], {}), ("(2, 3, 4), axis=0", [r((2, 3, 4))], {"axis": 0}),
             ("(2, 3, 4), axis=-1, keepdims=True", [r((2, 3, 4))], {"axis": -1, "keepdims": True}),
             ("(2, 3, 4), axis=(0, 2)", [r((2, 3, 4))], {"axis": (0, 2)}),
             ("(2, 3, 4), axis=(2, 0): the axes in any order", [r((2, 3, 4))], {"axis": (2, 0)}),
             ("(5,), axis=0", [r(5)], {"axis": 0}), ("(2, 3), keepdims=True", [r((2, 3))], {"keepdims": True})]
    check_op(fn, g, lambda x, axis=None, keepdims=False: x.sum(axis=axis, keepdims=keepdims), cases)


def check_matmul(fn, g):
    r = np.random.default_rng(22).standard_normal
    g.error_hint = "shapes: dA = g B^T is (m, n)(n, k) = (m, k); dB = A^T g is (k, m)(m, n) = (k, n)"
    cases = [("(2, 3) @ (3, 4)", [r((2, 3)), r((3, 4))], {}), ("(4, 4) @ (4, 4)", [r((4, 4)), r((4, 4))], {}),
             ("(1, 5) @ (5, 3)", [r((1, 5)), r((5, 3))], {})]
    check_op(fn, g, lambda a, b: a @ b, cases, matmul_mistakes)


# ------------------------------------- known mistakes of input i's gradient, G the output's: [(wrong, hint)]
def mul_mistakes(i, arrays, G):
    own, other = np.asarray(arrays[i]), np.asarray(arrays[1 - i])
    return [(unbroadcast(G * own, own.shape), "the gradients are swapped: a's is g * b, b's is g * a"),
            (unbroadcast(np.broadcast_to(other, G.shape), own.shape),
             "multiply by the incoming gradient g (the chain rule)")]


def matmul_mistakes(i, arrays, G):               # lazy: a product of the wrong shapes is skipped
    A, B = arrays
    if i == 0:
        return [(lambda: G @ B, "transpose B: dA = g B^T"), (lambda: B @ G, "dA = g B^T")]
    return [(lambda: A @ G, "transpose A: dB = A^T g"), (lambda: G.T @ A, "that is dB transposed: dB = A^T g")]


ITEMS = [("mul", check_mul), ("reduce_sum", check_reduce_sum), ("matmul", check_matmul)]
