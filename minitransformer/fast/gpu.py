"""The GPU's whole-op alternatives to linear, attention and multi-head attention: the lesson
modules' NumPy bodies with the GPU's ways in, the same signatures and the same numbers (lesson 11).

- linear: the weight and bias gradients added into Adam's flat gradient buffer where one is there
  already (tensor.grad_into: cuBLAS's GEMM with beta 1 under CUDA graphs, the bias's column sum by
  kernels.column_sum, which adds in its last block), so the engine's add costs no launch;
- attention: the scores scaled and masked in one launch, softmax's backward and the 1/sqrt(d_k) in
  another, every GEMM through backend.matmul (cuBLAS's own under CUDA graphs) writing into its
  array;
- multi-head attention: the head views copied C-ordered once per projection, and the backward's
  GEMMs writing into C-ordered arrays copied into the gradients after: a GEMM on the GPU takes its
  batch one stride apart, which head views are not.
"""
import math

import numpy as np

from .. import backend
from ..checks import check_mask
from ..tensor import data_of, grad_into, make_node
from . import kernels

NEG = -1e9                                   # attention.NEG: a masked score
LAYOUTS = {1: (3,), 2: (1, 2), 3: (1, 1, 1)}  # multihead.LAYOUT_OF: q, k, v in each projection


def linear(x, weight, bias=None):
    """functional.linear on the GPU (plain form: plain.linear)."""
    d_in, d_out = weight.shape
    x2 = x.data.reshape(-1, d_in)                                     # (N, d_in)
    y = backend.matmul(x2, weight.data)                               # (N, d_out)
    if bias is not None:
        y += bias.data

    def backward(g):
        g = g.reshape(-1, d_out)                                      # (N, d_out)
        dx = backend.matmul(g, weight.data.T).reshape(x.shape) if x.requires_grad else None
        dw = _transpose_matmul(x2, g, grad_into(weight)) if weight.requires_grad else None
        if bias is None:
            return dx, dw
        db = kernels.column_sum(g, into=grad_into(bias)) if bias.requires_grad else None
        return dx, dw, db
    parents = (x, weight) if bias is None else (x, weight, bias)
    return make_node(y.reshape(x.shape[:-1] + (d_out,)), parents, backward, "linear")


def _transpose_matmul(a, b, into):
    """a^T b (m, n) for a (N, m), b (N, n); added into `into` where given, and then None: by cuBLAS
    with beta 1 while CUDA graphs are on (backend.gemm set)."""
    if into is not None and backend.gemm is not None:
        backend.gemm(a.T, b, into, add=True)
        return None
    ab = backend.matmul(a.T, b)
    if into is None:
        return ab
    into += ab
    return None


def attention_forward(q, k, v, mask, dropout_p, training):
    """attention.attention_forward on the GPU."""
    xp = backend.xp
    scores = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    kept = None
    if training and dropout_p > 0:
        kept = backend.rng().random(scores, dtype=np.float32) >= dropout_p  # (B, H, Tq, Tk) bool
    dtype = xp.result_type(q, k, v)
    o = xp.empty(scores[:-1] + v.shape[-1:], dtype)                   # (B, H, Tq, K)
    s = backend.matmul(q, xp.swapaxes(k, -1, -2), out=xp.empty(scores, dtype))  # (B, H, Tq, Tk)
    if mask is not None:
        kernels.scale_and_mask(s, mask, 1.0 / math.sqrt(q.shape[-1]), NEG)
    else:
        s *= 1.0 / math.sqrt(q.shape[-1])
    p = kernels.forward_rows("softmax_rows", s, out=s)                # (B, H, Tq, Tk) in place
    if mask is not None:
        p *= mask.any(axis=-1, keepdims=True)              # a row with no allowed key: zeros
    pd = p if kept is None else (p * kept) * (1.0 / (1.0 - dropout_p))
    backend.matmul(pd, v, out=o)                                      # (B, H, Tq, K)
    return o, p, kept


