"""The fused CuPy kernels of kernels.py against the plain path they replace.

Each GPU test runs an op twice on the same host inputs: the plain NumPy code on the CPU, the fused
kernel on CuPy (backend.fused on, checked by a spy on kernels.py that the kernel really ran), and
compares outputs and gradients after backend.to_numpy. The GPU tests carry the `gpu` marker and are
skipped, with the reason, where CuPy or a CUDA GPU is absent (`pytest -m gpu` selects them). The
tests at the top run everywhere: the switch (kernels.active, backend.fused, MINITRANSFORMER_FUSED),
the NumPy path never calling a kernel, the lesson showing the kernel that kernels.py compiles, the C
compiled by nvcc and CuPy's NVRTC where they are installed, and the GPU's deterministic scatter-add
(backend.sorted_scatter_add) run through NumPy.

Tolerances come from float32 (or float64) epsilon and the size of the computation, see tol().
"""
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import attention, backend
from minitransformer.fast import gpu as fast_gpu, kernel_source, kernels
from minitransformer.attention import scaled_dot_product_attention
from minitransformer.optim import Adam

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEVICE = os.environ.get("MINITRANSFORMER_DEVICE", "cpu")
FUSED_OPS = ("softmax", "log_softmax", "cross_entropy", "layer_norm", "dropout", "adam", "adam_from", "embedding_backward",
             "column_sum", "scale_and_mask", "relu_backward")
HAVE_GPU = backend.gpu_available()


def gpu(test):
    """Mark a test `gpu` and skip it, saying why, where CuPy or a CUDA GPU is absent."""
    reason = "fused CuPy kernels: CuPy or a CUDA GPU is not available on this machine (they run only on the GPU)"
    return pytest.mark.gpu(pytest.mark.skipif(not HAVE_GPU, reason=reason)(test))


def tol(n, dtype=np.float32, k=8.0):
    """k * eps * sqrt(n): the tolerance for a result of one reduction over n terms plus a few
    elementwise operations, computed twice in a different order (a tree over a thread block in the
    kernel, NumPy's pairwise sum in the plain path). Each operation rounds to eps/2 relative; the
    rounding errors of n terms add up like a random walk, sqrt(n) * eps (n * eps is the worst case,
    far from reached), and k = 8 covers the handful of exp, log, division and multiplications around
    the sum, each within 1-2 ulp (CUDA's exp and log are within 2 ulp). Used relative to the size of
    the values compared. A wrong index, a missing term or a stale buffer is off by far more."""
    return k * float(np.finfo(dtype).eps) * math.sqrt(max(n, 1))


