"""Lesson 06, attention: causal_mask against attention.causal_mask, and attention forward (output
and weights) and backward (dq, dk, dv, and mt.gradcheck) against scaled_dot_product_attention, with
no mask (and d_v != d_k), a causal mask (d_v != d_k again), a padding mask that hides a whole
sentence, and (forward) scores near 1e4 and allowed scores below -1e4; none may
change its input arrays."""
import math

import numpy as np

import minitransformer as mt
from minitransformer.attention import causal_mask, padding_mask, scaled_dot_product_attention

from .common import leaf, with_your_backward


def check_causal_mask(fn, g):
    for T in (1, 3, 5):
        g.start(f"T={T}")
        got, ref = g.call(fn, T), causal_mask(T)
        if got is not None and np.asarray(got).dtype.kind in "iuf":
            # 0/1, or 0/-1e9 to add to the scores
            g.fail(f"the mask has dtype {np.asarray(got).dtype}: make it boolean (True = may "
                   f"attend; the scores get -1e9 where it is False)")
        g.cmp("the mask", got, ref, known=causal_mask_mistakes(ref, T),
              shape_hint="(1, 1, T, T), to broadcast over batch and heads")


def attention_cases():
    """(what, q, k, v, mask): no mask (d_v != d_k); a causal mask; 3 queries over 5
    keys with padding."""
    r = np.random.default_rng(60).standard_normal
    pad = padding_mask(np.array([[5, 6, 7, 0, 0], [0, 0, 0, 0, 0]]))
    return [("q, k (1, 1, 3, 4), v (1, 1, 3, 5), no mask", r((1, 1, 3, 4)), r((1, 1, 3, 4)),
             r((1, 1, 3, 5)), None),
            ("q, k (2, 2, 4, 3), v (2, 2, 4, 5), causal mask", r((2, 2, 4, 3)), r((2, 2, 4, 3)),
             r((2, 2, 4, 5)), causal_mask(4)),
            ("3 queries, 5 keys, padding mask, sentence 2 all padding", r((2, 1, 3, 4)),
             r((2, 1, 5, 4)), r((2, 1, 5, 4)), pad)]


def check_attention_forward(fn, g):
    r = np.random.default_rng(62).standard_normal
    large = ("q, k (1, 2, 3, 4) times 100: scores near 1e4, no mask", 100 * r((1, 2, 3, 4)),
             100 * r((1, 2, 3, 4)), r((1, 2, 3, 4)), None)
    negative = [(f"k = -q times 100, q {shape}, causal mask: a query's allowed scores near -1e4 "
                 f"and below", q, -q, r(shape), causal_mask(shape[-2]))
                for shape in ((1, 2, 3, 4), (2, 1, 4, 3)) for q in [100 * r(shape)]]
    cases = attention_cases()
    for case, q, k, v, mask in cases[:2] + [large] + cases[2:] + negative:
        # overflow before the masked rows
        g.start(case)
        nan_hint = NAN_HINT if mask is not None else ("exp of a score near 1e4 overflows: subtract "
                                                      "each row's largest score before exp (it "
                                                      "cancels in the softmax)")
        out, p = scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v), mask,
                                              training=False, return_weights=True)
        got_out, got_p = g.unpack(g.call(fn, q.copy(), k.copy(), v.copy(), mask),
                                  ["out", "weights"])
        wrong = attention_forward_mistakes(q, k, v, mask)
        g.cmp("the weights", got_p, p, known=[(wrong_p, hint) for _, wrong_p, hint in wrong],
              nan_hint=nan_hint)
        g.cmp("the output", got_out, out.numpy(),
              known=[(wrong_out, hint) for wrong_out, _, hint in wrong], nan_hint=nan_hint)


def check_attention_backward(fn, g):
    rng = np.random.default_rng(61)
    for case, q, k, v, mask in attention_cases():
        g.start(case)
        leaves = [leaf(q), leaf(k), leaf(v)]
        out, p = scaled_dot_product_attention(*leaves, mask, training=False, return_weights=True)
        dout = rng.standard_normal(out.shape)
        out.backward(dout)
        dq, dk, dv = g.unpack(g.call(fn, q.copy(), k.copy(), v.copy(), p.copy(), dout.copy()),
                              ["dq", "dk", "dv"])
        known = attention_backward_mistakes(q, k, v, p, dout, *(x.grad for x in leaves))
        g.cmp("dq", dq, leaves[0].grad, known=known["dq"])
        g.cmp("dk", dk, leaves[1].grad, known=known["dk"],
              shape_hint="dk has k's shape: dS^T Q / sqrt(d_k)")
        g.cmp("dv", dv, leaves[2].grad, known=known["dv"], shape_hint="dv has v's shape: P^T dO")
    q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))

    def attention(q, k, v):
        mask = causal_mask(3)
        _, p = scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), mask,
                                            training=False, return_weights=True)
        return with_your_backward(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask,
                                                                               training=False),
                                  lambda gr: tuple(fn(q.data, k.data, v.data, p, gr)), [q, k, v])
    g.gradcheck(attention, leaf(q), leaf(k), leaf(v),
                case="mt.gradcheck, q, k, v (1, 2, 3, 4), causal mask")


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
NAN_HINT = ("NaN where a query's keys are all masked: set masked scores to -1e9, not -inf, and "
            "subtract each row's largest score before exp (else exp(-1e9) / 0 is 0/0); such a "
            "row's weights are then 0 (lesson 06, Masks)")


