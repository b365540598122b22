"""Lesson 03, answers: central differences, and a gradient check built on them.

Graded by `python lessons/check.py 03 --solutions`; your own go in lessons/exercises/03_gradcheck.py.

Answers to the lesson's questions:
1. About 1e-3 to 1e-2 for float32 (the error eps^2 + u/eps is smallest near u^(1/3), with u = 6e-8),
   against about 1e-5 for float64 (u = 1.1e-16): the larger round-off needs a larger step to drown.
2. Backward of x^2 is 2x: `make_node(x.data ** 2, (x,), lambda g: (g * 2 * x.data,), "square")`
   passes mt.gradcheck in both modes.
3. The entries of softmax(x) sum to 1 whatever x, so sum(softmax(x)) has gradient 0, and a backward that
   returns zeros passes against R = ones.
   A random R weights each output differently: an error in any row of the Jacobian shows.
4. Element-wise: two passes per element, 2 * 512 * 512 = 524,288. Directional: two per direction, 4.
5. The one-sided error is the truncation eps |f''(x)| / 2, about 3.6e-6; the central one is about 1e-11
   (its truncation is eps^2 |f'''(x)| / 6: the eps |f''| / 2 terms of both sides cancel).
6. (relu(1.1e-6) - relu(-0.9e-6)) / 2e-6 = 0.55, not 1: the step crosses the kink. A check is only
   valid where the function is smooth within eps of the input: keep inputs at least eps from a kink
   (random inputs are, almost surely, for eps = 1e-6), or the numeric side is wrong, not the backward.
"""
import numpy as np

import minitransformer as mt


def numeric_gradient(f, x, eps=1e-6):
    """df/dx_i ~ (f(x + eps e_i) - f(x - eps e_i)) / (2 eps): truncation O(eps^2), round-off O(u / eps).

    Perturbs x in place, one element at a time, and puts each element back.
    """
    grad = np.empty(x.shape)
    flat, out = x.reshape(-1), grad.reshape(-1)        # views: writing flat[i] moves x
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        up = f(x)
        flat[i] = old - eps
        down = f(x)
        flat[i] = old                                  # leave x as it was
        out[i] = (up - down) / (2 * eps)
    return grad


def gradcheck(op, *arrays, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0):
    """True when backward's gradient of L = sum(op(*inputs) * R) matches central differences everywhere.

    R is a fixed random tensor: with it, L's gradient is the vector-Jacobian product R^T J, and an error
    in any row of the Jacobian shows. Everything runs in float64, on copies of the arrays.
    """
    xs = [np.array(a, dtype=np.float64) for a in arrays]          # float64 copies: ours to perturb
    leaves = [mt.tensor(x, requires_grad=True) for x in xs]
    out = op(*leaves)
    R = np.random.default_rng(seed).standard_normal(out.shape)
    (out * mt.tensor(R)).sum().backward()                          # analytic: every leaf's .grad
    for i, leaf in enumerate(leaves):
        def loss(xi, i=i):                                         # L as a function of input i alone
            with mt.no_grad():
                return float((op(*[mt.tensor(xi if j == i else x) for j, x in enumerate(xs)]).data * R).sum())
        numeric = numeric_gradient(loss, xs[i], eps)
        analytic = leaf.grad if leaf.grad is not None else np.zeros(xs[i].shape)
        if np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric)):
            return False                                           # one element is enough to fail
    return True


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    from minitransformer.tensor import make_node

    def good_square(x):
        return make_node(x.data ** 2, (x,), lambda g: (g * 2 * x.data,), "square")
    v = mt.tensor(np.random.default_rng(0).standard_normal(5), requires_grad=True)
    assert mt.gradcheck(good_square, v, mode="elementwise") and mt.gradcheck(good_square, v, mode="directional")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(6)

    def softmax_sum(x):
        return float(np.exp(x - x.max()).sum() / np.exp(x - x.max()).sum())
    assert np.abs(numeric_gradient(softmax_sum, x)).max() < 1e-5                               # 3: zeros pass
    assert (2 * 512 * 512, 2 * 2) == (524_288, 4)                                                # 4
    one_sided = (np.tanh(0.5 + 1e-5) - np.tanh(0.5)) / 1e-5 - (1 - np.tanh(0.5) ** 2)
    central = numeric_gradient(lambda t: float(np.tanh(t[0])), np.array([0.5]), 1e-5)[0] - (1 - np.tanh(0.5) ** 2)
    assert 3e-6 < abs(one_sided) < 4e-6 and abs(central) < 1e-9                                    # 5
    relu = numeric_gradient(lambda t: float(np.maximum(t[0], 0)), np.array([1e-7]), 1e-6)[0]
    assert abs(relu - 0.55) < 1e-6                                                               # 6
