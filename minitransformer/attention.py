"""Attention, eq. (1): boolean masks, and scaled dot-product attention as one fused op with a
hand-derived backward. Multi-head attention, built on it, is multihead.py.

Masks are plain boolean arrays of the current backend (not Tensors: they carry no gradient), True
where attention is allowed, broadcastable to (B, H, T_q, T_k). The plain form, from elementary ops:
plain.attention. Left out on purpose: relative positions, local/sparse attention and flash-style
tiling (the (T_q, T_k) score matrix is materialised).
"""
import math

import numpy as np

from . import backend, fast
from . import functional as F
from .checks import check_mask
from .profiler import traced
from .tensor import data_of, make_node

# the "minus infinity" given to masked scores: finite, so a fully masked row makes no NaN
NEG = -1e9


# -------------------------------------------------------------------- masks
def padding_mask(ids, pad_id=0):
    """(B, S) token ids -> (B, 1, 1, S) boolean mask, True where the key is a real token.

    padding_mask([[5, 7, 0]]) -> [[[[True, True, False]]]]
    """
    return (backend.asarray(data_of(ids)) != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(T, offset=0):
    """(1, 1, T, offset + T) lower-triangular boolean mask: query i (at position offset + i) may see
    key j only when j <= offset + i. `offset` is the number of positions already in a KV cache.

    causal_mask(3)[0, 0] -> [[T, F, F], [T, T, F], [T, T, T]]
    """
    return backend.xp.tri(T, offset + T, k=offset, dtype=bool)[None, None]  # (1, 1, T, offset+T)


# -------------------------------------------------------------------- the fused op
def attention_forward(q, k, v, mask, dropout_p, training):
    """Eq. (1) on arrays: O (B, H, Tq, K), P (B, H, Tq, Tk) before dropout, and the dropout mask
    (kept, boolean, or None). See scaled_dot_product_attention."""
    if mask is not None:
        check_mask(mask, q, k)
    if fast.on(q, k, v):
        return fast.attention_forward(q, k, v, mask, dropout_p, training)
    xp = backend.xp
    s = q @ xp.swapaxes(k, -1, -2)                   # (B, H, Tq, Tk) the scores
    s *= 1.0 / math.sqrt(q.shape[-1])                # eq. (1): scale by 1/sqrt(d_k)
    if mask is not None:
        xp.copyto(s, s.dtype.type(NEG), where=~mask)  # masked scores -> -1e9
    p = F.softmax_array(s, out=s)                    # (B, H, Tq, Tk) over the keys
    if mask is not None:
        p *= mask.any(axis=-1, keepdims=True)        # a row with no allowed key: uniform -> zeros
    kept = None
    if training and dropout_p > 0:
        kept = backend.rng().random(p.shape, dtype=np.float32) >= dropout_p  # (B, H, Tq, Tk) bool
        pd = (p * kept) * (1.0 / (1.0 - dropout_p))  # inverted dropout
    else:
        pd = p
    o = pd @ v                                       # (B, H, Tq, K)
    return o, p, kept


def attention_backward(g, q, k, v, p, kept, dropout_p, need_q=True, need_k=True, need_v=True):
    """dO (B, H, Tq, K) -> (dQ, dK, dV), each None when not needed.
    See scaled_dot_product_attention."""
    if fast.on(g, q, k, v, p):
        return fast.attention_backward(g, q, k, v, p, kept, dropout_p, need_q, need_k, need_v)
    xp = backend.xp
    inv_keep = 1.0 / (1.0 - dropout_p) if kept is not None else 1.0
    pd = p if kept is None else (p * kept) * inv_keep    # the dropped P of the forward pass
    dq = dk = dv = None
    if need_v:
        dv = xp.swapaxes(pd, -1, -2) @ g                  # dV = P_drop^T dO     (B, H, Tk, K)
    if need_q or need_k:
        dpd = g @ xp.swapaxes(v, -1, -2)                  # dP_drop = dO V^T     (B, H, Tq, Tk)
        dp = dpd if kept is None else dpd * kept * inv_keep   # dP = dP_drop M / (1 - p)
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))  # dS = P (dP - rowsum(dP P))
        ds *= 1.0 / math.sqrt(q.shape[-1])                # through S = q k^T / sqrt(d_k)
        if need_q:
            dq = ds @ k                                   # dQ = dS K / sqrt(d_k)     (B, H, Tq, K)
        if need_k:
            dk = xp.swapaxes(ds, -1, -2) @ q              # dK = dS^T Q / sqrt(d_k)   (B, H, Tk, K)
    return dq, dk, dv


@traced
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, training=True,
                                 return_weights=False):
    """Eq. (1), softmax(q k^T / sqrt(d_k)) v, as ONE graph node: q (B, H, Tq, K), k and v
    (B, H, Tk, K) -> O (B, H, Tq, K); with return_weights=True also P (B, H, Tq, Tk), the attention
    weights before dropout (a plain array; read it, do not write to it: backward uses it).
    Plain form: plain.attention.

    Forward:  S = q k^T / sqrt(d_k);  S = -1e9 where mask is False;  P = softmax(S) over the keys;
              rows whose keys are all masked get P = 0 (output 0, gradients 0, never NaN);
              P_drop = P * M / (1 - p) with M ~ Bernoulli(1 - p) when training (inverted dropout);
              O = P_drop v.
    Backward: dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k), dV = P_drop^T dO,
              dS = P * (dP - rowsum(dP * P)).
              From dO: O = P_drop v is a matmul, so dV = P_drop^T dO and dP_drop = dO V^T.
              Dropout is an elementwise product by the constant M / (1 - p):
              dP = dP_drop * M / (1 - p).
              Softmax per row, y = softmax(s): dy_i/ds_j = y_i (delta_ij - y_j), so
              dS_j = sum_i dP_i y_i (delta_ij - y_j) = P_j (dP_j - sum_i dP_i P_i).
              Masked entries have P = 0, hence dS = 0: no gradient reaches a masked score (the
              constant -1e9 does not depend on q or k). S = q k^T * c with c = 1/sqrt(d_k):
              dQ = c dS K, dK = c dS^T Q.
    Saved for backward: q, k, v, P and (with dropout) the boolean mask M; S and P_drop are not kept.
    """
    qd = q.data
    kd = k.data
    vd = v.data
    mask = None if mask is None else backend.asarray(data_of(mask))
    out, p, kept = attention_forward(qd, kd, vd, mask, dropout_p, training)

    def backward(g):
        return attention_backward(g, qd, kd, vd, p, kept, dropout_p,
                                  q.requires_grad, k.requires_grad, v.requires_grad)
    o = make_node(out, (q, k, v), backward, "attention")
    return (o, p) if return_weights else o