SQRT_DV = "divide by sqrt(d_k), the width of q and k (q.shape[-1]), not of v"


def causal_mask_mistakes(ref, T):
    return [(np.swapaxes(ref, -1, -2),
             "True where key j <= query i: row i is query i, so the LOWER triangle"),
            (np.tril(np.ones((T, T), bool), -1)[None, None],
             "a query may attend to itself: the diagonal is True")]


def attention_numpy(q, k, v, mask, divide=None, zero_empty=True, invert=False, after=False, axis=-1,
                    fill=-1e9):
    """Attention, with a mistake when asked (scores divided by `divide`, not sqrt(d_k); no weights 0
    for a query with no key; the mask inverted; applied after the softmax; the softmax along `axis`;
    masked scores set to `fill`): (out, weights)."""
    s = q @ np.swapaxes(k, -1, -2) / (math.sqrt(q.shape[-1]) if divide is None else divide)
    if mask is not None and not after:
        s = np.where(~mask if invert else mask, s, fill)
    p = np.exp(s - s.max(axis, keepdims=True))
    p /= p.sum(axis, keepdims=True)
    if mask is not None and (zero_empty or after):
        p = p * (mask if after else mask.any(-1, keepdims=True))
    return p @ v, p


def attention_forward_mistakes(q, k, v, mask):
    """[(wrong out, wrong weights, hint)]."""
    d = q.shape[-1]
    hints = [("divide the scores by sqrt(d_k) (eq. 1)", {"divide": 1.0}),
             ("divide the scores by sqrt(d_k), not by d_k", {"divide": d}),
             ("the softmax runs over the keys (the last axis): each query's weights sum to 1",
              {"axis": -2}),
             ("a query whose keys are all masked gets weights 0 and output 0 (lesson 06, Masks)",
              {"zero_empty": False})]
    if v.shape[-1] != d:
        hints.append((SQRT_DV, {"divide": math.sqrt(v.shape[-1])}))
    if mask is not None:
        hints += [("set the scores of masked keys to -1e9 before the softmax", {"mask": None}),
                  ("masked scores get -1e9, not 0: exp(0) = 1 still gives the hidden keys weight",
                   {"fill": 0.0}),
                  ("masked scores get -1e9: a fill such as -1e4 is within reach of real scores, "
                   "and where the allowed keys score lower, the hidden keys win", {"fill": -1e4}),
                  ("the mask is True where attention is ALLOWED", {"invert": True}),
                  ("mask before the softmax: scores -1e9 where the mask is False, then softmax, so "
                   "that a row's weights sum to 1 over the keys it may see (zeroing weights "
                   "afterwards leaves them short)", {"after": True})]
    return [(*attention_numpy(q, k, v, **{"mask": mask, **mistake}), hint)
            for hint, mistake in hints]


def attention_backward_mistakes(q, k, v, p, dout, dq, dk, dv):
    """{"dq": [(wrong, hint)], "dk": ..., "dv": ...}, given the right dq, dk, dv."""
    c, dp = 1 / math.sqrt(q.shape[-1]), dout @ np.swapaxes(v, -1, -2)
    no_centre = p * dp
    scale_hint = "you left out the 1/sqrt(d_k) of S = Q K^T / sqrt(d_k)"
    centre_hint = "dS = P * (dP - rowsum(dP * P)): the softmax backward of lesson 04"
    ds, columns = (p * (dp - (dp * p).sum(axis, keepdims=True)) for axis in (-1, -2))
    axis_hint = ("rowsum(dP * P) sums over the keys, the last axis: each query's softmax is its "
                 "own row")
    by_dv = math.sqrt(q.shape[-1] / v.shape[-1])      # 1/sqrt(d_v) for 1/sqrt(d_k): when d_v != d_k
    twice = "S = Q K^T / sqrt(d_k) is divided once: you divided by sqrt(d_k) twice"
    dp_alone = "dS = P * (dP - rowsum(dP * P)): the sum is of dP * P, not of dP alone"
    return {"dq": [(dq / c, scale_hint), (c * no_centre @ k, centre_hint),
                   (c * columns @ k, axis_hint), (dq * c, twice),
                   (c * (p * (dp - dp.sum(-1, keepdims=True))) @ k, dp_alone)] +
            ([(dq * by_dv, SQRT_DV)] if by_dv != 1 else []),
            "dk": [(dk / c, scale_hint), (c * np.swapaxes(no_centre, -1, -2) @ q, centre_hint),
                   # lazy: Tq may not be Tk
                   (lambda: c * ds @ q, "dK = dS^T Q / sqrt(d_k): transpose dS"),
                   (dk * c, twice)] + ([(dk * by_dv, SQRT_DV)] if by_dv != 1 else []),
            "dv": [(lambda: p @ dout, "dV = P^T dO: transpose P"),    # lazy: the shapes may not fit
                   (dv * c,
                    "dV = P^T dO, with no 1/sqrt(d_k): only the scores S are scaled, not v")]}


ITEMS = [("causal_mask", check_causal_mask), ("attention_forward", check_attention_forward),
         ("attention_backward", check_attention_backward)]