def assert_close(actual, expected, atol, what):
    """|actual - expected| <= atol elementwise (atol may be an array that broadcasts, e.g. one tolerance
    per row), with infinities and NaNs in the same places."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    for check in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(check(actual), check(expected), err_msg=f"{what}: {check.__name__}")
    finite = np.isfinite(expected)
    err = np.abs(np.where(finite, actual, 0.0) - np.where(finite, expected, 0.0))
    bound = np.broadcast_to(atol, err.shape)
    bad = err > bound
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} differ by more than the tolerance; worst "
                           f"{err[bad].max():.3g} against {bound[bad][np.argmax(err[bad])]:.3g}")


def forward_backward(device, fn, arrays, dy_seed=1):
    """fn(*tensors) on `device`, tensors made from the host arrays: (output, gradients, dy) on the host,
    for a fixed standard-normal dy."""
    mt.use(device)
    tensors = [mt.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*tensors)
    dy = np.asarray(np.random.default_rng(dy_seed).standard_normal(y.shape), dtype=y.dtype)
    y.backward(backend.asarray(dy))
    return y.numpy(), [backend.to_numpy(t.grad) for t in tensors], dy


@pytest.fixture
def calls(monkeypatch):
    """The fused ops called during the test, in order: each public function of kernels.py wrapped in a
    spy. Turns backend.fused on for the test."""
    seen = []

    def spy(name, original):
        def op(*args, **kwargs):
            seen.append(name)
            return original(*args, **kwargs)
        return op
    for name in FUSED_OPS:
        monkeypatch.setattr(kernels, name, spy(name, getattr(kernels, name)))
    monkeypatch.setattr(backend, "fused", True)
    yield seen
    mt.use(DEFAULT_DEVICE)


# ==================================================================== everywhere: the switch
def test_kernels_run_only_on_cupy_with_backend_fused_on(monkeypatch):
    x = np.zeros((2, 3), np.float32)
    mt.use("cpu")
    t = mt.tensor(x)
    assert not kernels.active(x) and not kernels.active(t)
    # the switch alone, with the device patched: nothing here imports cupy or launches a kernel
    monkeypatch.setattr(backend, "device", "gpu")
    monkeypatch.setattr(backend, "fused", True)
    assert not kernels.active(x) and not kernels.active(t)               # host arrays on the GPU backend
    monkeypatch.setattr(backend, "device_of", lambda a: "gpu" if isinstance(a, np.ndarray) else "cpu")
    assert kernels.active(x) and kernels.active(t, x) and kernels.active(x.astype(np.float64))
    assert not kernels.active(x, x.tolist())                             # one array not on the device
    assert not kernels.active(x.astype(np.float16))                      # no float16 kernels
    assert not kernels.active(x, x.astype(np.float64))                   # mixed dtypes: the plain path
    assert not kernels.active(np.zeros((0, 3), np.float32))              # empty: the plain path
    monkeypatch.setattr(backend, "fused", False)
    assert not kernels.active(x)


@pytest.mark.parametrize("value, expected", [("0", False), ("1", True), (None, True)])
def test_environment_variable_sets_backend_fused(value, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("MINITRANSFORMER_FUSED", "MINITRANSFORMER_DEVICE")}
    if value is not None:
        env["MINITRANSFORMER_FUSED"] = value
    out = subprocess.run([sys.executable, "-c", "from minitransformer import backend; print(backend.fused)"],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(expected)


def test_numpy_path_calls_no_kernel(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a fused kernel was called on the NumPy backend")
    for name in FUSED_OPS + ("forward_rows", "backward_rows"):
        monkeypatch.setattr(kernels, name, refuse)
    monkeypatch.setattr(backend, "fused", True)
    mt.use("cpu")
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.standard_normal((3, 5)).astype(np.float32), requires_grad=True)
    gamma, beta = mt.tensor(np.ones(5, np.float32), requires_grad=True), mt.tensor(np.zeros(5, np.float32), requires_grad=True)
    loss = (F.softmax(x).sum() + F.log_softmax(x).sum() + F.layer_norm(x, gamma, beta).sum() + F.dropout(x, 0.5).sum()
            + F.cross_entropy(x, np.array([0, 1, 4]), ignore_index=1, label_smoothing=0.1))
    loss.backward()
    opt = Adam([x, gamma, beta], lr=1e-3)
    opt.step()
    F.softmax_array(x.data, out=x.data), F.log_softmax_array(x.data)                    # the softmax core


def test_out_of_range_targets_are_refused_on_the_host_before_either_path(monkeypatch):
    """The fused kernel would give NaN and plain CuPy indexing would wrap: a host target never gets there."""
    def refuse(*arrays):
        raise AssertionError("kernels.active was asked: the target was not checked first")
    monkeypatch.setattr(kernels, "active", refuse)
    z = mt.tensor(np.zeros((2, 3), np.float32))
    for bad in ([0, 3], [-1, 0]):
        with pytest.raises(ValueError, match=f"target id {bad[0] or bad[1]} is out of range for 3 classes"):
            F.cross_entropy(z, np.array(bad))


def test_importing_the_package_imports_no_cupy_and_compiles_nothing():
    """Even where CuPy is installed (with or without a GPU): CuPy comes in with use("gpu") alone."""
    code = ("import sys; import minitransformer, minitransformer.fast.kernels as k; "
            "print('cupy' in sys.modules, k._cache)")
    env = {k: v for k, v in os.environ.items() if k != "MINITRANSFORMER_DEVICE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "{}"], out.stdout + out.stderr


def test_kernel_sources_are_balanced_and_the_lesson_shows_the_one_compiled():
    for name in kernel_source.ROW_KERNELS:
        for dtype in (np.float32, np.float64):
            src = kernel_source.source(name, dtype)
            assert f'extern "C" __global__ void {name}(' in src
            code = re.sub(r"//[^\n]*", "", src)                          # comments may say [0, v)
            assert all(code.count(a) == code.count(b) for a, b in ("{}", "()", "[]")), f"{name}: unbalanced"
    lesson = (ROOT / "lessons" / "11_gpu.md").read_text(encoding="utf-8")
    shown = re.findall(r"^```c\n(.*?)^```", lesson, re.DOTALL | re.MULTILINE)
    assert kernel_source.SOFTMAX.strip() in [block.strip() for block in shown], "lessons/11_gpu.md shows another softmax kernel"


def test_adam_update_numbers_are_the_papers_numbers_and_the_numpy_updates():
    """Adam.update_numbers (what the fused kernels adam and adam_from are given) against Adam's section
    2: the step alpha_t = lr sqrt(1 - b2^t) / (1 - b1^t), eps_hat = eps sqrt(1 - b2^t); and Adam's
    NumPy update is these very numbers, applied in the kernel's order (the same bits)."""
    b1, b2, eps, wd = 0.9, 0.98, 1e-9, 0.01
    numbers_of = Adam([mt.tensor(np.zeros(1), requires_grad=True)], betas=(b1, b2), eps=eps, weight_decay=wd)
    for t, lr in ((1, 1e-3), (5, 7e-4), (4000, 0.000699)):
        got = numbers_of.update_numbers(t, lr)
        alpha, eps_hat = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t), eps * math.sqrt(1 - b2 ** t)
        assert all(type(c) is float for c in got)
        assert got == pytest.approx((b1, 1 - b1, b2, 1 - b2, eps_hat, -alpha, 1 - lr * wd), rel=1e-15, abs=0)
    mt.use("cpu")
    rng = np.random.default_rng(8)
    for dtype in (np.float32, np.float64):
        w = mt.tensor(rng.standard_normal(1000).astype(dtype), requires_grad=True)
        opt = Adam([w], lr=3e-3, weight_decay=wd)
        p, m, v = w.data.copy(), np.zeros(1000, dtype), np.zeros(1000, dtype)
        for t, lr in ((1, 3e-3), (2, 1e-3), (3, 2e-4)):
            w.grad = g = rng.standard_normal(1000).astype(dtype)
            opt.step(lr=lr)
            s = opt.update_numbers(t)                                   # t and the lr of the step just taken
            assert s == numbers_of.update_numbers(t, lr) == opt.update_numbers(t, lr)
            m = m * s[0] + g * s[1]                                      # the kernel's order, in NumPy
            v = v * s[2] + g * g * s[3]
            p = p * s[6] + m / (np.sqrt(v) + s[4]) * s[5]
            for what, want, have in (("p", p, w.data), ("m", m, opt.m[0]), ("v", v, opt.v[0])):
                np.testing.assert_array_equal(have, want, err_msg=f"{dtype.__name__} step {t}: {what}")


