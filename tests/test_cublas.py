"""minitransformer/fast/cublas.py, the matmul a CUDA graph can capture: its layout plan (which operand
cuBLAS reads transposed, leading dimensions, batch strides) run through a NumPy emulation of cuBLAS's
column-major strided-batched GEMM, against np.matmul, on C-ordered arrays, transposed views, slices and
batches (the calls through ctypes need a GPU: tests/test_graphs.py runs them there)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from minitransformer.fast import cublas as cc


def through_plan(a, b):
    """a @ b as cuBLAS would compute it from the plan, reading a and b from their base buffers."""
    p = cc.plan(a, b)
    assert p is not None
    base_a, base_b = a.base if a.base is not None else a, b.base if b.base is not None else b
    off = lambda x, base: (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // x.itemsize
    c = np.full(int(np.prod(p["out_shape"])), np.nan, a.dtype)
    cc.emulate(p, base_a.reshape(-1), off(a, base_a), base_b.reshape(-1), off(b, base_b), c)
    return c.reshape(p["out_shape"])


def view(rng, shape, how):
    """A float64 array of `shape`: C-ordered, a transposed view of one, or a slice with padded rows."""
    if how == "T":
        return rng.standard_normal(shape[:-2] + shape[:-3:-1]).swapaxes(-1, -2)
    if how == "padded":
        return rng.standard_normal(shape[:-1] + (shape[-1] + 3,))[..., 1:shape[-1] + 1]
    return rng.standard_normal(shape)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 6), k=st.integers(1, 6), n=st.integers(1, 6), lead=st.sampled_from([(), (3,), (2, 3)]),
       b_batched=st.booleans(), how_a=st.sampled_from(["C", "T", "padded"]), how_b=st.sampled_from(["C", "T", "padded"]),
       seed=st.integers(0, 2 ** 16))
def test_the_plan_computes_matmul(m, k, n, lead, b_batched, how_a, how_b, seed):
    rng = np.random.default_rng(seed)
    a = view(rng, lead + (m, k), how_a)
    b = view(rng, (lead if b_batched else ()) + (k, n), how_b)
    np.testing.assert_allclose(through_plan(a, b), a @ b, rtol=0, atol=64 * np.finfo(np.float64).eps * k)


def test_a_batched_b_against_a_matrix_a():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((3, 5, 2))
    np.testing.assert_allclose(through_plan(a, b), a @ b, rtol=0, atol=1e-12)


def test_layouts_it_cannot_read_are_left_to_the_caller_and_a_longer_ld_is_read():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 5))
    rows_apart, w = x[:, ::2], rng.standard_normal((5, 2))               # rows two apart: a longer ld
    np.testing.assert_allclose(through_plan(rows_apart, w), rows_apart @ w, rtol=0, atol=1e-12)
    assert cc.plan(x[::2, :, ::2], rng.standard_normal((3, 2))) is None   # columns two apart
    assert cc.plan(x, rng.standard_normal((2, 5, 2))) is None             # batches that broadcast
    assert cc.plan(x, rng.standard_normal((4, 2))) is None                # K does not fit
