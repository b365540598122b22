"""Multi-head attention (multihead.py): the module against plain.multi_head_attention (fused and
general projections, in float64 and as it trains in float32), each projection layout of
multi_head_attention against the plain form, the GPU's layout (fast/gpu.py), gradient checks,
dropout, parameters and the errors that name a bad input."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
from minitransformer import backend, multihead, plain
from minitransformer.attention import causal_mask, padding_mask
from minitransformer.multihead import MultiHeadAttention

from conftest import f32_tol

FAST = settings(max_examples=15, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def mha_tol(m, T):
    """The float32 tolerance of a MultiHeadAttention's output computed two ways (cached or not): the
    dot products on the way are the projections in and out (d_model terms each), the scores (d_k),
    the softmax's sum and the weighted sum (T keys each); inputs and weights O(1)."""
    return f32_tol(2 * m.d_model + m.d_model // m.n_heads + 2 * T)


def t64(a, requires_grad=True):
    return mt.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def to64(module):
    """Switch a module's parameters to float64 in place (for comparisons at 1e-6)."""
    for p in module.parameters():
        p.data = p.data.astype(np.float64)
    return module


def plain_mha(m, q, k, v, mask):
    """plain.multi_head_attention with the module's weights: its fused w_qkv (or w_kv) sliced into
    separate (D, D) blocks, so that gradients flow back into the module's parameters."""
    D = m.d_model
    blocks = lambda lin: [(lin.weight[:, i:i + D], lin.bias[i:i + D])
                          for i in range(0, lin.weight.shape[1], D)]
    (wq, bq), (wk, bk), (wv, bv) = (blocks(m.w_qkv) if m.self_attention else
                                    blocks(m.w_q) + blocks(m.w_kv))
    return plain.multi_head_attention(q, k, v, wq, wk, wv, m.w_o.weight, m.n_heads, mask,
                                      biases=(bq, bk, bv, m.w_o.bias))


def draw_mha_case(data, xp):
    """A MultiHeadAttention (self or encoder-decoder), inputs that share tensors or not, and a
    mask."""
    B, Tq, Tk = (data.draw(st.integers(1, n)) for n in (2, 4, 4))
    H = data.draw(st.sampled_from([1, 2]))
    D = H * data.draw(st.integers(1, 3))
    self_attention = data.draw(st.booleans())
    shared = data.draw(st.booleans())       # q is k is v (self) / k is v (encoder-decoder)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    if self_attention and shared:
        Tk = Tq
    q, k, v = (t64(rng.standard_normal((B, T, D))) for T in (Tq, Tk, Tk))
    if shared:
        k = v = q if self_attention else k
    kind = data.draw(st.sampled_from(["none", "padding", "causal"]))
    mask = None
    if kind == "padding":
        lengths = rng.integers(0, Tk + 1, size=B)
        mask = padding_mask(np.where(np.arange(Tk)[None, :] < lengths[:, None], 5, 0))
    elif kind == "causal" and Tq == Tk:
        mask = causal_mask(Tq)
    m = to64(MultiHeadAttention(D, H, self_attention=self_attention))
    return m, q, k, v, mask


@FAST
@given(data=st.data())
def test_mha_matches_plain(xp_backend, data):
    m, q, k, v, mask = draw_mha_case(data, xp_backend)
    inputs = list({id(t): t for t in (q, k, v)}.values()) + m.parameters()
    g = backend.asarray(np.random.default_rng(2).standard_normal(q.shape))
    fused = m(q, k, v, mask=mask)
    fused.backward(g)
    got = [t.grad.copy() for t in inputs]
    for t in inputs:
        t.grad = None
    ref = plain_mha(m, q, k, v, mask)
    ref.backward(g)
    np.testing.assert_allclose(fused.numpy(), ref.numpy(), atol=1e-6, rtol=1e-6)
    for a, t in zip(got, inputs):
        np.testing.assert_allclose(backend.to_numpy(a), backend.to_numpy(t.grad), atol=1e-6,
                                   rtol=1e-6)


@pytest.mark.parametrize("self_attention", [True, False])
def test_mha_matches_plain_in_float32(xp_backend, self_attention):
    """The module as it trains, in float32, against plain.multi_head_attention: output and the
    gradients of the inputs and of every parameter."""
    rng = np.random.default_rng(3)
    B, T, D, H = 2, 5, 16, 4
    m = MultiHeadAttention(D, H, self_attention=self_attention)
    x, memory = (mt.tensor(rng.standard_normal((B, T, D)).astype(np.float32), requires_grad=True)
                 for _ in range(2))
    k = x if self_attention else memory
    mask = (causal_mask(T) if self_attention else
            padding_mask(np.array([[4, 4, 4, 0, 0], [4, 4, 4, 4, 4]])))
    inputs = list({id(t): t for t in (x, k)}.values()) + m.parameters()
    g = backend.asarray(rng.standard_normal((B, T, D)).astype(np.float32))
    results = []
    for f in (lambda: m(x, k, mask=mask), lambda: plain_mha(m, x, k, k, mask)):
        for t in inputs:
            t.grad = None
        y = f()
        y.backward(g)
        results.append([y.numpy()] + [backend.to_numpy(t.grad) for t in inputs])
    # dot products of the projections in and out (D terms each), the scores (D/H), the softmax's sum
    # and the weighted sum (T keys each), and a weight's gradient: a sum over the B*T positions
    n = mha_tol(m, T) / f32_tol(1) + B * T
    for i, (fast, ref) in enumerate(zip(*results)):
        np.testing.assert_allclose(fast, ref, rtol=0, atol=f32_tol(n, max(1.0, np.abs(ref).max())),
                                   err_msg=f"output, then inputs, then parameters: {i}")


@pytest.mark.parametrize("layout", ["qkv", "q_kv", "q_k_v"])
def test_mha_with_the_gpus_layout_gives_the_same_numbers(layout, monkeypatch, numpy_kernels):
    """The GPU's way (fast.gpu.multi_head_attention: head arrays copied C-ordered, the backward's
    GEMMs writing into C-ordered arrays copied into the gradients after; its kernels modelled in
    NumPy) against the plain one of multihead.py (head views; their gradients copied into the
    gradients' head views): the same numbers, output and every gradient, for each layout of the
    projections (to float32 rounding: a BLAS may sum a copied matrix otherwise than a strided view)."""
    from types import SimpleNamespace
    from minitransformer.fast import gpu
    rng = np.random.default_rng(4)
    B, T, S, D, H = 3, 5, 7, 16, 4
    m = MultiHeadAttention(D, H, self_attention=layout != "q_kv")
    x, memory, v = (mt.tensor(rng.standard_normal((B, n, D)).astype(np.float32), requires_grad=True)
                    for n in (T, S, S))
    args = {"qkv": (x,), "q_kv": (x, memory), "q_k_v": (x, memory, v)}[layout]
    g = rng.standard_normal((B, T, D)).astype(np.float32)
    results = []
    for gpu_way in (False, True):
        if gpu_way:
            monkeypatch.setattr(multihead, "fast", SimpleNamespace(
                on=lambda *arrays: True, multi_head_attention=gpu.multi_head_attention))
        for t in args + tuple(m.parameters()):
            t.grad = None
        y = m(*args, mask=padding_mask(np.array([[1] * 4 + [0] * (args[-1].shape[1] - 4)] * B)))
        y.backward(g)
        results.append([y.numpy()] +
                       [backend.to_numpy(t.grad) for t in args + tuple(m.parameters())])
    n = 2 * D + S                       # the longest chain of sums: projections in and out, the keys
    for i, (cpu_way, gpu_way) in enumerate(zip(*results)):
        np.testing.assert_allclose(gpu_way, cpu_way, rtol=0,
                                   atol=f32_tol(n, max(1.0, np.abs(cpu_way).max())),
                                   err_msg=f"output, then inputs, then parameters: {i}")


@FAST
@given(data=st.data(), layout=st.sampled_from(["FUSED_QKV", "Q_AND_KV", "SEPARATE"]))
def test_each_projection_layout_equals_the_plain_form(xp_backend, data, layout):
    """multi_head_attention over projections laid out as FUSED_QKV (one [q | k | v] of one input),
    Q_AND_KV (q, and [k | v] of the memory) or SEPARATE (q, k, v of three inputs) gives the output
    of plain.multi_head_attention (W^O the identity: the heads merged, before the output
    projection) and the same gradients of the inputs and of every projection weight; P holds the
    attention weights, rows of one over the keys a query sees, zero where it sees none."""
    B, Tq, Tk = (data.draw(st.integers(1, n)) for n in (2, 4, 4))
    H = data.draw(st.sampled_from([1, 2, 3]))
    D = H * data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    if layout == "FUSED_QKV":
        Tk = Tq
    x, memory, values = (t64(rng.standard_normal((B, T, D))) for T in (Tq, Tk, Tk))
    w_q, w_k, w_v = (t64(rng.standard_normal((D, D)) / np.sqrt(D)) for _ in range(3))
    if layout == "FUSED_QKV":                                        # self-attention: q is k is v
        q = k = v = x
        parts = (x @ mt.concat([w_q, w_k, w_v], axis=1),)
    elif layout == "Q_AND_KV":                                       # encoder-decoder: k is v
        q, k, v = x, memory, memory
        parts = (x @ w_q, memory @ mt.concat([w_k, w_v], axis=1))
    else:
        q, k, v = x, memory, values
        parts = (x @ w_q, memory @ w_k, values @ w_v)
    assert multihead.LAYOUT_OF[len(parts)] == getattr(multihead, layout)
    kind = data.draw(st.sampled_from(["none", "padding", "causal"]))
    mask = None
    if kind == "padding":                                            # length 0: a row sees nothing
        lengths = rng.integers(0, Tk + 1, size=B)
        mask = padding_mask(np.where(np.arange(Tk)[None, :] < lengths[:, None], 5, 0))
    elif kind == "causal" and Tq == Tk:
        mask = causal_mask(Tq)
    leaves = list({id(t): t for t in (q, k, v, w_q, w_k, w_v)}.values())     # each once
    g = backend.asarray(rng.standard_normal((B, Tq, D)))
    out, weights = multihead.multi_head_attention(parts, H, mask)
    out.backward(g)
    got = [t.grad.copy() for t in leaves]
    for t in leaves:
        t.grad = None
    ref = plain.multi_head_attention(q, k, v, w_q, w_k, w_v, mt.tensor(np.eye(D)), H, mask)
    ref.backward(g)
    # float64: sums of at most D + Tk terms of size O(1) round to about 1e-14
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=1e-10)
    for a, t in zip(got, leaves):
        np.testing.assert_allclose(backend.to_numpy(a), backend.to_numpy(t.grad), rtol=0,
                                   atol=1e-10)
    seen = np.ones((B, 1, Tq, Tk), bool) if mask is None else backend.to_numpy(mask)
    sees_some = np.broadcast_to(seen, (B, H, Tq, Tk)).any(-1)
    assert weights.shape == (B, H, Tq, Tk)
    np.testing.assert_allclose(backend.to_numpy(weights).sum(-1), sees_some.astype(float),
                               rtol=0, atol=1e-12)


