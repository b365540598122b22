"""Adam against a hand-computed update, the warmup schedule against eq. (3), gradient clipping,
and the optimizer state's round trip through JSON and .npz."""
import io
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitransformer as mt
from minitransformer import backend, plain
from minitransformer.optim import Adam, WarmupSchedule, clip_grad_norm, noam_schedule
from minitransformer.tensor import Tensor
from conftest import f32_tol


def param(values, dtype=np.float64):
    return Tensor(backend.asarray(np.array(values, dtype=dtype)), requires_grad=True)


def set_grad(p, values):
    p.grad = backend.asarray(np.array(values, dtype=p.dtype))


def test_adam_two_steps_by_hand(xp_backend):
    lr, b1, b2, eps = 0.1, 0.9, 0.98, 1e-9
    p = param([1.0, -2.0])
    opt = Adam([p], lr=lr, betas=(b1, b2), eps=eps)
    g1, g2 = [0.5, -1.0], [0.25, 3.0]
    set_grad(p, g1)
    opt.step()
    # bias correction makes the first step lr * sign(g) (up to eps)
    np.testing.assert_allclose(p.numpy(), [1.0 - lr, -2.0 + lr], rtol=1e-9)
    set_grad(p, g2)
    opt.step()

    # by hand, element by element, straight from the formulas
    expected = []
    for x, a, b in zip([1.0, -2.0], g1, g2):
        m1 = (1 - b1) * a                       # step 1
        v1 = (1 - b2) * a * a
        x1 = x - lr * (m1 / (1 - b1)) / (math.sqrt(v1 / (1 - b2)) + eps)
        m2 = b1 * m1 + (1 - b1) * b             # step 2
        v2 = b2 * v1 + (1 - b2) * b * b
        x2 = x1 - lr * (m2 / (1 - b1 ** 2)) / (math.sqrt(v2 / (1 - b2 ** 2)) + eps)
        expected.append(x2)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-12, atol=1e-15)
    assert opt.steps == 2 and opt.t == [2]


def test_adam_float32_stays_float32(xp_backend):
    p = param([1.0, 2.0, 3.0], dtype=np.float32)
    opt = Adam([p], lr=0.01)
    set_grad(p, [1.0, -1.0, 0.5])
    opt.step()
    assert p.dtype == np.float32 and opt.m[0].dtype == np.float32 and opt.v[0].dtype == np.float32
    # step 1: lr * sign(g); float32: the step's few roundings are lr-small, p - step rounds once
    np.testing.assert_allclose(p.numpy(), [0.99, 2.01, 2.99], rtol=f32_tol(2))


def test_adam_skips_params_without_grad_and_lr_per_step(xp_backend):
    a, b = param([1.0]), param([1.0])
    opt = Adam([a, b], lr=1.0)
    set_grad(a, [2.0])
    opt.step(lr=0.5)
    assert opt.lr == 0.5
    np.testing.assert_allclose(a.numpy(), [0.5])
    np.testing.assert_allclose(b.numpy(), [1.0])
    assert opt.t == [1, 0] and opt.m[1] is None
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_adam_weight_decay_is_decoupled(xp_backend):
    p = param([2.0])
    opt = Adam([p], lr=0.1, weight_decay=0.5)
    set_grad(p, [1.0])
    opt.step()
    np.testing.assert_allclose(p.numpy(), [2.0 * (1 - 0.1 * 0.5) - 0.1], rtol=1e-9)


def test_adam_minimises_a_quadratic(xp_backend):
    target = np.array([3.0, -1.0, 0.5])
    p = param(np.zeros(3))
    opt = Adam([p], lr=0.1)
    t = mt.tensor(target)
    for _ in range(300):
        opt.zero_grad()
        ((p - t) ** 2).sum().backward()
        opt.step()
    np.testing.assert_allclose(p.numpy(), target, atol=1e-2)