def attention_backward(g, q, k, v, p, kept, dropout_p, need_q=True, need_k=True, need_v=True,
                       out=(None, None, None)):
    """attention.attention_backward on the GPU, each gradient written into its array of `out` where
    one is given (the GEMM writes there: no copy)."""
    xp = backend.xp
    inv_keep = 1.0 / (1.0 - dropout_p) if kept is not None else 1.0
    dq = dk = dv = None
    if need_v:
        pd = p if kept is None else (p * kept) * inv_keep             # the dropped P of the forward
        dv = backend.matmul(xp.swapaxes(pd, -1, -2), g, out=out[2])   # (B, H, Tk, K)
    if need_q or need_k:
        ds = backend.matmul(g, xp.swapaxes(v, -1, -2))                # dP_drop (B, H, Tq, Tk)
        if kept is not None:
            ds *= kept
            ds *= inv_keep
        scale = 1.0 / math.sqrt(q.shape[-1])
        if ds.flags.c_contiguous and p.flags.c_contiguous:
            kernels.backward_rows("softmax", p, ds, out=ds, scale=scale)  # dS, one launch
        else:
            ds -= (ds * p).sum(axis=-1, keepdims=True)
            ds *= p
            ds *= scale
        if need_q:
            dq = backend.matmul(ds, k, out=out[0])                    # (B, H, Tq, K)
        if need_k:
            dk = backend.matmul(xp.swapaxes(ds, -1, -2), q, out=out[1])  # (B, H, Tk, K)
    return dq, dk, dv


def multi_head_attention(parts, n_heads, mask=None, dropout_p=0.0, training=True):
    """multihead.multi_head_attention on the GPU: C-ordered heads for cuBLAS's one batch stride."""
    xp = backend.xp
    layout = LAYOUTS[len(parts)]
    q, k, v = [h for t, n in zip(parts, layout)
               for h in xp.ascontiguousarray(_split(t.data, n, n_heads))]  # (B, H, T, K) each
    mask = None if mask is None else backend.asarray(data_of(mask))
    if mask is not None:
        check_mask(mask, q, k)
    out, p, kept = attention_forward(q, k, v, mask, dropout_p, training)  # (B, H, Tq, K)

    def backward(g):
        B, T, D = g.shape
        g = g.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)  # (B, H, Tq, K)
        g = xp.ascontiguousarray(g)                                   # read by two GEMMs: one copy
        result = []
        outs = []
        copies = []
        for t, n in zip(parts, layout):
            if not t.requires_grad:
                result.append(None)
                outs += [None] * n
                continue
            buf = xp.empty(t.shape, dtype=t.dtype)                    # (B, T, n*D)
            heads = _split(buf, n, n_heads)                           # (n, B, H, T, K) views
            stack = xp.empty(heads.shape, buf.dtype)        # C-ordered, the GEMMs' outputs
            result.append(buf)
            copies.append((heads, stack))
            outs += list(stack)
        needed = [o is not None for o in outs]
        attention_backward(g, q, k, v, p, kept, dropout_p, *needed, out=outs)
        for heads, stack in copies:                                   # into the gradients, one copy
            xp.copyto(heads, stack)
        return tuple(result)
    return make_node(_merge_heads(out), tuple(parts), backward, "multi_head_attention"), p


def _split(x, n_parts, n_heads):
    """(B, T, n_parts * D) array -> a view (n_parts, B, H, T, K), as multihead._split."""
    B, T, width = x.shape
    return x.reshape(B, T, n_parts, n_heads, width // (n_parts * n_heads)).transpose(2, 0, 3, 1, 4)


def _merge_heads(o):
    """(B, H, T, K) -> (B, T, D), as multihead._merge_heads."""
    B, H, T, K = o.shape
    return o.transpose(0, 2, 1, 3).reshape(B, T, H * K)