class _Recorder:
    """Stands in for cupy when kernels._BUILD is called: returns the ElementwiseKernel's arguments."""
    def ElementwiseKernel(self, in_params, out_params, operation, name, options=()):
        return in_params, out_params, operation, name, options


def elementwise_as_cuda(in_params, out_params, operation, name):
    """An ElementwiseKernel's operation as the body of a __device__ function, the way CuPy's generated
    loop sees it: inputs by value, outputs by reference, raw inputs as pointers (CuPy's CArray indexes
    the same way), CuPy's type names in C."""
    ctype = {"float32": "float", "float64": "double", "int64": "long long", "bool": "bool", "T": "T"}
    params = [f"const {ctype[w[1]]}* {w[2]}" if w[0] == "raw" else f"{ctype[w[0]]} {w[1]}"
              for w in (p.split() for p in in_params.split(","))]
    params += [f"{ctype[t]}& {v}" for t, v in (p.split() for p in out_params.split(","))]
    return f"__device__ void {name}({', '.join(params)}) {{ {operation} }}\n"


def kernel_sources(dtype):
    """[(name, CUDA C, options)]: each row kernel exactly as source() gives it to CuPy, and each
    ElementwiseKernel's operation in a device function with its parameters and the options it gives CuPy
    (CuPy's loop around it is generated only for arrays on a GPU)."""
    found = [(name, kernel_source.source(name, dtype), ()) for name in kernel_source.ROW_KERNELS]
    for *kernel, options in (kernels._BUILD[name](_Recorder()) for name in kernels._BUILD):
        found.append((kernel[3], f"typedef {kernel_source.CTYPES[np.dtype(dtype)]} T;\n" + elementwise_as_cuda(*kernel),
                      options))
    return found


def cupy_nvrtc():
    """CuPy's NVRTC bindings where CuPy and its NVRTC library are installed (no GPU needed), else None."""
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception:                                                    # no CuPy, or no NVRTC library
        return None
    return nvrtc