def roundtrip(opt):
    """state_dict through real JSON text and a real .npz file (no pickle), as a checkpoint does."""
    scalars, arrays = opt.state_dict()
    text = json.dumps(scalars)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        return json.loads(text), {k: z[k] for k in z.files}


def test_adam_state_round_trip(xp_backend):
    rng = np.random.default_rng(1)
    w0, b0 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    grads = [(rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32))
             for _ in range(4)]

    def make():
        w, b, unused = param(w0, np.float32), param(b0, np.float32), param([0.0], np.float32)
        return [w, b, unused], Adam([w, b, unused], lr=0.01)

    ps, opt = make()
    for gw, gb in grads[:3]:
        set_grad(ps[0], gw), set_grad(ps[1], gb)
        opt.step(lr=opt.lr * 0.9)
    scalars, arrays = roundtrip(opt)
    assert sorted(arrays) == ["m.0", "m.1", "v.0", "v.1"]  # the unused parameter has no moments

    ps2, opt2 = make()
    for p, q in zip(ps, ps2):
        q.data[...] = p.data
    opt2.load_state_dict(scalars, arrays)
    for params, o in ((ps, opt), (ps2, opt2)):
        set_grad(params[0], grads[3][0]), set_grad(params[1], grads[3][1])
        o.step()
    for p, q in zip(ps, ps2):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert opt2.steps == opt.steps == 4 and opt2.t == opt.t == [4, 4, 0] and opt2.lr == opt.lr


def test_adam_load_rejects_other_model():
    opt = Adam([param([1.0, 2.0])])
    set_grad(opt.params[0], [1.0, 1.0])
    opt.step()
    scalars, arrays = opt.state_dict()
    with pytest.raises(ValueError, match="holds 1 parameters but this optimizer has 2"):
        Adam([param([1.0, 2.0]), param([1.0])]).load_state_dict(scalars, arrays)
    with pytest.raises(ValueError, match=r"shape \(2,\), but the parameter has shape \(3,\)"):
        Adam([param([1.0, 2.0, 3.0])]).load_state_dict(scalars, arrays)


def test_schedule_equation_3():
    d, w = 512, 4000
    # eq. (3) written out at chosen steps
    assert noam_schedule(1, d, w) == pytest.approx(d ** -0.5 * 1 * w ** -1.5)
    assert noam_schedule(w, d, w) == pytest.approx(d ** -0.5 * w ** -0.5)
    assert noam_schedule(2 * w, d, w) == pytest.approx(d ** -0.5 * (2 * w) ** -0.5)
    assert noam_schedule(w, d, w) == pytest.approx(6.98771242e-4)  # 1 / sqrt(512 * 4000)
    assert noam_schedule(0, d, w) == noam_schedule(1, d, w)        # step 0 is taken as step 1
    assert noam_schedule(100, d, w, scale=2.0) == pytest.approx(2 * noam_schedule(100, d, w))
    # linear rise, then 1/sqrt decay
    assert noam_schedule(2000, d, w) == pytest.approx(noam_schedule(1000, d, w) * 2)
    assert noam_schedule(16000, d, w) == pytest.approx(noam_schedule(4000, d, w) / 2)


def test_schedule_peaks_at_warmup():
    s = WarmupSchedule(d_model=128, warmup_steps=50, scale=2.0)
    rates = [s(t) for t in range(1, 500)]
    assert int(np.argmax(rates)) + 1 == 50
    assert s.peak == max(rates) == pytest.approx(2.0 * 128 ** -0.5 * 50 ** -0.5)
    assert "warmup_steps=50" in repr(s)


