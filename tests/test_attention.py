"""Attention: masks, the fused scaled dot-product attention against its plain form (plain.attention,
elementary ops; forward and gradients, masks and fully masked rows included), gradient checks,
multi-head attention (fused and general projections) against plain.multi_head_attention, and the
key/value cache."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
from minitransformer import backend, multihead, plain
from minitransformer.attention import causal_mask, padding_mask, scaled_dot_product_attention
from minitransformer.multihead import KVCache, MultiHeadAttention

from conftest import f32_tol

FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def mha_tol(m, T):
    """The float32 tolerance of a MultiHeadAttention's output computed two ways (cached or not): the
    dot products on the way are the projections in and out (d_model terms each), the scores (d_k),
    the softmax's sum and the weighted sum (T keys each); inputs and weights O(1)."""
    return f32_tol(2 * m.d_model + m.d_model // m.n_heads + 2 * T)


def t64(a, requires_grad=True):
    return mt.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def draw_case(data, xp):
    """Random shapes and one of: no mask, padding (some rows all pad), causal, random with empty rows."""
    B, H, Tq, Tk, K = (data.draw(st.integers(1, n)) for n in (3, 3, 5, 5, 6))
    kind = data.draw(st.sampled_from(["none", "padding", "causal", "random"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    mask = None
    if kind == "padding":
        lengths = rng.integers(0, Tk + 1, size=B)                       # length 0: a fully masked row
        ids = np.where(np.arange(Tk)[None, :] < lengths[:, None], 7, 0)
        mask = padding_mask(ids)
    elif kind == "causal":
        Tq = Tk
        mask = causal_mask(Tq)
    elif kind == "random":
        m = rng.random((B, 1, Tq, Tk)) < 0.6
        m[:, :, 0, :] = False                                           # at least one fully masked row
        mask = xp.asarray(m)
    q, k, v = (t64(rng.standard_normal(s)) for s in ((B, H, Tq, K), (B, H, Tk, K), (B, H, Tk, K)))
    return q, k, v, mask


# -------------------------------------------------------------------- masks
def test_padding_mask_known_answer(xp_backend):
    m = padding_mask(np.array([[5, 7, 0], [0, 0, 0]]))
    assert m.shape == (2, 1, 1, 3) and m.dtype == bool
    np.testing.assert_array_equal(backend.to_numpy(m)[:, 0, 0], [[True, True, False], [False, False, False]])
    assert backend.device_of(m) == backend.device
    assert padding_mask(mt.tensor(np.array([[3, 9, 9]])), pad_id=9)[0, 0, 0].tolist() == [True, False, False]


def test_causal_mask_known_answer(xp_backend):
    np.testing.assert_array_equal(backend.to_numpy(causal_mask(3))[0, 0],
                                  [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    # with 2 positions already cached, the 2 new queries see the cache and the past of the new ones
    np.testing.assert_array_equal(backend.to_numpy(causal_mask(2, offset=2))[0, 0],
                                  [[1, 1, 1, 0], [1, 1, 1, 1]])


# -------------------------------------------------------------------- the fused op
def test_sdpa_known_answer(xp_backend):
    # d_k = 4: q.k = 4 for the first key, 0 for the second; scaled: 2 and 0
    q = mt.tensor(np.ones((1, 1, 1, 4), np.float32))
    k = mt.tensor(np.array([[[[1, 1, 1, 1], [0, 0, 0, 0]]]], np.float32))
    v = mt.tensor(np.array([[[[1.0, 0.0], [0.0, 1.0]]]], np.float32))
    o, p = scaled_dot_product_attention(q, k, v, return_weights=True)
    a = math.e ** 2 / (math.e ** 2 + 1)
    np.testing.assert_allclose(backend.to_numpy(p).reshape(-1), [a, 1 - a], rtol=f32_tol(2))  # softmax of 2
    np.testing.assert_allclose(o.numpy().reshape(-1), [a, 1 - a], rtol=f32_tol(2))
    assert o.dtype == np.float32
    # masking the first key leaves only the second; masking both gives zeros
    o = scaled_dot_product_attention(q, k, v, mask=np.array([False, True]))
    np.testing.assert_allclose(o.numpy().reshape(-1), [0.0, 1.0], atol=f32_tol(2))
    o = scaled_dot_product_attention(q, k, v, mask=np.array([False, False]))
    np.testing.assert_array_equal(o.numpy(), 0.0)


@FAST
@given(data=st.data())
def test_sdpa_matches_plain(xp_backend, data):
    q, k, v, mask = draw_case(data, xp_backend)
    fused = scaled_dot_product_attention(q, k, v, mask)
    fused.backward(backend.asarray(np.random.default_rng(5).standard_normal(fused.shape)))
    got = [t.grad.copy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = plain.attention(q, k, v, mask)
    ref.backward(backend.asarray(np.random.default_rng(5).standard_normal(ref.shape)))
    np.testing.assert_allclose(fused.numpy(), ref.numpy(), atol=1e-6, rtol=1e-6)
    for g, t in zip(got, (q, k, v)):
        np.testing.assert_allclose(backend.to_numpy(g), backend.to_numpy(t.grad), atol=1e-6, rtol=1e-6)
    assert np.isfinite(fused.numpy()).all()


@FAST
@given(data=st.data(), p=st.sampled_from([0.1, 0.5]))
def test_sdpa_dropout_matches_plain(xp_backend, data, p):
    q, k, v, mask = draw_case(data, xp_backend)
    mt.seed(11)
    fused = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
    fused.sum().backward()
    got = [t.grad.copy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    mt.seed(11)
    ref = plain.attention(q, k, v, mask, dropout_p=p)          # draws its mask as the fused op does
    ref.sum().backward()
    np.testing.assert_allclose(fused.numpy(), ref.numpy(), atol=1e-6, rtol=1e-6)
    for g, t in zip(got, (q, k, v)):
        np.testing.assert_allclose(backend.to_numpy(g), backend.to_numpy(t.grad), atol=1e-6, rtol=1e-6)


@FAST
@given(data=st.data(), dropout=st.booleans())
def test_sdpa_gradcheck(xp_backend, data, dropout):
    q, k, v, mask = draw_case(data, xp_backend)

    def f(q, k, v):
        mt.seed(3)  # the same dropout mask at every evaluation
        return scaled_dot_product_attention(q, k, v, mask, dropout_p=0.3 if dropout else 0.0)
    assert mt.gradcheck(f, q, k, v)


def test_sdpa_fully_masked_rows_are_zero_with_zero_gradients(xp_backend):
    rng = np.random.default_rng(0)
    q, k, v = (mt.tensor(rng.standard_normal((2, 2, 3, 4)).astype(np.float32) * 100, requires_grad=True)
               for _ in range(3))
    mask = padding_mask(np.array([[1, 1, 0], [0, 0, 0]]))              # the second sentence is all padding
    o = scaled_dot_product_attention(q, k, v, mask, dropout_p=0.5)
    (o * o).sum().backward()
    assert np.isfinite(o.numpy()).all()
    np.testing.assert_array_equal(o.numpy()[1], 0.0)
    for t in (q, k, v):
        g = t.grad if isinstance(t.grad, np.ndarray) else backend.to_numpy(t.grad)
        assert np.isfinite(g).all() and g.dtype == np.float32
        np.testing.assert_array_equal(g[1], 0.0)
    # padded keys of the first sentence receive no gradient either
    np.testing.assert_array_equal(backend.to_numpy(k.grad)[0, :, 2], 0.0)
    np.testing.assert_array_equal(backend.to_numpy(v.grad)[0, :, 2], 0.0)


def test_sdpa_dropout_is_off_in_eval_and_scales_in_training(xp_backend):
    rng = np.random.default_rng(1)
    q, k = (mt.tensor(rng.standard_normal((1, 1, 200, 8)).astype(np.float32)) for _ in range(2))
    v = mt.tensor(np.ones((1, 1, 200, 8), np.float32))
    o_eval = scaled_dot_product_attention(q, k, v, dropout_p=0.5, training=False)
    # rows of P sum to one: 200 terms summed to normalise, 200 again in P @ V
    np.testing.assert_allclose(o_eval.numpy(), 1.0, rtol=f32_tol(200))
    o = scaled_dot_product_attention(q, k, v, dropout_p=0.5, training=True)
    assert o.dtype == np.float32
    assert abs(float(o.numpy().mean()) - 1.0) < 0.05                     # inverted dropout: mean kept
    assert not np.allclose(o.numpy(), 1.0)


# -------------------------------------------------------------------- multi-head attention
def to64(module):
    """Switch a module's parameters to float64 in place (for comparisons at 1e-6)."""
    for p in module.parameters():
        p.data = p.data.astype(np.float64)
    return module


def plain_mha(m, q, k, v, mask):
    """plain.multi_head_attention with the module's weights: its fused w_qkv (or w_kv) sliced into
    separate (D, D) blocks, so that gradients flow back into the module's parameters."""
    D = m.d_model
    blocks = lambda lin: [(lin.weight[:, i:i + D], lin.bias[i:i + D]) for i in range(0, lin.weight.shape[1], D)]
    (wq, bq), (wk, bk), (wv, bv) = blocks(m.w_qkv) if m.self_attention else blocks(m.w_q) + blocks(m.w_kv)
    return plain.multi_head_attention(q, k, v, wq, wk, wv, m.w_o.weight, m.n_heads, mask,
                                      biases=(bq, bk, bv, m.w_o.bias))


def draw_mha_case(data, xp):
    """A MultiHeadAttention (self or encoder-decoder), inputs that share tensors or not, and a mask."""
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
        np.testing.assert_allclose(backend.to_numpy(a), backend.to_numpy(t.grad), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("self_attention", [True, False])
def test_mha_matches_plain_in_float32(xp_backend, self_attention):
    """The module as it trains, in float32, against plain.multi_head_attention: output and the
    gradients of the inputs and of every parameter."""
    rng = np.random.default_rng(3)
    B, T, D, H = 2, 5, 16, 4
    m = MultiHeadAttention(D, H, self_attention=self_attention)
    x, memory = (mt.tensor(rng.standard_normal((B, T, D)).astype(np.float32), requires_grad=True) for _ in range(2))
    k = x if self_attention else memory
    mask = causal_mask(T) if self_attention else padding_mask(np.array([[4, 4, 4, 0, 0], [4, 4, 4, 4, 4]]))
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
def test_mha_with_the_gpus_layout_gives_the_same_bits(layout, monkeypatch, numpy_kernels):
    """The GPU's way (fast.gpu.multi_head_attention: head arrays copied C-ordered, the backward's GEMMs
    writing into C-ordered arrays copied into the gradients after; its kernels modelled in NumPy) against
    the plain one of multihead.py (head views; their gradients copied into the gradients' head views):
    the same numbers to the last bit, output and every gradient, for each layout of the projections."""
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
        results.append([y.numpy()] + [backend.to_numpy(t.grad) for t in args + tuple(m.parameters())])
    for i, (cpu_way, gpu_way) in enumerate(zip(*results)):
        np.testing.assert_array_equal(gpu_way, cpu_way, err_msg=f"output, then inputs, then parameters: {i}")


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
    x = mt.tensor(np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32), requires_grad=True)
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
    assert [n for n, _ in m.named_parameters()] == ["w_qkv.weight", "w_qkv.bias", "w_o.weight", "w_o.bias"]
    assert m.num_parameters() == 4 * (64 * 64 + 64)
    c = MultiHeadAttention(64, 8, self_attention=False)
    assert [n for n, _ in c.named_parameters()][:4] == ["w_q.weight", "w_q.bias", "w_kv.weight", "w_kv.bias"]
    assert c.num_parameters() == m.num_parameters()
    # each block of the fused weight has the scale of a separate (D, D) Xavier matrix
    w = m.w_qkv.weight.numpy()
    bound = math.sqrt(6 / 128)
    assert 0.9 * bound < np.abs(w).max() <= bound
    with pytest.raises(ValueError, match="split evenly"):
        MultiHeadAttention(10, 3)


# -------------------------------------------------------------------- the key/value cache
def test_cache_self_attention_matches_full_recomputation(xp_backend):
    rng = np.random.default_rng(0)
    m = MultiHeadAttention(16, 4).eval()
    x = mt.tensor(rng.standard_normal((3, 7, 16)).astype(np.float32))
    with mt.no_grad():
        full = m(x, mask=causal_mask(7)).numpy()
        cache = KVCache()
        steps = [m(x[:, t:t + 1], cache=cache).numpy() for t in range(7)]
        assert len(cache) == 7
        np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=mha_tol(m, 7))
        # several positions at once, with the causal mask offset by what the cache holds
        cache = KVCache()
        a = m(x[:, :3], mask=causal_mask(3), cache=cache).numpy()
        b = m(x[:, 3:], mask=causal_mask(4, offset=3), cache=cache).numpy()
        np.testing.assert_allclose(np.concatenate([a, b], axis=1), full, atol=mha_tol(m, 7))


def test_cache_encoder_decoder_attention_reuses_memory(xp_backend):
    rng = np.random.default_rng(1)
    m = MultiHeadAttention(16, 2, self_attention=False).eval()
    y = mt.tensor(rng.standard_normal((2, 4, 16)).astype(np.float32))
    memory = mt.tensor(rng.standard_normal((2, 6, 16)).astype(np.float32))
    mask = padding_mask(np.array([[3, 3, 3, 3, 0, 0], [3, 3, 3, 3, 3, 3]]))
    with mt.no_grad():
        full = m(y, memory, mask=mask).numpy()
        cache = KVCache()
        steps = [m(y[:, t:t + 1], memory, mask=mask, cache=cache).numpy() for t in range(4)]
        np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=mha_tol(m, 6))
        assert len(cache) == 6
        # after the first step the memory is not read again
        steps = m(y[:, :1], memory * 0.0, mask=mask, cache=cache).numpy()
        np.testing.assert_allclose(steps, full[:, :1], atol=mha_tol(m, 6))


def test_cache_reorder_matches_recomputing_selected_rows(xp_backend):
    rng = np.random.default_rng(2)
    m = MultiHeadAttention(8, 2).eval()
    x = mt.tensor(rng.standard_normal((3, 6, 8)).astype(np.float32))
    index = np.array([2, 2, 0, 1])                       # rows may repeat (beams) and the batch may grow
    with mt.no_grad():
        cache = KVCache()
        for t in range(3):
            m(x[:, t:t + 1], cache=cache)
        cache.reorder(index)
        picked = x.numpy()[index]
        later = [m(mt.tensor(picked[:, t:t + 1]), cache=cache).numpy() for t in range(3, 6)]
        full = m(mt.tensor(picked), mask=causal_mask(6)).numpy()
    np.testing.assert_allclose(np.concatenate(later, axis=1), full[:, 3:], atol=mha_tol(m, 6))


def test_cache_with_grad_mode_on_raises():
    m = MultiHeadAttention(8, 2)
    x = mt.tensor(np.zeros((1, 1, 8), np.float32))
    with pytest.raises(RuntimeError, match="no_grad"):
        m(x, cache=KVCache())


def test_masks_of_the_wrong_kind_or_shape_and_inputs_of_the_wrong_shape_are_named(xp_backend):
    m = MultiHeadAttention(8, 2)
    x = mt.tensor(np.ones((2, 5, 8), np.float32))
    causal = np.tril(np.ones((5, 5)))
    with pytest.raises(TypeError, match="mask must be boolean, True where attention is allowed, got dtype int64"):
        m(x, mask=causal.astype(np.int64))
    with pytest.raises(TypeError, match="additive mask of 0 and -inf, pass mask == 0"):
        m(x, mask=np.where(causal > 0, 0.0, -np.inf).astype(np.float32))   # PyTorch's kind of mask
    with pytest.raises(ValueError, match=r"a mask of shape \(3, 1, 1, 5\) does not broadcast to .* \(2, 2, 5, 5\)"):
        m(x, mask=np.ones((3, 1, 1, 5), bool))
    for q, k in ((mt.tensor(np.ones((5, 8), np.float32)), None),                # no batch axis
                 (x, mt.tensor(np.ones((3, 5, 8), np.float32)))):              # used to broadcast silently
        with pytest.raises(ValueError, match="q, k and v must be Tensors \\(batch, length, d_model=8\\)"):
            m(q, k)
    with pytest.raises(ValueError, match="n_heads must be an integer of at least 1, got 0"):
        MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="n_heads must be an integer of at least 1, got 2.0"):
        MultiHeadAttention(8, 2.0)
    with pytest.raises(ValueError, match="d_model=8 must split evenly across n_heads=3"):
        MultiHeadAttention(8, 3)
