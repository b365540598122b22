"""The elementary ops of ops.py: known answers against NumPy, a float64 mt.gradcheck of every op on
hypothesis-drawn shapes (broadcasting included), the dtype of a graph beside Python numbers and
arrays, devices, and the errors that name the op."""
import inspect

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import minitransformer as mt
from minitransformer import backend, ops
from conftest import f32_tol


FAST = settings(max_examples=15, deadline=None)


def t64(a, requires_grad=True):
    return mt.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


# shapes of rank 0-4 with size-1 axes, and a second shape broadcastable against the first
broadcast_pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                     max_side=3)


@FAST
@given(shapes=broadcast_pairs, op=st.sampled_from(["add", "sub", "mul", "div", "pow"]))
def test_binary_ops_gradcheck_with_broadcasting(shapes, op):
    sa, sb = shapes.input_shapes
    rng = np.random.default_rng(0)
    a = t64(rng.uniform(0.5, 2.0, sa))   # positive: pow and div are smooth there
    b = t64(rng.uniform(0.5, 2.0, sb))
    fns = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "pow": lambda a, b: a ** b}
    expected = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                "pow": np.power}[op]
    out = fns[op](a, b)
    np.testing.assert_allclose(out.numpy(), expected(a.numpy(), b.numpy()), rtol=1e-12)
    assert mt.gradcheck(fns[op], a, b)


@pytest.mark.parametrize("scalar", [2, 0.5, -3.0])
def test_python_scalars_on_both_sides_keep_float32(xp_backend, scalar):
    x = mt.tensor([1.0, 2.0, 4.0], requires_grad=True)
    for y in (x + scalar, scalar + x, x - scalar, scalar - x, x * scalar, scalar * x, x / scalar,
              scalar / x, x ** 2):
        assert y.dtype == np.float32
    (scalar / x).sum().backward()
    # float32: a few elementwise roundings (scalar / x, then / x again in the backward), relative
    np.testing.assert_allclose(backend.to_numpy(x.grad), -scalar / np.array([1.0, 4.0, 16.0]),
                               rtol=f32_tol(3))


@FAST
@given(data=st.data())
def test_matmul_batched_and_broadcast(data):
    m, k, n = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch_a = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    batch_b = data.draw(st.sampled_from([batch_a, batch_a[-1:], ()]))
    rng = np.random.default_rng(1)
    a, b = t64(rng.standard_normal(batch_a + (m, k))), t64(rng.standard_normal(batch_b + (k, n)))
    np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-12)
    assert mt.gradcheck(lambda a, b: a @ b, a, b)


def test_matmul_with_vectors():
    rng = np.random.default_rng(2)
    A, v = t64(rng.standard_normal((3, 4))), t64(rng.standard_normal(4))
    assert (A @ v).shape == (3,) and (v @ v).shape == ()
    assert mt.gradcheck(lambda A, v: A @ v, A, v) and mt.gradcheck(lambda v: v @ v, v)


@FAST
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=3), data=st.data(),
       reduce=st.sampled_from(["sum", "mean", "max"]), keepdims=st.booleans())
def test_reductions_over_any_axes(shape, data, reduce, keepdims):
    axes = data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1).map(tuple) | st.none())
    # distinct: max is smooth
    x = t64(np.random.default_rng(3).permutation(np.prod(shape)).reshape(shape) * 0.1)
    out = getattr(x, reduce)(axis=axes, keepdims=keepdims)
    np.testing.assert_allclose(out.numpy(),
                               getattr(np, reduce)(x.numpy(), axis=axes, keepdims=keepdims))
    assert mt.gradcheck(lambda x: getattr(x, reduce)(axis=axes, keepdims=keepdims), x)


def test_max_splits_gradient_between_ties():
    x = t64([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])
    x.max(axis=1).sum().backward()
    np.testing.assert_array_equal(backend.to_numpy(x.grad), [[0, 0.5, 0.5], [1, 0, 0]])


@FAST
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=3),
       op=st.sampled_from(["exp", "log", "sqrt", "relu", "neg"]))
def test_unary_ops(shape, op):
    rng = np.random.default_rng(4)
    data = rng.uniform(0.2, 2.0, shape) * (rng.choice([-1, 1], shape) if op in ("relu", "neg")
                                           else 1)
    x = t64(data)
    fn = (lambda x: -x) if op == "neg" else (lambda x: getattr(x, op)())
    reference = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "relu": lambda a: np.maximum(a, 0),
                 "neg": np.negative}
    np.testing.assert_allclose(fn(x).numpy(), reference[op](data))
    assert mt.gradcheck(fn, x)


@FAST
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), data=st.data())
def test_reshape_and_transpose(shape, data):
    x = t64(np.random.default_rng(5).standard_normal(shape))
    perm = data.draw(st.permutations(range(len(shape))))
    assert x.transpose(*perm).shape == tuple(shape[i] for i in perm)
    assert mt.gradcheck(lambda x: x.transpose(*perm).reshape(-1) *
                        mt.tensor(np.arange(x.size, dtype=np.float64)), x)


