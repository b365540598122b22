"""Lesson 03, answers: central differences, and a gradient check built on them.

Graded by `python lessons/check.py 03 --solutions`; your own go in
lessons/exercises/03_gradcheck.py.

The answers to the lesson's questions, explained, are in lessons/answers/03_gradcheck.md.
"""
import numpy as np

import minitransformer as mt


def numeric_gradient(f, x, eps=1e-6):
    """df/dx_i ~ (f(x + eps e_i) - f(x - eps e_i)) / (2 eps): truncation O(eps^2), round-off
    O(u / eps).

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
    """True when backward's gradient of L = sum(op(*inputs) * R) matches central differences
    everywhere.

    R is a fixed random tensor: with it, L's gradient is the vector-Jacobian product R^T J, and an
    error in any row of the Jacobian shows. Everything runs in float64, on copies of the arrays.
    """
    xs = [np.array(a, dtype=np.float64) for a in arrays]          # float64 copies: ours to perturb
    leaves = [mt.tensor(x, requires_grad=True) for x in xs]
    out = op(*leaves)
    R = np.random.default_rng(seed).standard_normal(out.shape)
    (out * mt.tensor(R)).sum().backward()                         # analytic: every leaf's .grad
    for i, leaf in enumerate(leaves):
        def loss(xi, i=i):                                        # L as a function of input i alone
            with mt.no_grad():
                return float((op(*[mt.tensor(xi if j == i else x) for j, x in enumerate(xs)]).data
                              * R).sum())
        numeric = numeric_gradient(loss, xs[i], eps)
        analytic = leaf.grad if leaf.grad is not None else np.zeros(xs[i].shape)
        if np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric)):
            return False                                          # one element is enough to fail
    return True