def test_clip_grad_norm(xp_backend):
    a, b, c = param([3.0, 0.0]), param([[4.0]]), param([7.0])
    set_grad(a, [3.0, 0.0]), set_grad(b, [[4.0]])      # c has no gradient: ignored
    norm = clip_grad_norm([a, b, c], max_norm=1.0)
    assert isinstance(norm, float) and norm == pytest.approx(5.0)
    np.testing.assert_allclose(backend.to_numpy(a.grad), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(backend.to_numpy(b.grad), [[0.8]], rtol=1e-6)
    # below the threshold: untouched, and the norm is still reported
    assert clip_grad_norm([a, b], max_norm=10.0) == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(backend.to_numpy(a.grad), [0.6, 0.0], rtol=1e-6)
    assert clip_grad_norm([c], 1.0) == 0.0


def test_clip_grad_norm_non_finite_leaves_grads():
    a = param([1.0, 2.0])
    set_grad(a, [np.inf, 1.0])
    assert clip_grad_norm([a], 1.0) == math.inf
    assert backend.to_numpy(a.grad)[1] == 1.0


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=1, max_size=8), st.floats(0.01, 10))
def test_clip_grad_norm_bound(values, max_norm):
    p = param(np.zeros(len(values)))
    set_grad(p, values)
    norm = clip_grad_norm([p], max_norm)
    assert norm == pytest.approx(float(np.linalg.norm(values)), rel=1e-9, abs=1e-12)
    assert np.linalg.norm(backend.to_numpy(p.grad)) <= max_norm * (1 + 1e-9)


def test_flat_buffer_update_equals_per_parameter_adam_with_skips(xp_backend):
    """Parameters live in one flat buffer; skipping some splits the update into runs with their own t."""
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (4,), (2, 2, 2), (5,)]
    ps = [param(rng.standard_normal(s)) for s in shapes]
    ref = [(p.numpy().copy(), np.zeros(p.shape), np.zeros(p.shape), 0) for p in ps]
    opt = Adam(ps, lr=0.1, weight_decay=0.01)
    assert all(backend.xp.shares_memory(p.data, opt.flat[p.dtype]["data"]) for p in ps)
    for step, present in enumerate([(0, 1, 2, 3), (0, 2), (1, 2, 3), (0, 1, 2, 3)]):
        opt.zero_grad()
        for i in present:
            g = rng.standard_normal(shapes[i])
            set_grad(ps[i], g)
            p, m, v, t = ref[i]
            ref[i] = (*plain.adam(p, g, m, v, t + 1, 0.1, weight_decay=0.01), t + 1)  # from the formulas
        opt.step()
        for p, (want, _, _, _) in zip(ps, ref):
            np.testing.assert_allclose(p.numpy(), want, rtol=1e-12, atol=1e-12)
    assert opt.t == [3, 3, 4, 3]


def test_optimizers_that_share_their_buffers_take_the_whole_step_in_parts(xp_backend):
    """Rank threads: use_buffers() puts the weights and moments of a, b and c in a's buffers, a to
    update the first third of every flat buffer (part (0, 3)), b the second, c the last: the same bits as one whole
    step, with skipped parameters splitting the runs. Other shapes are refused."""
    rng = np.random.default_rng(1)
    shapes = [(3, 4), (4,), (2, 2, 2), (5,)]
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    whole, *ranks = ([param(x.copy(), np.float32) for x in start] for _ in range(4))
    opt, *opts = Adam(whole, lr=0.1), *(Adam(ps, lr=0.1) for ps in ranks)
    for k, o in enumerate(opts):
        if k:
            o.use_buffers(opts[0])
        o.part = (k, 3)
    assert all(backend.xp.shares_memory(p.data, q.data) for p, q in zip(ranks[0], ranks[2]))
    for present in [(0, 1, 2, 3), (0, 2), (1, 2, 3)]:
        grads = {i: rng.standard_normal(shapes[i]).astype(np.float32) for i in present}
        for ps in (whole, *ranks):
            for i, p in enumerate(ps):
                p.grad = backend.asarray(grads[i]) if i in present else None
        opt.step()
        for o in opts:
            o.step()
        for name in ("data", "m", "v"):
            np.testing.assert_array_equal(backend.to_numpy(opts[0].flat[np.dtype(np.float32)][name]),
                                          backend.to_numpy(opt.flat[np.dtype(np.float32)][name]))
    assert opt.t == opts[1].t == [2, 2, 3, 2]
    with pytest.raises(ValueError, match="other sizes"):
        Adam([param(np.zeros(3), np.float32)]).use_buffers(opts[0])