@pytest.mark.skipif(shutil.which("nvcc") is None,
                    reason="nvcc, the CUDA compiler, is not on PATH (the kernels' C compiles only where it is)")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_sources_compile_with_nvcc_without_a_gpu(dtype, tmp_path):
    """The CUDA C of every kernel (kernel_sources) compiles to PTX, no GPU needed."""
    files = []
    for name, source, _ in kernel_sources(dtype):
        files.append(tmp_path / f"{name}.cu")
        files[-1].write_text(source, encoding="utf-8")
    run = subprocess.run(["nvcc", "-ptx", "--output-directory", str(tmp_path), *map(str, files)],
                         check=False, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for name in kernel_source.ROW_KERNELS:
        assert f".entry {name}(" in (tmp_path / f"{name}.ptx").read_text(encoding="utf-8"), name


@pytest.mark.skipif(cupy_nvrtc() is None, reason="CuPy with its NVRTC library is not installed here")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_sources_compile_through_cupys_nvrtc_without_a_gpu(dtype):
    """The same sources through CuPy's own compiler (NVRTC) with the options CuPy 14 adds (-ftz=true, device
    code by default; here for an H100's sm_90) and each kernel's own (--fmad=false for Adam)."""
    nvrtc = cupy_nvrtc()
    for name, source, options in kernel_sources(dtype):
        program = nvrtc.createProgram(source, f"{name}.cu", [], [])
        try:
            nvrtc.compileProgram(program, ["-ftz=true", "--device-as-default-execution-space", "-arch=compute_90",
                                           *options])
        except Exception as e:
            pytest.fail(f"{name}: {e}\n{nvrtc.getProgramLog(program)}")
        assert name not in kernel_source.ROW_KERNELS or f".entry {name}(".encode() in nvrtc.getPTX(program), name


# ==================================================================== the embedding's backward on the GPU
# backend.sorted_scatter_add replaces cupyx.scatter_add's atomics there; NumPy runs the very same code.
def scatter_case(seed, n, rows, width):
    """ids with many repeats (one id in every 3, as padding or a full stop), values and a non-zero target."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, rows, n)
    ids[::3] = rows // 2
    return ids, rng.standard_normal((n, width)).astype(np.float32), rng.standard_normal((rows, width)).astype(np.float32)


@pytest.mark.parametrize("n, rows, width", [(0, 3, 2), (1, 3, 2), (7, 1, 3), (100, 9, 4), (2000, 50, 3)])
def test_sorted_scatter_add_on_numpy_equals_np_add_at(n, rows, width):
    ids, values, target = scatter_case(n, n, rows, width)
    want = target.copy()
    np.add.at(want, ids, values)
    got = backend.sorted_scatter_add(target.copy(), ids, values)
    # pairwise against a running sum: each a sum of the run's terms, rounded differently (the longest run
    # is about n/3 rows; a lost, doubled or misplaced row is off by a whole term, ~1)
    runs = np.bincount(ids, minlength=rows)[:, None] if n else 1
    atol = 4 * float(np.finfo(np.float32).eps) * runs * (np.abs(values).max(initial=0) + np.abs(target))
    assert_close(got, want, atol, "sorted_scatter_add")
    small = np.round(values * 4)                                          # integers: every sum exact
    exact = target.round()
    np.add.at(exact, ids, small)
    np.testing.assert_array_equal(backend.sorted_scatter_add(target.round(), ids, small), exact)
    if n:                                                                 # rows of more than one axis
        added = exact - target.round()                                    # (rows, width)
        np.testing.assert_array_equal(backend.sorted_scatter_add(np.zeros((rows, 2, width), np.float32), ids,
                                                                 np.stack([small, small], 1)), np.stack([added, added], 1))


@pytest.mark.parametrize("n, rows, width", [(0, 3, 2), (1, 3, 2), (7, 1, 3), (100, 9, 4), (2000, 50, 3), (4096, 1, 5)])
def test_the_fixed_shape_scatter_add_gives_the_host_bits(n, rows, width):
    """sorted_scatter_add_fixed (a device index's path: no sync, fixed shapes) run through NumPy: the very
    bits of the host path, runs of every length up to all n rows in one."""
    ids, values, target = scatter_case(n, n, rows, width)
    want = backend.sorted_scatter_add(target.copy(), ids, values)
    np.testing.assert_array_equal(backend.sorted_scatter_add_fixed(np, target.copy(), ids, values), want)
    if n:                                                                 # rows of more than one axis
        values3 = np.stack([values, -2 * values], 1)
        np.testing.assert_array_equal(backend.sorted_scatter_add_fixed(np, np.zeros((rows, 2, width), np.float32), ids, values3),
                                      backend.sorted_scatter_add(np.zeros((rows, 2, width), np.float32), ids, values3))


@gpu
@pytest.mark.parametrize("float_type", [np.float32, np.float64])
def test_the_gpu_embedding_backward_gives_the_cpus_bits_on_every_run(float_type, calls, monkeypatch):
    """Fused (kernels.embedding_backward): np.add.at's order, so the CPU's very bits, run after run; fused
    off: backend.scatter_add, the pairwise sums of sorted_scatter_add (NumPy's bits of the same code)."""
    ids, values, _ = scatter_case(0, 5000, 300, 64)
    ids[:700] = 7                                                          # one long run, and ids never seen
    values = values.astype(float_type)

    def weight_grad(device, index=ids):
        mt.use(device)
        weight = mt.tensor(np.zeros((300, 64), float_type), requires_grad=True)
        F.embedding(weight, index.reshape(50, 100)).backward(backend.asarray(values.reshape(50, 100, 64)))
        return backend.to_numpy(weight.grad)
    on_cpu = weight_grad("cpu")
    for index in (ids, ids, ids.astype(np.int32)):                         # twice, then int32 ids
        np.testing.assert_array_equal(weight_grad("gpu", index), on_cpu)
    assert calls.count("embedding_backward") == 3
    monkeypatch.setattr(backend, "fused", False)
    pairwise = backend.sorted_scatter_add(np.zeros((300, 64), float_type), ids, values)   # NumPy, the same code
    np.testing.assert_array_equal(weight_grad("gpu"), pairwise)
    for index in (ids, backend.asarray(ids)):                              # a host index, a device one
        got = backend.scatter_add(backend.xp.zeros((300, 64), float_type), index, backend.asarray(values))
        np.testing.assert_array_equal(backend.to_numpy(got), pairwise)     # additions alone: correctly rounded
    assert calls.count("embedding_backward") == 3


@gpu
def test_reseeding_the_gpu_generator_reuses_its_states_and_restarts_its_stream():
    cupy = backend._import_cupy()
    mt.use("gpu")
    mt.seed(7)
    first, states = backend.rng(), backend.rng().bit_generator.state()
    a = backend.to_numpy(backend.rng().random(100_000, dtype=np.float32))
    mt.seed(8)
    backend.rng().random(10)
    mt.seed(7)
    assert backend.rng() is first and backend.rng().bit_generator.state() == states   # no new 16 MB
    np.testing.assert_array_equal(backend.to_numpy(backend.rng().random(100_000, dtype=np.float32)), a)
    fresh = cupy.random.Generator(cupy.random.Philox4x3210(7, size=backend.GPU_RNG_STATES))
    np.testing.assert_array_equal(backend.to_numpy(fresh.random(100_000, dtype=np.float32)), a)


# ==================================================================== on a GPU: softmax and log-softmax
def logits(shape, dtype=np.float32, seed=0):
    """Logits of scale 3 whose first rows are the hard ones: row 0 has a third of its entries -inf (as a
    mask makes them), row 1 very large logits (exp underflows to 0 for all but the top), row 2 entries
    of +-1e38 (exp(x) alone would overflow; exp(x - max) must not)."""
    x = np.random.default_rng(seed).standard_normal((int(np.prod(shape[:-1])), shape[-1])) * 3
    x[0, 1::3] = -np.inf
    x[1] *= 1e4
    x[2] = 1e38
    x[2, 1::2] = -1e38
    return x.reshape(shape).astype(dtype)


SHAPES = [(3, 1), (5, 7), (67, 257), (9, 1000), (3, 37003), (2, 3, 31)]   # widths not a multiple of 256


@gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_and_log_softmax_match_the_plain_path(op, shape, dtype, calls):
    x = logits(shape, dtype)
    y0, (dx0,), dy = forward_backward("cpu", getattr(F, op), [x])
    y1, (dx1,), _ = forward_backward("gpu", getattr(F, op), [x])
    assert calls == [op]
    t = tol(shape[-1], dtype)
    # softmax: probabilities, relative error t, absolute t (they are <= 1); log-softmax: values up to
    # |x - max|, relative error t on them plus t absolute from log(sum)
    assert_close(y1, y0, t * (1 + np.abs(np.where(np.isfinite(y0), y0, 0))), f"{op} forward")
    # backward, per row: softmax's dx = y (dy - s), s = sum(dy y), has y and s to t relative, |s| <= max|dy|;
    # log-softmax's dx = dy - exp(y) S, S = sum(dy), has S to t times its partial sums, about sqrt(sum(dy^2))
    rows = dy.reshape(-1, shape[-1]).astype(np.float64)
    top = np.abs(rows).max(1, keepdims=True)
    size = 2 * top if op == "softmax" else top + np.abs(rows.sum(1, keepdims=True)) + np.sqrt((rows ** 2).sum(1, keepdims=True))
    assert_close(dx1.reshape(rows.shape), dx0.reshape(rows.shape), t * (1 + size), f"{op} backward")


@gpu
def test_softmax_over_another_axis_takes_the_plain_path(calls):
    x = logits((4, 6))
    y0, (dx0,), dy = forward_backward("cpu", lambda t: F.softmax(t, axis=0), [x])
    y1, (dx1,), _ = forward_backward("gpu", lambda t: F.softmax(t, axis=0), [x])
    assert calls == []
    assert_close(y1, y0, tol(4), "softmax over axis 0")
    assert_close(dx1, dx0, tol(4) * 3 * np.abs(dy).max(), "its gradient")


@gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_the_softmax_core_runs_the_row_kernel_in_place_and_into_a_strided_out(op, calls, monkeypatch):
    x = logits((67, 257))
    mt.use("cpu")
    want = getattr(F, op + "_array")(x)
    ran, forward_rows = [], kernels.forward_rows
    monkeypatch.setattr(kernels, "forward_rows", lambda *args: ran.append(args[0]) or forward_rows(*args))
    mt.use("gpu")
    core = getattr(F, op + "_array")
    a = backend.asarray(x)
    assert core(a, out=a) is a                                            # in place, as attention calls it
    out = backend.xp.empty((257, 67), np.float32).T                       # (67, 257), not contiguous
    assert core(backend.asarray(x), out=out) is out
    assert ran == [op + "_rows"] * 2
    for got in (a, out):
        assert_close(backend.to_numpy(got), want, tol(257) * (1 + np.abs(np.where(np.isfinite(want), want, 0))), op)


def test_the_gpus_attention_gives_the_plain_gradients_with_its_kernels_modelled(numpy_kernels):
    """Everywhere: fast.gpu's attention (the scores scaled and masked in one launch, softmax's backward
    and the 1/sqrt(d_k) in another, each GEMM writing into its array), its kernels modelled in NumPy in
    their C's argument order, against attention.py's plain lines: output and gradients equal."""
    rng = np.random.default_rng(7)
    q, k, v, g = (rng.standard_normal((2, 3, 5, 8)).astype(np.float32) for _ in range(4))
    mask = np.tril(np.ones((5, 5), bool))
    plain_o, plain_p, _ = attention.attention_forward(q, k, v, mask, 0.0, False)
    o, p, kept = fast_gpu.attention_forward(q, k, v, mask, 0.0, False)
    assert kept is None
    np.testing.assert_array_equal(o, plain_o)
    np.testing.assert_array_equal(p, plain_p)
    outs = [np.empty_like(q) for _ in range(3)]
    got = fast_gpu.attention_backward(g, q, k, v, p, None, 0.0, out=outs)
    assert all(a is b for a, b in zip(got, outs)), "a gradient was not written into its array"
    for a, b in zip(got, attention.attention_backward(g, q, k, v, plain_p, None, 0.0)):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol(5 * 8) * (1 + np.abs(b).max()))


@gpu
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_attention_backward_runs_softmaxs_backward_row_kernel(dropout_p, monkeypatch):
    """dS = P * (dP - rowsum(dP * P)) in attention's backward: one softmax_backward_rows launch, in place,
    against the plain lines (fused off) on the same GPU and the same dropout draws."""
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((2, 3, 5, 8)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((5, 5), bool))
    ran, original = [], kernels.backward_rows
    monkeypatch.setattr(kernels, "backward_rows", lambda *a, **kw: ran.append(a[0]) or original(*a, **kw))

    def grads(fused):
        monkeypatch.setattr(backend, "fused", fused)
        mt.use("gpu")
        mt.seed(0)
        fn = lambda *t: scaled_dot_product_attention(*t, mask=backend.asarray(mask), dropout_p=dropout_p)
        return forward_backward("gpu", fn, [q, k, v])[1]
    plain = grads(False)
    assert ran == []
    fused = grads(True)
    assert ran == ["softmax"]
    for what, a, b in zip("qkv", fused, plain):
        assert_close(a, b, tol(5 * 8) * (1 + np.abs(b).max()), f"d{what}")
    mt.use(DEFAULT_DEVICE)


@gpu
@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 7), (7, 7), (2, 3, 7, 7)], ids=str)
def test_scale_and_mask_and_relu_backward_give_the_plain_lines_bits(mask_shape, calls):
    """attention's scores scaled and masked in one launch, and ReLU's backward in one: NumPy's lines' numbers
    (s *= c; s[~mask] = -1e9 with the mask broadcast; dy * (y > 0), zeros and negative zeros in y)."""
    mt.use("gpu")
    rng = np.random.default_rng(8)
    s = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)                     # (B, H, Tq, Tk)
    mask = rng.random(mask_shape) < 0.6
    want = s * np.float32(1 / math.sqrt(8))
    want[~np.broadcast_to(mask, s.shape)] = np.float32(attention.NEG)
    got = kernels.scale_and_mask(backend.asarray(s), backend.asarray(mask), 1 / math.sqrt(8), attention.NEG)
    np.testing.assert_array_equal(backend.to_numpy(got), want)
    dy, y = rng.standard_normal((2, 2, 64)).astype(np.float32), np.maximum(rng.standard_normal((2, 2, 64)), 0).astype(np.float32)
    y[0, 0, :4] = (0.0, -0.0, 1e-30, 3.0)
    np.testing.assert_array_equal(backend.to_numpy(kernels.relu_backward(backend.asarray(dy), backend.asarray(y))),
                                  dy * (y > 0))
    x = mt.tensor(np.concatenate([y, -y]), requires_grad=True)               # F.relu: Tensor.relu's numbers
    out = F.relu(x)
    out.backward(backend.asarray(np.concatenate([dy, dy])))
    np.testing.assert_array_equal(out.numpy(), np.maximum(np.concatenate([y, -y]), 0))
    np.testing.assert_array_equal(backend.to_numpy(x.grad), np.concatenate([dy, dy]) * (np.concatenate([y, -y]) > 0))
    assert calls == ["scale_and_mask", "relu_backward", "relu_backward"]
    mt.use(DEFAULT_DEVICE)