@FAST
@given(data=st.data())
def test_mha_gradcheck(xp_backend, data):
    m, q, k, v, mask = draw_mha_case(data, xp_backend)
    inputs = list({id(t): t for t in (q, k, v)}.values())
    n = len(inputs)
    # the module's inputs and every parameter, element-wise where small
    fn = {1: lambda a, *ps: m(a, mask=mask) if m.self_attention else m(a, a, mask=mask),
          2: lambda a, b, *ps: m(a, b, mask=mask),
          3: lambda a, b, c, *ps: m(a, b, c, mask=mask)}[n]
    assert mt.gradcheck(fn, *inputs, *m.parameters())


def test_mha_dropout_and_float32(xp_backend):
    m = MultiHeadAttention(16, 4, dropout=0.5)
    x = mt.tensor(np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32),
                  requires_grad=True)
    y, p = m(x, return_weights=True)
    assert y.shape == (2, 5, 16) and p.shape == (2, 4, 5, 5) and y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32 and all(q.grad.dtype == np.float32 for q in m.parameters())
    m.eval()
    a, b = m(x), m(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())     # eval: no dropout, deterministic
    m.train()
    assert not np.allclose(m(x).numpy(), m(x).numpy())      # training: attention dropout on


def test_mha_parameters_and_errors():
    m = MultiHeadAttention(64, 8)
    assert [n for n, _ in m.named_parameters()] == ["w_qkv.weight", "w_qkv.bias", "w_o.weight",
                                                    "w_o.bias"]
    assert m.num_parameters() == 4 * (64 * 64 + 64)
    c = MultiHeadAttention(64, 8, self_attention=False)
    assert [n for n, _ in c.named_parameters()][:4] == ["w_q.weight", "w_q.bias", "w_kv.weight",
                                                        "w_kv.bias"]
    assert c.num_parameters() == m.num_parameters()
    # each block of the fused weight has the scale of a separate (D, D) Xavier matrix
    w = m.w_qkv.weight.numpy()
    bound = math.sqrt(6 / 128)
    assert 0.9 * bound < np.abs(w).max() <= bound
    with pytest.raises(ValueError, match="split evenly"):
        MultiHeadAttention(10, 3)


