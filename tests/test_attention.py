"""Attention: masks, the fused scaled dot-product attention against its plain form (plain.attention,
elementary ops; forward and gradients, masks and fully masked rows included), gradient checks and
dropout. Multi-head attention: test_multihead.py; the key/value cache: test_cache.py."""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
from minitransformer import backend, plain
from minitransformer.attention import causal_mask, padding_mask, scaled_dot_product_attention

from conftest import f32_tol

FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


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
