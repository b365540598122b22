"""Lesson 06, answers: the causal mask, and eq. (1) forward and backward.

Graded by `python lessons/check.py 06 --solutions`; your own go in lessons/exercises/06_attention.py.

Answers to the lesson's questions:
1. About d_k = 256: the unscaled score is a sum of d_k products of variance 1.
2. NaN: the row max is -inf, and -inf - (-inf) is NaN; a finite -1e9 makes such a row uniform, and the
   fused op then zeroes it.
3. 4 (512^2 + 512) = 1,050,624, whatever the number of heads: the heads split the same D x D matrices.
4. 0: a masked entry has weight P_j = 0, so dS_j = P_j (dP_j - rowsum) = 0, and dK (built from dS)
   and dV (built from P) get nothing from it. The constant -1e9 is not a function of any input.
5. d_k = 512 / 8 = 64. One head: T * T * d_k = 160,000; eight heads: 1,280,000, exactly what one head of
   width 512 costs: the heads split the width, they do not multiply the work.
6. Nothing: the output is a weighted sum over the keys, and sums do not depend on order. Attention alone
   sees a set; the positional encodings of lesson 07 are what tell it the order.
7. One: only the new position is projected; it attends to t + 1 keys, positions 0 .. t. The cache holds
   only positions already decoded, so there is no future to hide.
"""
import math

import numpy as np

import minitransformer as mt


def causal_mask(T):
    """(1, 1, T, T) booleans, True where key j <= query i: the lower triangle, diagonal included."""
    return np.tril(np.ones((T, T), dtype=bool))[None, None]


def attention_forward(q, k, v, mask=None):
    """O = softmax(Q K^T / sqrt(d_k)) V, masked scores set to -1e9; rows with no allowed key give 0."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])      # (B, H, Tq, Tk)
    if mask is not None:
        s = np.where(mask, s, -1e9)                              # finite: an empty row stays NaN-free
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    if mask is not None:
        p = p * mask.any(axis=-1, keepdims=True)                 # no key to look at: weights 0
    return p @ v, p                                              # (B, H, Tq, d_v), (B, H, Tq, Tk)


def attention_backward(q, k, v, weights, dout):
    """dV = P^T dO; dP = dO V^T; dS = P * (dP - rowsum(dP * P)); dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k)."""
    p, c = weights, 1.0 / math.sqrt(q.shape[-1])
    dv = np.swapaxes(p, -1, -2) @ dout                           # (B, H, Tk, d_v)
    dp = dout @ np.swapaxes(v, -1, -2)                           # (B, H, Tq, Tk)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))         # softmax backward, row by row
    return c * ds @ k, c * np.swapaxes(ds, -1, -2) @ q, dv


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    rng = np.random.default_rng(0)
    s = np.einsum("nd,nkd->nk", rng.standard_normal((500, 256)), rng.standard_normal((500, 8, 256)))
    assert 230 < s.var() < 282
    with np.errstate(invalid="ignore"):
        row = np.array([-np.inf, -np.inf])
        assert np.isnan(np.exp(row - row.max()) / np.exp(row - row.max()).sum()).all()
    assert mt.MultiHeadAttention(512, 8).num_parameters() == mt.MultiHeadAttention(512, 16).num_parameters() \
        == 4 * (512 * 512 + 512)
    q, k, v = (rng.standard_normal((1, 1, 4, 8)) for _ in range(3))                           # 4
    mask = np.array([True, True, False, True])              # key 2 is hidden from every query
    _, p = attention_forward(q, k, v, mask)
    _, dk, dv = attention_backward(q, k, v, p, rng.standard_normal((1, 1, 4, 8)))
    assert not dk[..., 2, :].any() and not dv[..., 2, :].any()
    assert (50 * 50 * 64, 8 * 50 * 50 * 64) == (160_000, 50 * 50 * 512)                           # 5
    perm = rng.permutation(4)                                                                     # 6
    assert np.allclose(attention_forward(q, k, v)[0], attention_forward(q, k[..., perm, :], v[..., perm, :])[0])
    mha = mt.MultiHeadAttention(8, 2).eval()                                                      # 7
    x = mt.tensor(rng.standard_normal((1, 5, 8)).astype(np.float32))
    with mt.no_grad():
        full = mha(x, mask=causal_mask(5)).numpy()
        cache = mt.multihead.KVCache()
        steps = [mha(x[:, t:t + 1], cache=cache).numpy() for t in range(5)]   # no mask
    assert np.allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
