"""Fused ops: known answers, agreement with their plain forms in plain.py, composed of elementary Tensor
ops (forward and every gradient, 1e-6 in float64), and gradient checks on shapes drawn by hypothesis."""
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import backend, plain
from conftest import f32_tol, randn

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def leaf(t):
    """A fresh leaf tensor with t's values (randn(...) * 3 is an op's output, not a leaf)."""
    return mt.tensor(t.data, requires_grad=True)


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


def assert_same(fused, composed, *inputs, seed=1):
    """Forward values and the gradients of every input agree to 1e-6 (float64 inputs)."""
    grads = []
    for fn in (fused, composed):
        for t in inputs:
            t.grad = None
        y = fn(*inputs)
        dy = np.random.default_rng(seed).standard_normal(y.shape)
        y.backward(backend.asarray(dy))
        grads.append((y.numpy(), [None if t.grad is None else backend.to_numpy(t.grad) for t in inputs]))
    (y1, g1), (y2, g2) = grads
    np.testing.assert_allclose(y1, y2, rtol=1e-6, atol=1e-6)
    for i, (a, b) in enumerate(zip(g1, g2)):
        assert (a is None) == (b is None), f"input {i}: a gradient on one side only"
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"gradient of input {i}")


# -------------------------------------------------------------------- softmax and log_softmax
def test_softmax_known_answer(xp_backend):
    y = F.softmax(mt.tensor([[0.0, np.log(2.0), np.log(3.0)], [5.0, 5.0, 5.0]]))
    # float32 inputs (log 2, log 3 rounded), exp, a sum of 3, a division: a few eps relative
    np.testing.assert_allclose(y.numpy(), [[1 / 6, 2 / 6, 3 / 6], [1 / 3, 1 / 3, 1 / 3]], rtol=f32_tol(3))
    assert y.dtype == np.float32
    y = F.log_softmax(mt.tensor([0.0, np.log(3.0)]))
    # log p = x - log(sum exp): absolute errors of a few eps times |x| <= log 3
    np.testing.assert_allclose(y.numpy(), np.log([0.25, 0.75]), rtol=0, atol=f32_tol(2, np.log(3.0)))


@SETTINGS
@given(shape=shapes, data=st.data())
def test_softmax_log_softmax_match_plain_and_gradcheck(xp_backend, shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    x = leaf(randn(*shape, seed=len(shape)) * 3)
    for fused, ref in ((F.softmax, plain.softmax), (F.log_softmax, plain.log_softmax)):
        assert_same(lambda t: fused(t, axis), lambda t: ref(t, axis), x)
        assert mt.gradcheck(lambda t: fused(t, axis), x)
    for core, ref in ((F.softmax_array, plain.softmax), (F.log_softmax_array, plain.log_softmax)):
        a = x.data.copy()
        assert core(a, axis, out=a) is a                                  # in place
        np.testing.assert_allclose(backend.to_numpy(a), ref(x, axis).numpy(), rtol=1e-12, atol=1e-12)


def test_softmax_is_stable_for_huge_inputs(xp_backend):
    x = mt.tensor([[1e4, -1e4, 0.0], [1e30, 1e30, -1e30]], requires_grad=True)
    for f in (F.softmax, F.log_softmax):
        y = f(x)
        (y * mt.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])).sum().backward()
        assert np.isfinite(y.numpy()[0]).all() and np.isfinite(backend.to_numpy(x.grad)).all()
        x.grad = None
    np.testing.assert_allclose(F.softmax(x).numpy(), [[1, 0, 0], [0.5, 0.5, 0]], atol=f32_tol(3))  # float32


# -------------------------------------------------------------------- cross-entropy
def ce_case(shape, V, seed, ignore=None):
    rng = np.random.default_rng(seed)
    target = np.asarray(rng.integers(0, V, shape))
    if ignore is not None:
        target[rng.random(shape) < 0.3] = ignore
    return leaf(randn(*shape, V, seed=seed) * 2), target


@SETTINGS
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple), V=st.integers(1, 6),
       eps=st.sampled_from([0.0, 0.1, 0.5]), ignore=st.sampled_from([None, 0, -100]), seed=st.integers(0, 9))
