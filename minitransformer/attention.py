"""Attention, eq. (1): boolean masks, and scaled dot-product attention as one fused op with a hand-derived
backward. Multi-head attention, built on it, is multihead.py.

Masks are plain boolean arrays of the current backend (not Tensors: they carry no gradient), True
where attention is allowed, broadcastable to (B, H, T_q, T_k). The plain form, from elementary ops:
plain.attention. Left out on purpose: relative positions, local/sparse attention and flash-style
tiling (the (T_q, T_k) score matrix is materialised).
"""
import math

import numpy as np

from . import backend
from .fast import cpu as cores, kernels
from . import functional as F
from .profiler import traced
from .tensor import data_of, make_node

NEG = -1e9  # the "minus infinity" given to masked scores: finite, so a fully masked row makes no NaN


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
    """Arrays in, arrays out: O (B, H, Tq, K), P (B, H, Tq, Tk) before dropout, kept (dropout mask or None).
    With cores on, cut over the batch (cores.by_rows: each block writes its rows of O and P; the dropout
    mask is drawn first, by cores.keep)."""
    xp = backend.xp
    scores = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])  # (B, H, Tq, Tk)
    if mask is not None:
        _check_mask(mask, scores)
    drop = training and dropout_p > 0
    kept = cores.keep(backend.rng(), scores, dropout_p) if drop else None  # (B, H, Tq, Tk) bool
    dtype = xp.result_type(q, k, v)
    o, p = xp.empty(scores[:-1] + v.shape[-1:], dtype), xp.empty(scores, dtype)  # (B, H, Tq, K), (B, H, Tq, Tk)
    cores.by_rows(_attend, q, k, v, mask, kept, dropout_p, o, p)
    return o, p, kept


def _attend(q, k, v, mask, kept, dropout_p, o, p):
    """O and P of eq. (1), for all rows or a block of them, written into o and p."""
    xp = backend.xp
    s = backend.matmul(q, xp.swapaxes(k, -1, -2), out=p)  # (B, H, Tq, Tk): the scores, in P's array
    if mask is not None and kernels.active(s):
        kernels.scale_and_mask(s, mask, 1.0 / math.sqrt(q.shape[-1]), NEG)  # the two lines below, one launch
    else:
        s *= 1.0 / math.sqrt(q.shape[-1])            # eq. (1): scale by 1/sqrt(d_k)
        if mask is not None:
            xp.copyto(s, s.dtype.type(NEG), where=~mask)         # masked scores -> -1e9 (in place, broadcast)
    p = F.softmax_array(s, out=s)                    # (B, H, Tq, Tk) in place: s becomes P
    if mask is not None:
        p *= mask.any(axis=-1, keepdims=True)        # a row with no allowed key: uniform -> zeros
    pd = p if kept is None else (p * kept) * (1.0 / (1.0 - dropout_p))  # inverted dropout
    backend.matmul(pd, v, out=o)                     # (B, H, Tq, K)


def _check_mask(mask, scores):
    """A boolean mask that broadcasts to the scores' shape (B, H, Tq, Tk), or one sentence saying what it is."""
    if mask.dtype != bool:
        raise TypeError(f"attention: the mask must be boolean, True where attention is allowed, got dtype {mask.dtype}"
                        + (" (for an additive mask of 0 and -inf, pass mask == 0)" if mask.dtype.kind == "f" else ""))
    if len(mask.shape) > len(scores) or any(n not in (1, m) for n, m in zip(mask.shape[::-1], scores[::-1])):
        raise ValueError(f"attention: a mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
                         f"(B, H, Tq, Tk) = {tuple(scores)}")