# ==================================================================== cross-entropy
@gpu
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [None, 0])
@pytest.mark.parametrize("shape", [(5, 7), (3, 11, 1000), (4, 37003)], ids=str)
def test_cross_entropy_matches_the_plain_path(eps, ignore_index, shape, calls):
    rng = np.random.default_rng(3)
    V, N = shape[-1], int(np.prod(shape[:-1]))
    z = (rng.standard_normal((N, V)) * 3).astype(np.float32)
    target = rng.integers(0, V, N)
    target[::4] = 0                               # ignored tokens where ignore_index=0, class 0 otherwise
    z[1] *= 1e4                                   # very large logits
    if eps == 0:                                  # -inf logits (a smoothed loss would be +inf: it averages all)
        z[2, 1::2] = -np.inf
        target[2] = 0                             # a finite logit, so the row's loss is finite
    z, target = z.reshape(shape), target.reshape(shape[:-1])
    fn = lambda t: F.cross_entropy(t, target, ignore_index=ignore_index, label_smoothing=eps)
    loss0, (dz0,), dy = forward_backward("cpu", fn, [z])
    loss1, (dz1,), _ = forward_backward("gpu", fn, [z])
    assert calls == ["cross_entropy"]
    # the loss: per row a reduction over V, then a sum over N rows, each in another order
    assert_close(loss1, loss0, (tol(V) + tol(N)) * (1 + abs(loss0)), "loss")
    # dz = (softmax - q) * dy / n_tokens: entries of at most |dy| / n in size, softmax to tol(V)
    n = int(np.sum(target != ignore_index)) if ignore_index is not None else N
    assert_close(dz1, dz0, tol(V) * abs(dy) / max(n, 1), "gradient")
    counts = []
    for device in ("cpu", "gpu"):
        mt.use(device)
        counts.append(F.cross_entropy(mt.tensor(z), target, ignore_index=ignore_index, return_count=True)[1])
    assert counts == [n, n]