def test_cross_entropy_matches_plain_and_gradcheck(xp_backend, shape, V, eps, ignore, seed):
    z, target = ce_case(shape, V, seed, ignore)
    fused = lambda t: F.cross_entropy(t, target, ignore_index=ignore, label_smoothing=eps)
    assert_same(fused, lambda t: plain.cross_entropy(t, target, ignore, eps), z)
    assert mt.gradcheck(fused, z)


def test_cross_entropy_label_smoothing_closed_form():
    # by hand: p = softmax(z), q = 0.9 onehot + 0.1/3, loss = mean over rows of -sum(q log p)
    z = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    t = np.array([0, 2])
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    expected = np.mean([-(0.9 * logp[0, 0] + 0.1 / 3 * logp[0].sum()), -(0.9 * logp[1, 2] + 0.1 / 3 * logp[1].sum())])
    loss = F.cross_entropy(mt.tensor(z, requires_grad=True), t, label_smoothing=0.1)
    assert abs(loss.item() - expected) < 1e-12
    # eps = 1: the target is uniform, the loss is -mean(log p) whatever the target
    assert abs(F.cross_entropy(mt.tensor(z), t, label_smoothing=1.0).item() + logp.mean()) < 1e-5


def test_cross_entropy_gradient_known_answer(xp_backend):
    z = mt.tensor([[0.0, 0.0], [np.log(3.0), 0.0]], requires_grad=True)
    F.cross_entropy(z, [1, 0]).backward()
    # (softmax - onehot) / 2 rows, in float32: p - 1 loses p's relative precision, so absolute, a
    # softmax of 2 terms <= 1
    np.testing.assert_allclose(backend.to_numpy(z.grad), [[0.25, -0.25], [-0.125, 0.125]], rtol=0, atol=f32_tol(2))


def test_cross_entropy_stable_for_huge_logits(xp_backend):
    z = mt.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4]], requires_grad=True)
    loss = F.cross_entropy(z, np.array([1, 2]), label_smoothing=0.1)
    loss.backward()
    assert np.isfinite(loss.item()) and np.isfinite(backend.to_numpy(z.grad)).all()
    # row 0 picks a logit 2e4 below the max: loss about 0.9*2e4 + 0.1/3*(1e4+2e4+0) + ... , finite and large
    assert loss.item() > 1e3


def test_cross_entropy_ignored_tokens_contribute_nothing(xp_backend):
    z, target = ce_case((3, 5), 7, seed=3, ignore=-1)
    target[0, 0], target[1, 2] = -1, -1
    loss, n = F.cross_entropy(z, target, ignore_index=-1, label_smoothing=0.1, return_count=True)
    loss.backward()
    keep = target != -1
    assert n == int(keep.sum())
    g = backend.to_numpy(z.grad)
    assert np.all(g[~keep] == 0) and np.any(g[keep] != 0)
    # the same loss as the counted rows alone
    sub = mt.tensor(z.numpy()[keep])
    assert abs(F.cross_entropy(sub, target[keep], label_smoothing=0.1).item() - loss.item()) < 1e-9
    # changing the logits of ignored rows changes nothing
    z2 = z.numpy().copy()
    z2[~keep] = 1e3
    assert F.cross_entropy(mt.tensor(z2), target, ignore_index=-1, label_smoothing=0.1).item() == pytest.approx(loss.item())


def test_cross_entropy_all_ignored_is_zero(xp_backend):
    z = randn(2, 3, 4)
    loss, n = F.cross_entropy(z, np.zeros((2, 3), int), ignore_index=0, label_smoothing=0.1, return_count=True)
    loss.backward()
    assert n == 0 and loss.item() == 0.0
    assert np.all(backend.to_numpy(z.grad) == 0)


def test_cross_entropy_accepts_tensor_targets_and_float32(xp_backend):
    z = mt.tensor(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), requires_grad=True)
    loss = F.cross_entropy(z, mt.tensor(np.array([1, 2, 3, 4])), ignore_index=4)
    loss.backward()
    assert loss.dtype == np.float32 and z.grad.dtype == np.float32