def attention_backward(g, q, k, v, p, kept, dropout_p, need_q, need_k, need_v, out=(None, None, None)):
    """dO (B, H, Tq, K) -> (dQ, dK, dV), each None when not needed, each written into its array of `out`
    where one is given (a GEMM writes its result there: no copy). See scaled_dot_product_attention.
    Its callers cut it over the batch as the forward pass is (cores.by_rows)."""
    xp = backend.xp
    inv_keep = 1.0 / (1.0 - dropout_p) if kept is not None else 1.0
    dq = dk = dv = None
    if need_v:
        pd = p if kept is None else (p * kept) * inv_keep  # the dropped P of the forward pass
        dv = backend.matmul(xp.swapaxes(pd, -1, -2), g, out=out[2])  # dV = P_drop^T dO  (B, H, Tk, K)
    if need_q or need_k:
        ds = backend.matmul(g, xp.swapaxes(v, -1, -2))       # dP_drop = dO V^T      (B, H, Tq, Tk)
        if kept is not None:
            ds *= kept                                       # dP = dP_drop * M / (1 - p)
            ds *= inv_keep
        if kernels.active(ds, p) and ds.flags.c_contiguous and p.flags.c_contiguous:
            kernels.backward_rows("softmax", p, ds, out=ds, scale=1.0 / math.sqrt(q.shape[-1]))  # the GPU: the
        else:                                                # three lines below, one launch
            ds -= (ds * p).sum(axis=-1, keepdims=True)       # dS = P * (dP - rowsum(dP * P))
            ds *= p
            ds *= 1.0 / math.sqrt(q.shape[-1])               # through S = q k^T / sqrt(d_k)
        if need_q:
            dq = backend.matmul(ds, k, out=out[0])           # dQ = dS K / sqrt(d_k)  (B, H, Tq, K)
        if need_k:
            dk = backend.matmul(xp.swapaxes(ds, -1, -2), q, out=out[1])  # dK = dS^T Q / sqrt(d_k)  (B, H, Tk, K)
    return dq, dk, dv


@traced
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, training=True, return_weights=False):
    """Eq. (1), softmax(q k^T / sqrt(d_k)) v, as ONE graph node: q (B, H, Tq, K), k and v (B, H, Tk, K)
    -> O (B, H, Tq, K); with return_weights=True also P (B, H, Tq, Tk), the attention weights before
    dropout (a plain array; read it, do not write to it: backward uses it). Plain form: plain.attention.

    Forward:  S = q k^T / sqrt(d_k);  S = -1e9 where mask is False;  P = softmax(S) over the keys;
              rows whose keys are all masked get P = 0 (output 0, gradients 0, never NaN);
              P_drop = P * M / (1 - p) with M ~ Bernoulli(1 - p) when training (inverted dropout);
              O = P_drop v.
    Backward: dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k), dV = P_drop^T dO, dS = P * (dP - rowsum(dP * P)).
              From dO: O = P_drop v is a matmul, so dV = P_drop^T dO and dP_drop = dO V^T.
              Dropout is an elementwise product by the constant M / (1 - p): dP = dP_drop * M / (1 - p).
              Softmax per row, y = softmax(s): dy_i/ds_j = y_i (delta_ij - y_j), so
              dS_j = sum_i dP_i y_i (delta_ij - y_j) = P_j (dP_j - sum_i dP_i P_i).
              Masked entries have P = 0, hence dS = 0: no gradient reaches a masked score (the
              constant -1e9 does not depend on q or k). S = q k^T * c with c = 1/sqrt(d_k):
              dQ = c dS K, dK = c dS^T Q.
    Saved for backward: q, k, v, P and (with dropout) the boolean mask M; S and P_drop are not kept.
    """
    qd, kd, vd = q.data, k.data, v.data
    mask = None if mask is None else backend.asarray(data_of(mask))
    out, p, kept = attention_forward(qd, kd, vd, mask, dropout_p, training)

    def backward(g):
        return cores.by_rows(attention_backward, g, qd, kd, vd, p, kept, dropout_p,
                             q.requires_grad, k.requires_grad, v.requires_grad)
    o = make_node(out, (q, k, v), backward, "attention")
    return (o, p) if return_weights else o
