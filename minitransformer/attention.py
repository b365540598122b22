"""Attention: boolean masks, scaled dot-product attention as one fused op with a hand-derived backward,
multi-head attention, and the key/value cache for incremental decoding.

Masks are plain boolean arrays of the current backend (not Tensors: they carry no gradient), True
where attention is allowed, broadcastable to (B, H, T_q, T_k). Left out on purpose: relative
positions, local/sparse attention and flash-style tiling (the (T_q, T_k) score matrix is materialised).
"""
import math

from . import backend
# nn import added with MultiHeadAttention
from .tensor import Tensor, make, is_grad_enabled

NEG = -1e9  # the "minus infinity" given to masked scores: finite, so a fully masked row makes no NaN


def _array(x):
    """The backend array behind a Tensor, list or array (masks, ids, indices)."""
    return backend.asarray(x.data if isinstance(x, Tensor) else x)


# -------------------------------------------------------------------- masks
def padding_mask(ids, pad_id=0):
    """(B, S) token ids -> (B, 1, 1, S) boolean mask, True where the key is a real token.

    padding_mask([[5, 7, 0]]) -> [[[[True, True, False]]]]
    """
    return (_array(ids) != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(T, offset=0):
    """(1, 1, T, offset + T) lower-triangular boolean mask: query i (at position offset + i) may see
    key j only when j <= offset + i. `offset` is the number of positions already in a KV cache.

    causal_mask(3)[0, 0] -> [[T, F, F], [T, T, F], [T, T, T]]
    """
    return backend.xp.tri(T, offset + T, k=offset, dtype=bool)[None, None]  # (1, 1, T, offset+T)


# -------------------------------------------------------------------- the fused op
def _attention_forward(q, k, v, mask, dropout_p, training):
    """Arrays in, arrays out: O (B, H, Tq, K), P (B, H, Tq, Tk) before dropout, keep (dropout mask or None)."""
    xp = backend.xp
    s = xp.matmul(q, xp.swapaxes(k, -1, -2))        # (B, H, Tq, Tk)
    s *= 1.0 / math.sqrt(q.shape[-1])                # eq. (1): scale by 1/sqrt(d_k)
    if mask is not None:
        xp.copyto(s, s.dtype.type(NEG), where=~mask)             # masked scores -> -1e9 (in place, broadcast)
    s -= s.max(axis=-1, keepdims=True)               # a stable softmax, in place: s becomes P
    xp.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    p = s                                            # (B, H, Tq, Tk)
    if mask is not None:
        p *= mask.any(axis=-1, keepdims=True)        # a row with no allowed key: uniform -> zeros
    keep = None
    if training and dropout_p > 0:
        keep = backend.rng().random(p.shape, dtype=p.dtype) >= dropout_p  # (B, H, Tq, Tk) bool
        pd = p * keep
        pd *= 1.0 / (1.0 - dropout_p)                # inverted dropout
    else:
        pd = p
    return xp.matmul(pd, v), p, keep                 # (B, H, Tq, K)


def _attention_backward(g, q, k, v, p, keep, dropout_p, need_q, need_k, need_v):
    """dO (B, H, Tq, K) -> (dQ, dK, dV), each None when not needed. See scaled_dot_product_attention."""
    xp = backend.xp
    inv_keep = 1.0 / (1.0 - dropout_p) if keep is not None else 1.0
    dq = dk = dv = None
    if need_v:
        pd = p if keep is None else (p * keep) * inv_keep  # the dropped P of the forward pass
        dv = xp.matmul(xp.swapaxes(pd, -1, -2), g)          # dV = P_drop^T dO       (B, H, Tk, K)
    if need_q or need_k:
        ds = xp.matmul(g, xp.swapaxes(v, -1, -2))            # dP_drop = dO V^T      (B, H, Tq, Tk)
        if keep is not None:
            ds *= keep                                       # dP = dP_drop * M / (1 - p)
            ds *= inv_keep
        ds -= (ds * p).sum(axis=-1, keepdims=True)           # dS = P * (dP - rowsum(dP * P))
        ds *= p
        ds *= 1.0 / math.sqrt(q.shape[-1])                   # through S = q k^T / sqrt(d_k)
        if need_q:
            dq = xp.matmul(ds, k)                            # dQ = dS K / sqrt(d_k)  (B, H, Tq, K)
        if need_k:
            dk = xp.matmul(xp.swapaxes(ds, -1, -2), q)       # dK = dS^T Q / sqrt(d_k)  (B, H, Tk, K)
    return dq, dk, dv


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, training=True, return_weights=False):
    """dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k), dV = P_drop^T dO, dS = P * (dP - rowsum(dP * P)).

    Eq. (1) of the paper as ONE graph node: q (B, H, Tq, K), k and v (B, H, Tk, K) -> O (B, H, Tq, K);
    with return_weights=True also P (B, H, Tq, Tk), the attention weights before dropout (a plain
    array; read it, do not write to it: backward uses it).

    Forward:  S = q k^T / sqrt(d_k);  S = -1e9 where mask is False;  P = softmax(S) over the keys;
              rows whose keys are all masked get P = 0 (output 0, gradients 0, never NaN);
              P_drop = P * M / (1 - p) with M ~ Bernoulli(1 - p) when training (inverted dropout);
              O = P_drop v.
    Backward (from dO): O = P_drop v is a matmul, so dV = P_drop^T dO and dP_drop = dO V^T.
              Dropout is an elementwise product by the constant M / (1 - p): dP = dP_drop * M / (1 - p).
              Softmax per row, y = softmax(s): dy_i/ds_j = y_i (delta_ij - y_j), so
              dS_j = sum_i dP_i y_i (delta_ij - y_j) = P_j (dP_j - sum_i dP_i P_i).
              Masked entries have P = 0, hence dS = 0: no gradient reaches a masked score (the
              constant -1e9 does not depend on q or k). S = q k^T * c with c = 1/sqrt(d_k):
              dQ = c dS K, dK = c dS^T Q.
    Saved for backward: q, k, v, P and (with dropout) the boolean mask M; S and P_drop are not kept.
    """
    qd, kd, vd = q.data, k.data, v.data
    mask = None if mask is None else _array(mask)
    out, p, keep = _attention_forward(qd, kd, vd, mask, dropout_p, training)

    def backward(g):
        return _attention_backward(g, qd, kd, vd, p, keep, dropout_p,
                                   q.requires_grad, k.requires_grad, v.requires_grad)
    o = make(out, (q, k, v), backward, "attention")
    return (o, p) if return_weights else o