def test_cross_entropy_errors(xp_backend):
    z = randn(2, 3, 4)
    with pytest.raises(ValueError, match="target shape"):
        F.cross_entropy(z, np.zeros((3, 2), int))
    with pytest.raises(ValueError, match="out of range"):
        F.cross_entropy(z, np.full((2, 3), 4))
    with pytest.raises(ValueError, match="out of range"):
        F.cross_entropy(z, np.full((2, 3), -1), ignore_index=-100)
    with pytest.raises(TypeError, match="integer"):
        F.cross_entropy(z, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(z, np.zeros((2, 3), int), label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"label_smoothing must be a finite number in \[0\.0, 1\.0\], got None"):
        F.cross_entropy(z, np.zeros((2, 3), int), label_smoothing=None)
    with pytest.raises(TypeError, match=r"ignore_index must be an integer id or None, got 1\.5"):
        F.cross_entropy(z, np.zeros((2, 3), int), ignore_index=1.5)       # would silently ignore nothing


# -------------------------------------------------------------------- layer norm
def test_layer_norm_known_answer(xp_backend):
    x = np.array([[1.0, 2.0, 3.0, 6.0], [-1.0, -1.0, 1.0, 1.0]])
    gamma, beta = np.array([1.0, 2.0, 0.5, 1.0]), np.array([0.0, 1.0, 0.0, -1.0])
    y = F.layer_norm(mt.tensor(x), mt.tensor(gamma), mt.tensor(beta), eps=1e-6).numpy()
    expected = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-6) * gamma + beta
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-9)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 9))
def test_layer_norm_matches_plain_and_gradcheck(xp_backend, shape, seed):
    D = shape[-1]
    x, gamma, beta = leaf(randn(*shape, seed=seed) * 2 + 1), randn(D, seed=seed + 1), randn(D, seed=seed + 2)
    eps = 1e-6
    assert_same(lambda a, g, b: F.layer_norm(a, g, b, eps), lambda a, g, b: plain.layer_norm(a, g, b, eps), x, gamma, beta)
    assert mt.gradcheck(lambda a, g, b: F.layer_norm(a, g, b, eps), x, gamma, beta)


# -------------------------------------------------------------------- dropout
def test_dropout_identity_in_eval_and_p0(xp_backend):
    x = randn(3, 4)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="p must"):
        F.dropout(x, 1.0)


def test_dropout_keeps_expected_value_and_rate(xp_backend):
    x = mt.tensor(np.ones((200, 500), np.float32))
    y = F.dropout(x, 0.3).numpy()
    assert y.dtype == np.float32
    assert abs(y.mean() - 1.0) < 0.01                  # inverted dropout: E[y] = x
    assert abs((y == 0).mean() - 0.3) < 0.01           # the drop rate
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.7], rtol=f32_tol(1))  # 1/(1-p) rounded to float32


def test_dropout_same_seed_same_mask(xp_backend):
    x = randn(50, 20)
    mt.seed(7)
    a = F.dropout(x, 0.5).numpy()
    mt.seed(7)
    b = F.dropout(x, 0.5).numpy()
    c = F.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@SETTINGS
@given(shape=shapes, p=st.sampled_from([0.1, 0.5, 0.9]))
def test_dropout_matches_plain_and_gradcheck(xp_backend, shape, p):
    x = randn(*shape)

    def seeded(dropout):
        def f(t):
            mt.seed(3)  # the same mask in every call: forward, backward and the numeric differences
            return dropout(t, p)
        return f
    fused = seeded(F.dropout)
    assert_same(fused, seeded(plain.dropout), x)
    assert mt.gradcheck(fused, x)


# -------------------------------------------------------------------- embedding and linear
def test_embedding_repeated_ids_known_answer(xp_backend):
    w = randn(5, 3)
    ids = np.array([[1, 1, 4], [1, 0, 4]])
    y = F.embedding(w, ids)
    np.testing.assert_array_equal(y.numpy(), w.numpy()[ids])
    g = np.arange(18.0).reshape(2, 3, 3)
    y.backward(backend.asarray(g))
    expected = np.zeros((5, 3))
    for i, v in enumerate(ids.reshape(-1)):
        expected[v] += g.reshape(-1, 3)[i]
    np.testing.assert_array_equal(backend.to_numpy(w.grad), expected)


@SETTINGS
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple), V=st.integers(1, 5),
       D=st.integers(1, 4), seed=st.integers(0, 9))