def test_replaced_parameter_arrays_are_taken_back_into_the_buffer(xp_backend):
    """load_state_dict writes in place; an array replaced from outside is copied back in at the next step."""
    model = mt.nn.Linear(3, 2)
    opt = Adam(model.parameters(), lr=0.1)
    model.load_state_dict({"weight": np.ones((3, 2), np.float32), "bias": np.zeros(2, np.float32)})
    assert backend.xp.shares_memory(model.weight.data, opt.flat[model.weight.dtype]["data"])
    model.bias.data = backend.asarray(np.full(2, 5.0, np.float32))              # replaced, not written into
    model.weight.grad = backend.xp.zeros((3, 2), np.float32)
    model.bias.grad = backend.xp.ones(2, np.float32)
    opt.step()
    assert backend.xp.shares_memory(model.bias.data, opt.flat[model.bias.dtype]["data"])
    np.testing.assert_allclose(model.bias.numpy(), 5.0 - 0.1, rtol=f32_tol(2))  # Adam's first step moves by lr
    np.testing.assert_allclose(model.weight.numpy(), 1.0)


def test_step_copies_each_gradient_into_the_flat_buffer(xp_backend):
    model = mt.nn.Linear(4, 3)
    opt = Adam(model.parameters(), lr=0.1)
    x = mt.tensor(np.ones((2, 4), np.float32))
    (model(x) * 2.0).sum().backward()
    flat = opt.flat[model.weight.dtype]["grad"]
    assert not any(backend.xp.shares_memory(p.grad, flat) for p in model.parameters())  # backward knows no Adam
    grads = [backend.to_numpy(p.grad).reshape(-1) for p in opt.params]
    np.testing.assert_array_equal(backend.to_numpy(model.bias.grad), np.full(3, 4.0))  # 2 rows x 2
    opt.step()
    np.testing.assert_array_equal(backend.to_numpy(flat), np.concatenate(grads))
    opt.zero_grad()
    assert model.weight.grad is None                                      # "no gradient" stays None


def test_adam_and_clipping_refuse_senseless_arguments():
    p = param([1.0, 2.0])
    with pytest.raises(TypeError, match=r"Adam takes the parameters, not the model: Adam\(model.parameters\(\)\)"):
        Adam(mt.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="parameter 1 is parameter 0 again"):
        Adam([p, p])                                  # a shared weight listed twice
    with pytest.raises(TypeError, match="parameter 0 must be a floating-point Tensor, got ndarray"):
        Adam([np.ones(2)])
    for betas in (0.9, (0.9, 0.98, 0.5)):
        with pytest.raises(ValueError, match="betas must be two numbers in"):
            Adam([p], betas=betas)
    for lr in (-1e-3, math.nan, None):
        with pytest.raises(ValueError, match=r"Adam: lr must be a finite number in \[0\.0, inf\)"):
            Adam([p], lr=lr)
    opt = Adam([p], lr=0.1)
    set_grad(p, [1.0, 1.0])
    with pytest.raises(ValueError, match=r"Adam: lr must be a finite number in \[0\.0, inf\), got -0\.1"):
        opt.step(lr=-0.1)
    for max_norm in (0, -1.0, math.inf):             # a negative one used to flip every gradient
        with pytest.raises(ValueError, match=r"clip_grad_norm: max_norm must be a finite number in \(0\.0, inf\)"):
            clip_grad_norm([p], max_norm)
    np.testing.assert_array_equal(backend.to_numpy(p.grad), [1.0, 1.0])