def test_getitem_slices_repeated_indices_and_boolean_masks():
    x = t64(np.arange(12.0).reshape(3, 4))
    idx = np.array([0, 2, 0, 0])
    y = x[idx]                                   # repeated rows: gradients must add up
    y.sum().backward()
    np.testing.assert_array_equal(backend.to_numpy(x.grad)[:, 0], [3, 0, 1])
    mask = x.numpy() > 5
    assert mt.gradcheck(lambda x: x[1:, ::2], x)
    assert mt.gradcheck(lambda x: x[idx, 1:3] * 2, x)
    assert mt.gradcheck(lambda x: x[mask] ** 2, x)
    assert mt.gradcheck(lambda x: x[..., None, 2], x)


def test_concat_stack_where_masked_fill():
    rng = np.random.default_rng(6)
    a, b = t64(rng.standard_normal((2, 3))), t64(rng.standard_normal((2, 1)))
    assert mt.concat([a, b], axis=-1).shape == (2, 4)
    assert mt.gradcheck(lambda a, b: mt.concat([a, b, a], axis=1), a, b)
    assert mt.gradcheck(lambda a: mt.stack([a, a * 2], axis=1), a)
    cond = rng.random((2, 3)) > 0.5
    assert mt.gradcheck(lambda a, b: mt.where(cond, a, b), a, b)
    filled = a.masked_fill(cond, -1e9)
    np.testing.assert_array_equal(filled.numpy()[cond], -1e9)
    assert mt.gradcheck(lambda a: a.masked_fill(cond, 0.0), a)


# -------------------------------------------------------------------- every op, random shapes
# For each public op of ops.py, a random case: draw(data, rng) -> (fn, float64 inputs) for
# mt.gradcheck, on shapes drawn by hypothesis, broadcast against each other where the op broadcasts.
def shape_of(data, min_dims=1):
    return data.draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, max_side=3))


def broadcast(data, n):
    """n shapes of rank 0-3 that broadcast against each other."""
    return data.draw(hnp.mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=3,
                                                       max_side=3)).input_shapes


def binary(op):
    def draw(data, rng):                 # positive operands: div and pow are smooth there
        return getattr(ops, op), [t64(rng.uniform(0.5, 2.0, s)) for s in broadcast(data, 2)]
    return draw


def unary(op):
    def draw(data, rng):                 # away from 0: relu's kink, log's and sqrt's pole
        shape = shape_of(data)
        sign = 1.0 if op in ("log", "sqrt") else rng.choice([-1.0, 1.0], shape)
        return getattr(ops, op), [t64(rng.uniform(0.2, 2.0, shape) * sign)]
    return draw


def matmul_case(data, rng):
    batch_a, batch_b = data.draw(hnp.mutually_broadcastable_shapes(
        num_shapes=2, min_dims=0, max_dims=2, max_side=3)).input_shapes
    m, k, n = (data.draw(st.integers(1, 3)) for _ in range(3))
    return ops.matmul, [t64(rng.standard_normal(batch_a + (m, k))),
                        t64(rng.standard_normal(batch_b + (k, n)))]


def where_case(data, rng):
    shape_c, shape_a, shape_b = broadcast(data, 3)
    cond = rng.random(shape_c) < 0.5
    return (lambda a, b: ops.where(cond, a, b)), [t64(rng.standard_normal(shape_a)),
                                                  t64(rng.standard_normal(shape_b))]


def masked_fill_case(data, rng):
    shape = shape_of(data)
    kept = shape[data.draw(st.integers(0, len(shape))):]       # a mask that broadcasts to a
    mask = rng.random(tuple(1 if rng.random() < 0.5 else n for n in kept)) < 0.5
    return (lambda a: ops.masked_fill(a, mask, -2.5)), [t64(rng.standard_normal(shape))]


def reduction(op):
    def draw(data, rng):
        shape = shape_of(data)
        axes = data.draw(st.none() | st.sets(st.integers(-len(shape), len(shape) - 1), min_size=1)
                         .filter(lambda s: len({a % len(shape) for a in s}) == len(s)).map(tuple))
        keepdims = data.draw(st.booleans())
        x = rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1     # distinct: max is smooth
        return (lambda a: getattr(ops, op)(a, axes, keepdims)), [t64(x)]
    return draw


def reshape_case(data, rng):
    shape = shape_of(data)
    return (lambda a: ops.reshape(a, shape[::-1])), [t64(rng.standard_normal(shape))]


def transpose_case(data, rng):
    shape = shape_of(data)
    perm = data.draw(st.permutations(range(len(shape))))
    return (lambda a: ops.transpose(a, perm)), [t64(rng.standard_normal(shape))]


def getitem_case(data, rng):
    shape = shape_of(data)
    idx = data.draw(st.sampled_from([
        rng.integers(0, shape[0], size=2 * shape[0]),           # repeated ids: gradients add up
        rng.random(shape) < 0.5,                                # a boolean mask
        (slice(None, None, 2), Ellipsis, None)]))               # basic indexing
    return (lambda a: ops.getitem(a, idx)), [t64(rng.standard_normal(shape))]