def test_embedding_matches_composed_and_gradcheck(xp_backend, shape, V, D, seed):
    w = randn(V, D, seed=seed)
    ids = np.random.default_rng(seed).integers(0, V, shape)  # V small: ids repeat
    assert_same(lambda t: F.embedding(t, ids), lambda t: t[mt.tensor(ids)], w)
    assert mt.gradcheck(lambda t: F.embedding(t, mt.tensor(ids)), w)


def test_embedding_rejects_float_ids(xp_backend):
    with pytest.raises(TypeError, match="integers"):
        F.embedding(randn(3, 2), np.array([0.0, 1.0]))


def test_linear_known_answer(xp_backend):
    x, w, b = np.arange(6.0).reshape(1, 2, 3), np.arange(12.0).reshape(3, 4), np.array([1.0, 0, 0, -1])
    y = F.linear(mt.tensor(x), mt.tensor(w), mt.tensor(b))
    assert y.shape == (1, 2, 4)
    np.testing.assert_array_equal(y.numpy(), x @ w + b)
    np.testing.assert_array_equal(F.linear(mt.tensor(x), mt.tensor(w)).numpy(), x @ w)
    with pytest.raises(ValueError, match="d_in=4"):
        F.linear(mt.tensor(x), mt.tensor(w.T))


@SETTINGS
@given(lead=st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple), d_in=st.integers(1, 4),
       d_out=st.integers(1, 4), seed=st.integers(0, 9))
def test_linear_matches_plain_and_gradcheck(xp_backend, lead, d_in, d_out, seed):
    x, w, b = randn(*lead, d_in, seed=seed), randn(d_in, d_out, seed=seed + 1), randn(d_out, seed=seed + 2)
    assert_same(F.linear, plain.linear, x, w, b)
    assert_same(lambda a, m: F.linear(a, m), plain.linear, x, w)
    assert mt.gradcheck(F.linear, x, w, b)
    assert mt.gradcheck(lambda a, m: F.linear(a, m), x, w)


def test_relu_is_tensor_relu_and_gradchecks(xp_backend):
    x = np.array([[-2.0, -0.0, 0.0, 0.5, 3.0]])
    y = F.relu(mt.tensor(x))
    np.testing.assert_array_equal(y.numpy(), mt.tensor(x).relu().numpy())
    np.testing.assert_array_equal(y.numpy(), [[0.0, 0.0, 0.0, 0.5, 3.0]])
    assert mt.gradcheck(F.relu, randn(3, 4, seed=1))


def _grads(fn, arrays, start, gemm=None):
    """The leaves' .grad after fn(*leaves).backward(dy), leaf i holding start[i] as its .grad before (None:
    none), with backend.gemm set to `gemm` (cuBLAS's GEMM that adds, on the GPU) during the backward."""
    leaves = [mt.tensor(a, requires_grad=True) for a in arrays]
    for t, s in zip(leaves, start):
        t.grad = None if s is None else backend.asarray(s.copy())
    y = fn(*leaves)
    dy = backend.asarray(np.random.default_rng(3).standard_normal(y.shape).astype(y.dtype))
    backend.gemm, before = gemm, backend.gemm
    try:
        y.backward(dy)
    finally:
        backend.gemm = before
    return [backend.to_numpy(t.grad) for t in leaves]


BUFFER_CASES = {"linear": (F.linear, [(2, 9, 6), (6, 5), (5,)]),
                "linear, its weight twice": (lambda x, w, b: F.linear(F.linear(x, w, b), w, b), [(2, 9, 6), (6, 6), (6,)]),
                "layer_norm": (F.layer_norm, [(2, 9, 6), (6,), (6,)])}


@pytest.mark.parametrize("case", BUFFER_CASES)
def test_gradients_added_into_the_leaves_buffers_are_the_engines(xp_backend, case):
    """Leaves that hold a .grad already (gradient buffers: tensor.grad_into) have their share added there once,
    by the op itself where it can (linear's GEMM and column sum; LayerNorm's on the GPU): zero buffers give a
    fresh backward's bits; other numbers `start + fresh`, to the bit where the leaf has one consumer (one
    addition either way), else within rounding (start + a + b in the consumers' order, not start + (a + b))."""
    fn, shapes = BUFFER_CASES[case]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    start = [None] + [rng.standard_normal(s).astype(np.float32) for s in shapes[1:]]
    from minitransformer.fast import cublas
    for gemm in [None] + [cublas.matmul] * (backend.device == "gpu"):    # the GPU: CuPy's GEMM, then cuBLAS's
        fresh = _grads(fn, arrays, [None] * 3, gemm)
        zeros = _grads(fn, arrays, [None] + [np.zeros(s, np.float32) for s in shapes[1:]], gemm)
        added = _grads(fn, arrays, start, gemm)
        for f, z, a, s in zip(fresh[1:], zeros[1:], added[1:], start[1:]):
            np.testing.assert_array_equal(z, f)
            if "twice" in case:
                np.testing.assert_allclose(a, s + f, rtol=0, atol=f32_tol(2, np.abs(s).max() + np.abs(f).max()))
            else:
                np.testing.assert_array_equal(a, s + f)
        np.testing.assert_array_equal(zeros[0], fresh[0])


