"""Multi-head attention (section 3.2.2): the heads as views of fused projections, attention over
all of them as one graph node (eq. 1 from attention.py), and the module, which reads and fills a
key/value cache of cache.py when decoding incrementally (beams of one sentence sharing its memory's
keys and values).

The plain form, with separate (D, D) projections and no cache: plain.multi_head_attention.
"""
import math

from . import attention, backend, fast, nn
from . import functional as F
from .cache import KVCache  # noqa: F401  (re-exported: a MultiHeadAttention takes one)
from .checks import check_int
from .profiler import traced
from .tensor import Tensor, data_of, is_grad_enabled, make_node


# -------------------------------------------------------------------- multi-head attention
def _split(x, n_parts, n_heads):
    """(B, T, n_parts * D) array -> a view (n_parts, B, H, T, K), no copy: the head split is a
    reshape (B, T, n, H, K) and a transpose."""
    B, T, width = x.shape
    return x.reshape(B, T, n_parts, n_heads, width // (n_parts * n_heads)).transpose(2, 0, 3, 1, 4)


def _heads(x, n_parts, n_heads):
    """(B, T, n_parts * D) array -> n_parts views (B, H, T, K) into it."""
    return list(_split(x, n_parts, n_heads))                              # (n, B, H, T, K)


def _merge_heads(o):
    """(B, H, T, K) -> (B, T, D): concatenate the heads (one copy)."""
    B, H, T, K = o.shape
    return o.transpose(0, 2, 1, 3).reshape(B, T, H * K)  # (B, T, H, K) -> (B, T, D)


# The projection layouts: how many of q, k, v each projection Tensor holds, side by side on its
# last axis.
FUSED_QKV = (3,)      # self-attention: one (B, T, 3D) projection [q | k | v]
Q_AND_KV = (1, 2)     # encoder-decoder attention: q (B, Tq, D) and the memory's [k | v] (B, Tk, 2D)
SEPARATE = (1, 1, 1)  # q, k, v from three projections
# the layouts by number of projections
LAYOUT_OF = {len(layout): layout for layout in (FUSED_QKV, Q_AND_KV, SEPARATE)}


def _head_arrays(parts, n_heads):
    """The arrays q, k, v (B, H, T, K) inside the projections `parts`, laid out as
    LAYOUT_OF[len(parts)]."""
    return [h for t, n in zip(parts, LAYOUT_OF[len(parts)]) for h in _heads(t.data, n, n_heads)]


@traced
def multi_head_attention(parts, n_heads, mask=None, dropout_p=0.0, training=True):
    """Split heads, attend (eq. 1), merge heads, as one graph node: O (B, Tq, D) and
    P (B, H, Tq, Tk).

    Plain form: plain.multi_head_attention between its projections. `parts` are the projections,
    Tensors whose last axis holds q, k, v side by side in that order, in one of three layouts
    (LAYOUT_OF): FUSED_QKV (qkv,), one self-attention projection (B, T, 3D); Q_AND_KV (q, kv),
    encoder-decoder attention, (B, T, D) and (B, S, 2D); or SEPARATE (q, k, v).

    Backward: each part's gradient is the head-merged dQ, dK, dV of scaled_dot_product_attention,
    written into one gradient array per part, so splitting a fused projection costs no extra nodes
    and no zero-filled gradients.
    """
    if fast.on(*parts):
        return fast.multi_head_attention(parts, n_heads, mask, dropout_p, training)
    layout = LAYOUT_OF[len(parts)]
    q, k, v = _head_arrays(parts, n_heads)                                # (B, H, T, K) each
    mask = None if mask is None else backend.asarray(data_of(mask))
    out, p, kept = attention.attention_forward(q, k, v, mask, dropout_p, training)  # (B, H, Tq, K)
    needed = [t.requires_grad for t, n in zip(parts, layout) for _ in range(n)]  # of q, k, v

    def backward(g):
        B, T, D = g.shape
        g = g.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)  # (B, H, Tq, K)
        grads = iter(attention.attention_backward(g, q, k, v, p, kept, dropout_p, *needed))
        result = []                                                       # one gradient per part
        for t, n in zip(parts, layout):
            heads = [next(grads) for _ in range(n)]                       # its dQ, dK or dV
            if not t.requires_grad:
                result.append(None)
                continue
            buf = backend.xp.empty(t.shape, dtype=t.dtype)                # (B, T, n*D)
            # (B, H, T, K) views into buf
            for view, grad in zip(_split(buf, n, n_heads), heads):
                view[...] = grad
            result.append(buf)
        return tuple(result)
    return make_node(_merge_heads(out), tuple(parts), backward, "multi_head_attention"), p


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    The h projections of each of Q, K, V are one (D, D) matrix (the heads are a reshape of its
    output), and they are fused further: self_attention=True keeps one w_qkv (D, 3D), so that
    self-attention (q is k is v) costs one GEMM; self_attention=False (encoder-decoder attention)
    keeps w_q (D, D) and w_kv (D, 2D), one GEMM for the memory's keys and values. Other inputs (k
    not q, or v not k) still work, through column slices of the fused weights. `dropout` is the rate
    on the attention weights P (Note: the paper applies no dropout there; tensor2tensor's later
    versions and the Annotated Transformer do). Plain form: plain.multi_head_attention, with
    separate (D, D) projections and no cache.

    Note: the key projection's bias b^K has a zero gradient. It adds q_i . b^K to every score of
    query i's row, a constant that the softmax cancels, so what backward gives it is rounding noise
    (which Adam, dividing by sqrt(v) + 1e-9, turns into steps of full size and random sign). Compare
    gradients, or weights after training, without it; the paper's projections have no bias at all.
    """

    def __init__(self, d_model, n_heads, dropout=0.0, self_attention=True):
        super().__init__()
        check_int("MultiHeadAttention", "d_model", d_model, 1)
        check_int("MultiHeadAttention", "n_heads", n_heads, 1)
        if d_model % n_heads:
            raise ValueError(f"MultiHeadAttention: d_model={d_model} must split evenly across "
                             f"n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.dropout_p = dropout
        self.self_attention = self_attention
        # a list: every forward call appends its weights P to it (collect_attention)
        self.recorded = None
        if self_attention:
            self.w_qkv = nn.Linear(d_model, 3 * d_model)   # [W^Q | W^K | W^V]
            _init_blocks(self.w_qkv, 3)
        else:
            self.w_q = nn.Linear(d_model, d_model)
            self.w_kv = nn.Linear(d_model, 2 * d_model)    # [W^K | W^V]
            _init_blocks(self.w_kv, 2)
        self.w_o = nn.Linear(d_model, d_model)

    def extra_repr(self):
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, dropout={self.dropout_p}, "
                f"self_attention={self.self_attention}")

    def forward(self, q, k=None, v=None, mask=None, cache=None, return_weights=False):
        """q (B, Tq, D), k and v (B, Tk, D) -> (B, Tq, D); with return_weights also
        P (B, H, Tq, Tk).

        k defaults to q, v to k. mask: boolean, True = allowed, broadcastable to (B, H, Tq, Tk).
        cache: a KVCache, under no_grad only. Self-attention appends the new positions' keys and
        values to it and attends over all of them (pass mask=None for one new position).
        Encoder-decoder attention computes the memory's (k) keys and values on the first call and
        reuses them.
        """
        k = q if k is None else k
        v = k if v is None else v
        if not all(isinstance(x, Tensor) and x.ndim == 3 for x in (q, k, v)) or (
                cache is None
                and not (q.shape[0] == k.shape[0] == v.shape[0] and k.shape[1] == v.shape[1])):
            shapes = [x.shape if isinstance(x, Tensor) else type(x).__name__ for x in (q, k, v)]
            raise ValueError(
                "MultiHeadAttention: q, k and v must be Tensors "
                f"(batch, length, d_model={self.d_model}) of one batch size, k and v of one "
                f"length, got {', '.join(map(str, shapes))}")
        if cache is not None:
            out, p = self._forward_cached(q, k, v, mask, cache)
        else:
            o, p = multi_head_attention(self._project(q, k, v), self.n_heads, mask,
                                        self.dropout_p, self.training)  # (B, Tq, D)
            out = self.w_o(o)                                            # (B, Tq, D)
        if self.recorded is not None:                          # P (B, H, Tq, Tk), on request
            self.recorded.append(p)
        return (out, p) if return_weights else out

    def _project(self, q, k, v):
        """The projections, as few GEMMs as the inputs allow: FUSED_QKV, Q_AND_KV or SEPARATE."""
        D = self.d_model
        if self.self_attention:
            if q is k and k is v:
                return (self.w_qkv(q),)                                  # (B, T, 3D)
            return tuple(_linear_block(x, self.w_qkv, i, D) for i, x in enumerate((q, k, v)))
        if k is v:
            return self.w_q(q), self.w_kv(k)                             # (B, Tq, D), (B, Tk, 2D)
        return self.w_q(q), _linear_block(k, self.w_kv, 0, D), _linear_block(v, self.w_kv, 1, D)

    def _forward_cached(self, q, k, v, mask, cache):
        """Incremental decoding on arrays: no graph, so no gradients."""
        if is_grad_enabled():
            raise RuntimeError(
                "the key/value cache is for inference only: decode with a cache inside "
                "`with mt.no_grad():` (it keeps arrays, not a graph, so no gradient could flow)")
        H = self.n_heads
        if self.self_attention:
            parts = self._project(q, k, v)
            qh, kh, vh = _head_arrays(parts, H)                          # (B, H, n, K) each
            kh, vh = cache.append(kh, vh)                                # (B, H, T, K)
        elif cache.empty:                                    # first step: the memory's k, v
            qh, kh, vh = _head_arrays(self._project(q, k, v), H)
            cache.set(kh, vh)                                            # (B, H, S, K)
        else:
            (qh,) = _heads(self.w_q(q).data, 1, H)                       # (B, H, Tq, K)
            kh = cache.k                                                 # (B / g, H, S, K)
            vh = cache.v                                                 # (B / g, H, S, K)
        mask = None if mask is None else backend.asarray(data_of(mask))
        o, p = _attend_in_groups(qh, kh, vh, mask, self.dropout_p, self.training)
        return self.w_o(Tensor(_merge_heads(o))), p                      # (B, Tq, D)


def _attend_in_groups(q, k, v, mask, dropout_p, training):
    """Attention of q (B, H, Tq, K) over k, v (B / g, H, S, K) -> O (B, H, Tq, K), P (B, H, Tq, S):
    query rows i*g .. i*g+g-1 share key/value row i (and mask row i), as the g beams of one sentence
    share its memory (cache.DecoderCache). Their g*Tq queries become one row's queries: one product
    with g times more rows instead of g products reading the same keys. g = 1: plain attention."""
    B, H, Tq, K = q.shape
    m = k.shape[0]
    mask_rows = None if mask is None else mask.shape[0]
    if B % m or mask_rows not in (None, 1, m):
        raise ValueError(f"attention: {B} query rows cannot share {m} key/value rows "
                         f"(and {mask_rows} mask rows) in equal groups")
    g = B // m
    if g == 1:
        return attention.attention_forward(q, k, v, mask, dropout_p, training)[:2]
    # (m, H, g*Tq, K)
    grouped = q.reshape(m, g, H, Tq, K).transpose(0, 2, 1, 3, 4).reshape(m, H, g * Tq, K)
    o, p, _ = attention.attention_forward(grouped, k, v, mask, dropout_p, training)
    ungroup = lambda a: a.reshape(m, H, g, Tq, -1).transpose(0, 2, 1, 3, 4).reshape(B, H, Tq, -1)
    return ungroup(o), ungroup(p)                                   # (B, H, Tq, K), (B, H, Tq, S)


def _linear_block(x, linear, i, width):
    """x @ W[:, i*width:(i+1)*width] + b[i*width:(i+1)*width]: one block of a fused projection."""
    cols = slice(i * width, (i + 1) * width)
    bias = None if linear.bias is None else linear.bias[cols]
    return F.linear(x, linear.weight[:, cols], bias)


def _init_blocks(linear, n):
    """Initialise a fused (D, n*D) weight as n separate Xavier-uniform (D, D) matrices, so that
    fusing W^Q, W^K, W^V into one matrix does not shrink their initial scale (Xavier over (D, 3D)
    would)."""
    d_in, d_out = linear.weight.shape
    a = math.sqrt(6.0 / (d_in + d_out // n))
    linear.weight.data[...] = backend.asarray(backend.host_rng().uniform(-a, a, (d_in, d_out)),
                                              dtype=linear.weight.dtype)