def test_masks_of_the_wrong_kind_or_shape_and_inputs_of_the_wrong_shape_are_named(xp_backend):
    m = MultiHeadAttention(8, 2)
    x = mt.tensor(np.ones((2, 5, 8), np.float32))
    causal = np.tril(np.ones((5, 5)))
    with pytest.raises(TypeError,
                       match="mask must be boolean, True where attention is allowed, "
                             "got dtype int64"):
        m(x, mask=causal.astype(np.int64))
    with pytest.raises(TypeError, match="additive mask of 0 and -inf, pass mask == 0"):
        m(x, mask=np.where(causal > 0, 0.0, -np.inf).astype(np.float32))   # PyTorch's kind of mask
    with pytest.raises(ValueError, match=r"a mask of shape \(3, 1, 1, 5\) does not broadcast to "
                                         r".* \(2, 2, 5, 5\)"):
        m(x, mask=np.ones((3, 1, 1, 5), bool))
    for q, k in ((mt.tensor(np.ones((5, 8), np.float32)), None),                # no batch axis
                 (x, mt.tensor(np.ones((3, 5, 8), np.float32)))):   # used to broadcast silently
        with pytest.raises(ValueError,
                           match="q, k and v must be Tensors \\(batch, length, d_model=8\\)"):
            m(q, k)
    with pytest.raises(ValueError, match="n_heads must be an integer of at least 1, got 0"):
        MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="n_heads must be an integer of at least 1, got 2.0"):
        MultiHeadAttention(8, 2.0)
    with pytest.raises(ValueError, match="d_model=8 must split evenly across n_heads=3"):
        MultiHeadAttention(8, 3)


@pytest.mark.parametrize("self_attention", [True, False])
def test_the_key_bias_has_a_zero_gradient(self_attention):
    """b^K adds q_i . b^K to every score of query i's row, a constant the softmax cancels: its gradient
    is zero, what backward gives it only rounding (multihead.py's Note). In float64 it is under
    1e-12 of the query bias's, which is not zero: compare gradients (or trained weights) without it."""
    rng = np.random.default_rng(3)
    D, H, B, T, S = 16, 4, 2, 5, 6
    m = MultiHeadAttention(D, H, self_attention=self_attention)
    for p in m.parameters():
        p.data = p.data.astype(np.float64)
    x = t64(rng.standard_normal((B, T, D)))
    memory = t64(rng.standard_normal((B, S, D)))
    y = m(x) if self_attention else m(x, memory)
    y.backward(rng.standard_normal((B, T, D)))
    bias = (m.w_qkv if self_attention else m.w_kv).bias.grad
    key_bias = bias[D:2 * D] if self_attention else bias[:D]
    query_bias = bias[:D] if self_attention else m.w_q.bias.grad
    assert np.abs(query_bias).max() > 1e-3
    assert np.abs(key_bias).max() <= 1e-12 * np.abs(query_bias).max()