def joined(op):
    def draw(data, rng):
        shape = shape_of(data)
        rank = len(shape) + (op == "stack")                     # stack makes a new axis
        axis = data.draw(st.integers(-rank, rank - 1))
        shapes = [shape] * data.draw(st.integers(1, 3))
        if op == "concat":                                      # sizes may differ along the axis
            at = axis % rank
            shapes = [s[:at] + (data.draw(st.integers(1, 3)),) + s[at + 1:] for s in shapes]
        return (lambda *ts: getattr(ops, op)(list(ts), axis)), [t64(rng.standard_normal(s))
                                                                for s in shapes]
    return draw


CASES = {**{op: binary(op) for op in ("add", "sub", "mul", "div", "pow")},
         **{op: unary(op) for op in ("neg", "exp", "log", "sqrt", "relu")},
         **{op: reduction(op) for op in ("sum", "mean", "max")},
         **{op: joined(op) for op in ("concat", "stack")},
         "matmul": matmul_case, "where": where_case, "masked_fill": masked_fill_case,
         "reshape": reshape_case, "transpose": transpose_case, "getitem": getitem_case}
PUBLIC_OPS = sorted(name for name, fn in vars(ops).items()
                    if inspect.isfunction(fn) and fn.__module__ == ops.__name__
                    and not name.startswith("_"))


def test_every_public_op_has_a_random_case():
    """A new op in ops.py needs a case in CASES, so that the gradcheck below reaches it."""
    assert sorted(CASES) == PUBLIC_OPS


@settings(max_examples=10, deadline=None)
@pytest.mark.parametrize("op", sorted(CASES))
@given(data=st.data())
def test_every_op_passes_gradcheck_on_random_shapes(op, data):
    fn, inputs = CASES[op](data, np.random.default_rng(data.draw(st.integers(0, 2 ** 16))))
    assert fn(*inputs).requires_grad
    assert mt.gradcheck(fn, *inputs)


def test_ops_run_on_each_backend(xp_backend):
    x = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w = mt.tensor(np.ones((3, 2)), requires_grad=True)
    loss = ((x @ w).relu() * 0.5).sum()
    loss.backward()
    assert isinstance(x.data, xp_backend.ndarray) and x.device == backend.device
    np.testing.assert_allclose(backend.to_numpy(x.grad), np.ones((2, 3)))


def test_mixing_backends_raises_naming_both_devices():
    if not backend.gpu_available():
        # Simulate a second device: the check reads the device of each array through
        # backend.device_of.
        class FakeGpuArray(np.ndarray):
            pass
        original = backend.device_of
        backend.device_of = lambda a: "gpu" if isinstance(a, FakeGpuArray) else original(a)
        try:
            a = mt.tensor([1.0, 2.0])
            b = mt.Tensor(np.array([1.0, 2.0], dtype=np.float32).view(FakeGpuArray))
            with pytest.raises(RuntimeError, match=r"cpu \(NumPy\) and gpu \(CuPy\)"):
                a + b
            with pytest.raises(RuntimeError, match="two devices"):
                mt.concat([a, b])
        finally:
            backend.device_of = original
    else:
        mt.use("cpu")
        a = mt.tensor([1.0, 2.0])
        mt.use("gpu")
        b = mt.tensor([1.0, 2.0])
        with pytest.raises(RuntimeError, match=r"cpu \(NumPy\) and gpu \(CuPy\)"):
            a * b


def test_a_float32_graph_stays_float32_beside_float64_values():
    x = mt.tensor(np.ones((2, 3), dtype=np.float32), requires_grad=True)
    for other in (np.full((2, 3), 0.5), [0.5, 0.25, 2.0], np.float64(0.5), 2, True):
        for y in (x + other, other * x, x - other, other / (x + 1.0),
                  mt.where(np.ones((2, 3), bool), x, other)):
            assert y.dtype == np.float32, (type(other), y.dtype)
    (x * np.full((2, 3), 2.0)).sum().backward()
    assert x.grad.dtype == np.float32


def test_complex_and_string_operands_are_refused_naming_the_op():
    x = mt.tensor(np.ones(3, dtype=np.float32))
    with pytest.raises(TypeError, match="add: cannot combine a float32 Tensor"):
        x + np.ones(3, dtype=complex)
    with pytest.raises(TypeError, match="mul: cannot combine"):
        x * "abc"


def test_reduction_over_a_missing_axis_is_an_error_as_in_numpy():
    x = mt.tensor(np.ones((2, 3), dtype=np.float32))
    for reduce in (lambda t: t.sum(axis=2), lambda t: t.mean(axis=-3),
                   lambda t: t.max(axis=(0, 5))):
        with pytest.raises(ValueError, match="out of range for a tensor of 2 dimensions"):
            reduce(x)
    assert x.sum(axis=-1).shape == (2,)


def test_matmul_of_shapes_that_do_not_fit_is_named():
    a = mt.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError,
                       match=r"matmul: shapes \(2, 3\) and \(2, 3\) do not fit: the last axis"):
        a @ a
    assert (a @ a.T).shape == (2, 2)