@gpu
def test_cross_entropy_with_every_token_ignored_is_zero(calls):
    z = np.random.default_rng(0).standard_normal((3, 9)).astype(np.float32)
    fn = lambda t: F.cross_entropy(t, np.full(3, -100), ignore_index=-100)
    loss, (dz,), _ = forward_backward("gpu", fn, [z])
    assert calls == ["cross_entropy"] and loss == 0 and not dz.any()


# ==================================================================== LayerNorm
@gpu
@pytest.mark.parametrize("shape", [(5, 1), (7, 33), (4, 9, 512), (33, 1000), (3, 4099)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_matches_the_plain_path(shape, dtype, calls):
    rng = np.random.default_rng(4)
    D = shape[-1]
    x = rng.standard_normal(shape) * 2 + 0.5
    x.reshape(-1, D)[0] = 0.5                     # a constant row: variance 0, 1/sigma = 1/sqrt(eps) = 1000
    gamma, beta = 1 + 0.1 * rng.standard_normal(D), 0.1 * rng.standard_normal(D)
    arrays = [a.astype(dtype) for a in (x, gamma, beta)]
    y0, (dx0, dg0, db0), dy = forward_backward("cpu", F.layer_norm, arrays)
    y1, (dx1, dg1, db1), _ = forward_backward("gpu", F.layer_norm, arrays)
    assert calls == ["layer_norm", "column_sum", "column_sum"]              # the forward; dgamma and dbeta
    t = tol(D, dtype)
    # per row: the mean and the variance are sums of D terms, so xhat is off by about t * |x - mean| / sigma
    # (0 on the constant row, whose sums are exact); y = xhat * gamma + beta
    xr, dyr = arrays[0].reshape(-1, D).astype(np.float64), dy.reshape(-1, D).astype(np.float64)
    centred = xr - xr.mean(1, keepdims=True)
    rstd = 1 / np.sqrt((centred ** 2).mean(1, keepdims=True) + 1e-6)                  # (N, 1)
    size_y = np.abs(centred).max(1, keepdims=True) * rstd * np.abs(gamma).max() + np.abs(beta).max()
    assert_close(y1.reshape(-1, D), y0.reshape(-1, D), t * (1 + size_y), "y")
    # dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma: three terms of up to |g| (1 + |xhat|^2)
    g = np.abs(dyr * gamma).max(1, keepdims=True)
    size_dx = rstd * g * (1 + (np.abs(centred).max(1, keepdims=True) * rstd) ** 2)
    assert_close(dx1.reshape(-1, D), dx0.reshape(-1, D), t * (1 + size_dx), "dx")
    # dgamma = sum over N rows of dy * xhat, dbeta = sum of dy: sums of N terms, in another order
    N = xr.shape[0]
    assert_close(dg1, dg0, (t + tol(N, dtype)) * (1 + np.abs(dyr * centred * rstd).sum(0)), "dgamma")
    assert_close(db1, db0, tol(N, dtype) * (1 + np.abs(dyr).sum(0)), "dbeta")


# ==================================================================== column sums (bias gradients)
@gpu
@pytest.mark.parametrize("n, d", [(0, 5), (1, 1), (7, 33), (65, 31), (513, 64), (8192, 512), (8191, 2048), (20000, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sums_add_every_row_of_every_column_the_same_way_every_run(n, d, dtype, monkeypatch):
    """kernels.column_sum against float64 sums on the host (chunks of rows: ragged last chunks, columns
    past a multiple of 32, one row, none), with and without the product, and from a strided view; and
    exactly against kernels.column_sum_order, its order of additions in NumPy, also cut into launches of
    32 columns (COUNTERS 1), with the counters of finished blocks back at 0 after every launch; `into` adds
    the sums to what a buffer holds."""
    mt.use("gpu")
    xp, rng = backend.xp, np.random.default_rng(n + d)
    a, b = (rng.standard_normal((n, d)).astype(dtype) for _ in range(2))
    wide = xp.asarray(np.concatenate([a, a], axis=1))[:, :d]             # rows 2d apart: copied first
    for got, want, size in ((kernels.column_sum(xp.asarray(a)), a.astype(np.float64).sum(0), np.abs(a).sum(0)),
                            (kernels.column_sum(wide), a.astype(np.float64).sum(0), np.abs(a).sum(0)),
                            (kernels.column_sum(xp.asarray(a), xp.asarray(b)), (a.astype(np.float64) * b).sum(0),
                             np.abs(a.astype(np.float64) * b).sum(0))):
        assert got.shape == (d,) and got.dtype == dtype
        assert_close(backend.to_numpy(got), want, tol(n, dtype) * (1 + size), f"{n}x{d} column sums")
    again = [backend.to_numpy(kernels.column_sum(xp.asarray(a), xp.asarray(b))) for _ in range(2)]
    np.testing.assert_array_equal(again[0], again[1])
    start = rng.standard_normal(d).astype(dtype)                      # into a gradient buffer: added there
    into = xp.asarray(start)
    assert kernels.column_sum(xp.asarray(a), into=into) is None
    np.testing.assert_array_equal(backend.to_numpy(into), start + (kernels.column_sum_order(a) if n else 0))
    if n:                                 # the kernel's order of additions, in NumPy: the same numbers
        np.testing.assert_array_equal(backend.to_numpy(kernels.column_sum(xp.asarray(a))), kernels.column_sum_order(a))
        monkeypatch.setattr(kernels, "COUNTERS", 1)                       # a launch per 32 columns
        np.testing.assert_array_equal(backend.to_numpy(kernels.column_sum(xp.asarray(a))), kernels.column_sum_order(a))
        assert not backend.to_numpy(kernels.counters()).any()
    mt.use(DEFAULT_DEVICE)


@gpu
def test_linear_takes_its_bias_gradient_from_the_column_sums(calls):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((3, 50, 24), (24, 40), (40,))]
    _, (dx0, dw0, db0), dy = forward_backward("cpu", F.linear, arrays)
    _, (dx1, dw1, db1), _ = forward_backward("gpu", F.linear, arrays)
    assert calls == ["column_sum"]
    assert_close(db1, db0, tol(150) * (1 + np.abs(dy).reshape(-1, 40).sum(0)), "db")
    assert_close(dw1, dw0, tol(150) * (1 + np.abs(arrays[0]).reshape(-1, 24).T @ np.abs(dy).reshape(-1, 40)), "dw")


# ==================================================================== dropout
@gpu
@pytest.mark.parametrize("p", [0.25, 0.5])   # exact in float32: u >= p rounds no differently anywhere
@pytest.mark.parametrize("shape", [(7,), (33, 257), (3, 5, 1001)], ids=str)
def test_dropout_matches_the_plain_path_on_the_same_draw(p, shape, calls, monkeypatch):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    mt.use("gpu")
    mt.seed(11)
    u = backend.to_numpy(backend.rng().random(shape, dtype=np.float32))   # what both paths draw after seed(11)
    mt.seed(11)
    y1, (dx1,), dy = forward_backward("gpu", lambda t: F.dropout(t, p), [x])
    assert calls == ["dropout"]
    # the plain formula in NumPy on the same uniforms: one comparison and one float32 product per element,
    # correctly rounded on both sides, so equal exactly (normal numbers: CuPy's -ftz=true flushes subnormals,
    # and standard normals times 1/(1-p) have none)
    mask = (u >= p).astype(np.float32)
    mask *= 1.0 / (1.0 - p)
    np.testing.assert_array_equal(y1, x * mask)
    np.testing.assert_array_equal(dx1, dy * mask)
    # and the plain CuPy path (fused off) after the same seed: the same mask, the same numbers
    monkeypatch.setattr(backend, "fused", False)
    mt.seed(11)
    y2, (dx2,), _ = forward_backward("gpu", lambda t: F.dropout(t, p), [x])
    assert calls == ["dropout"]
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(dx1, dx2)


# ==================================================================== Adam
@gpu
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_matches_the_plain_update(weight_decay, dtype, calls):
    rng = np.random.default_rng(6)
    shapes = [(33, 7), (1000,), (3,), (5, 1, 4099)]
    start = [rng.standard_normal(s).astype(dtype) for s in shapes]
    steps = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(5)]
    steps[2][2] = None                            # a parameter without a gradient: the update splits in runs

    def train(device):
        mt.use(device)
        params = [mt.tensor(a, requires_grad=True) for a in start]
        opt = Adam(params, lr=1e-2, weight_decay=weight_decay)
        for grads in steps:
            for p, g in zip(params, grads):
                p.grad = None if g is None else backend.asarray(g)
            opt.step()
        return [[backend.to_numpy(a) for a in arrays] for arrays in ([p.data for p in params], opt.m, opt.v)]

    plain, fused = train("cpu"), train("gpu")
    assert calls and set(calls) == {"adam"}
    # the same operations in the same order, each rounded once (the kernel is compiled with --fmad=false):
    # equal up to the last bit expected for normal numbers (-ftz=true flushes subnormal ones, as v's g^2 can
    # be); allowed 4 ulp per step of the values' size
    t = 4 * float(np.finfo(dtype).eps) * len(steps)
    for what, a0, a1 in zip(("parameters", "m", "v"), plain, fused):
        for i, (x0, x1) in enumerate(zip(a0, a1)):
            assert_close(x1, x0, t * np.abs(x0).max(), f"{what} {i}")


@gpu
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_from_numbers_in_device_memory_gives_adams_bits(weight_decay, dtype, calls):
    """adam_from, its numbers in one device array rewritten before each step (as before a CUDA graph's
    replay), against adam with the same numbers as arguments: the same operations, the very same bits."""
    rng = np.random.default_rng(9)
    mt.use("gpu")
    betas, eps, n = (0.9, 0.98), 1e-9, 5003
    start = [rng.standard_normal(n), rng.standard_normal(n) * 0.1, rng.random(n) * 0.01]   # p, m, v
    by_value, from_memory = ([backend.asarray(a.astype(dtype)) for a in start] for _ in range(2))
    (p0, m0, v0), (p1, m1, v1) = by_value, from_memory                   # (n,) each
    s = backend.xp.empty(7, dtype=dtype)                                  # (7,) the numbers, on the device
    for t, lr in ((1, 1e-2), (2, 3e-3), (3, 3e-3), (50, 7e-4)):
        g = backend.asarray(rng.standard_normal(n).astype(dtype))
        kernels.adam(p0, g, m0, v0, t, lr, betas, eps, weight_decay)
        s.set(np.array(kernels.adam_scalars(t, lr, betas, eps, weight_decay), dtype))  # rewritten in place
        kernels.adam_from(p1, g, m1, v1, s)
        for what, a0, a1 in zip("pmv", by_value, from_memory):
            np.testing.assert_array_equal(backend.to_numpy(a1), backend.to_numpy(a0), err_msg=f"step {t}: {what}")
    assert calls == ["adam", "adam_from"] * 4


def test_the_gpus_linear_adds_its_weight_gradients_into_the_buffers(numpy_kernels):
    """fast.gpu.linear (its column sum modelled in NumPy) against functional.linear's plain body: the
    same output, and where W and b hold gradient buffers already (Adam's flat buffer), dW and db are
    added into those very arrays, the engine's add done by the op."""
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal((3, 4, 6)).astype(np.float32)
    w0 = rng.standard_normal((6, 5)).astype(np.float32)
    b0 = rng.standard_normal(5).astype(np.float32)
    g = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x, w, b = (mt.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    y = F.linear(x, w, b)
    y.backward(g)
    want = [t.grad.copy() for t in (x, w, b)]
    x, w, b = (mt.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    buffers = [np.ones((6, 5), np.float32), np.ones(5, np.float32)]
    w.grad, b.grad = buffers
    got = fast_gpu.linear(x, w, b)
    np.testing.assert_allclose(got.data, y.data, rtol=0, atol=tol(6))
    got.backward(g)
    assert w.grad is buffers[0] and b.grad is buffers[1], "a gradient buffer was replaced"
    np.testing.assert_allclose(x.grad, want[0], rtol=0, atol=tol(5))
    np.testing.assert_allclose(w.grad, 1 + want[1], rtol=0, atol=tol(12) * (1 + np.abs(want[1]).max()))
    np.testing.assert_allclose(b.grad, 1 + want[2], rtol=0, atol=tol(12) * (1 + np.abs(want[2]).max()))


def test_the_gpus_attention_keeps_the_lesson_modules_constants():
    """fast/gpu.py imports no lesson module (the fast wing stands below them), so it holds its own
    copies of the masked score and the projection layouts: they must be attention's and multihead's."""
    from minitransformer import multihead
    assert fast_gpu.NEG == attention.NEG
    assert fast_gpu.LAYOUTS == multihead.LAYOUT_OF