def test_float32_stays_float32(xp_backend):
    """Training runs in float32: no op may upcast its output or its gradients to float64."""
    rng = np.random.default_rng(0)
    f32 = lambda *s: mt.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
    x, gamma, beta, w, b, table = f32(2, 3, 4), f32(4), f32(4), f32(4, 5), f32(5), f32(6, 4)
    outs = [F.softmax(x), F.log_softmax(x), F.layer_norm(x, gamma, beta), F.dropout(x, 0.5), F.linear(x, w, b),
            F.embedding(table, np.array([[0, 5, 5]])), F.cross_entropy(x, np.array([[0, 1, 2], [3, 0, 1]]),
                                                                         ignore_index=0, label_smoothing=0.1)]
    for y in outs:
        assert y.dtype == np.float32, y._op
        (y * 1.0).sum().backward()
    for t in (x, gamma, beta, w, b, table):
        assert t.grad is not None and t.grad.dtype == np.float32


def test_fused_ops_refuse_arrays_integers_missing_axes_and_wrong_sizes_naming_the_op(xp_backend):
    x, ints = randn(2, 4), mt.tensor(np.ones((2, 4), dtype=np.int64))
    ops = {"softmax": F.softmax, "log_softmax": F.log_softmax, "dropout": lambda t: F.dropout(t, 0.1),
           "layer_norm": lambda t: F.layer_norm(t, randn(4), randn(4)), "linear": lambda t: F.linear(t, randn(4, 3)),
           "cross_entropy": lambda t: F.cross_entropy(t, np.zeros(2, int))}
    for name, op in ops.items():
        with pytest.raises(TypeError, match=rf"{name}: the (input|logits) must be a Tensor, got ndarray"):
            op(np.ones((2, 4), np.float32))   # an ndarray's .data is a memoryview: no AttributeError deep inside
        with pytest.raises(TypeError, match=rf"{name}: the (input|logits) must hold floating-point numbers"):
            op(ints)
    for op in (F.softmax, F.log_softmax):
        with pytest.raises(ValueError, match="axis 2 is out of range for a tensor of 2 dimensions"):
            op(x, axis=2)
    with pytest.raises(ValueError, match=r"layer_norm: input of shape \(2, 4\) does not end in d=5"):
        F.layer_norm(x, randn(5), randn(5))


def test_embedding_refuses_ids_outside_the_table(xp_backend):
    w = randn(5, 2)
    for bad in (5, -1):                                   # -1 used to pick the last row silently
        with pytest.raises(ValueError, match=rf"embedding: id {bad} is out of range for 5 embeddings"):
            F.embedding(w, np.array([[0, bad]]))


# -------------------------------------------------------------------- the plain forms in the lessons
def test_the_lessons_show_the_plain_forms_as_plain_py_has_them():
    """A lesson shows a plain form in a ```py block (GitHub highlights it, run.py and jupytext leave it
    alone): the block must be the function's source in plain.py, docstring and comments included."""
    shown = set()
    for path in sorted((Path(__file__).resolve().parents[1] / "lessons").glob("[0-9][0-9]_*.md")):
        for block in re.findall(r"^```py\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M):
            name = re.match(r"def (\w+)\(", block).group(1)
            assert block == inspect.getsource(getattr(plain, name)), f"{path.name} shows another {name} than plain.py"
            shown.add(name)
    # Adam and the schedule are exercises of lesson 09, which never shows their plain forms
    assert {"softmax", "cross_entropy", "layer_norm", "attention", "multi_head_attention"} <= shown
