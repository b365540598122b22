"""Check hand-written gradients against central differences, in float64.

Two modes: element-wise (perturb every input element: exact about where a gradient is wrong, slow)
and directional (perturb all inputs at once along one random direction and compare one number, as
Chainer's check_backward does: two forward passes whatever the size, so whole layers check in
seconds). Left out: second derivatives, complex numbers.
"""
import numpy as np

from . import backend
from .checks import check_int, check_real
from .tensor import Tensor, no_grad


class GradcheckError(AssertionError):
    """A backward pass disagrees with the numeric gradient; the message says where, by how much."""


class _Projection:
    """A fixed random R of the output's shape, drawn from `seed` when the first output is seen."""

    def __init__(self, seed):
        self.seed = seed
        self.r = None

    def __call__(self, out):
        if self.r is None:
            r = np.random.default_rng(self.seed).standard_normal(out.shape)
            self.r = Tensor(backend.asarray(r))
        return self.r


def _loss(fn, inputs, projection):
    """L = sum(fn(*inputs) * R): one scalar whose gradient is the vector-Jacobian product with R."""
    out = fn(*inputs)
    if not isinstance(out, Tensor):
        raise TypeError(f"gradcheck: the function must return a Tensor, got {type(out).__name__}")
    return (out * projection(out)).sum()


def _value(fn, inputs, projection):
    with no_grad():
        return float(_loss(fn, inputs, projection).item())


def _close(analytic, numeric, atol, rtol):
    return abs(analytic - numeric) <= atol + rtol * abs(numeric)


def gradcheck(fn, *inputs, eps=1e-6, atol=1e-5, rtol=1e-3, mode="auto", n_directions=2, seed=0,
              max_elements=2000):
    """True when the backward pass of `fn` at `inputs` matches central differences; else raises
    GradcheckError naming the input, the worst element, both values and the relative error.

    `inputs` are Tensors (those with requires_grad=True are checked; module parameters work too).
    They are switched to float64 in place for the check and restored afterwards. A non-scalar output
    is reduced with a fixed random projection. mode: "elementwise", "directional" or "auto"
    (element-wise when the checked inputs have at most `max_elements` elements in all).
    """
    _check_arguments(fn, eps, atol, rtol, mode, n_directions, seed, max_elements)
    checked = [(i, t) for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input has requires_grad=True, so there is nothing to check")
    for i, t in checked:
        if t.dtype.kind != "f":
            raise TypeError(f"gradcheck: input {i} holds {t.dtype}; "
                            "only floating-point inputs have gradients to check")
    tensors = [t for t in inputs if isinstance(t, Tensor)]
    # the very arrays, restored afterwards: no trace left
    saved = [(t.data, t.grad, t.version) for t in tensors]
    for t in tensors:
        if t.data.dtype.kind == "f":
            t.data = t.data.astype(np.float64, order="C")
    try:
        projection = _Projection(seed)
        for _, t in checked:
            t.grad = None
        _loss(fn, inputs, projection).backward()
        analytic = [backend.to_numpy(t.grad) if t.grad is not None else np.zeros(t.shape)
                    for _, t in checked]
        if mode == "auto":
            small = sum(t.size for _, t in checked) <= max_elements
            mode = "elementwise" if small else "directional"
        if mode == "elementwise":
            _elementwise(fn, inputs, projection, checked, analytic, eps, atol, rtol)
        else:
            _directional(fn, inputs, projection, checked, analytic, eps, atol, rtol,
                         n_directions, seed)
    finally:
        for t, (data, grad, version) in zip(tensors, saved):
            # the same arrays as before: a graph that saved t still runs
            t.data = data
            t.grad = grad
            t.version = version
    return True


def _check_arguments(fn, eps, atol, rtol, mode, n_directions, seed, max_elements):
    """Refuse, in one sentence naming it, an argument the check cannot run with: eps must be a
    positive finite step (0 divides by zero), the tolerances finite and at least 0."""
    if not callable(fn):
        raise TypeError(f"gradcheck: the first argument must be a function, got "
                        f"{type(fn).__name__}")
    check_real("gradcheck", "eps", eps, 0.0, low_open=True)
    check_real("gradcheck", "atol", atol, 0.0)
    check_real("gradcheck", "rtol", rtol, 0.0)
    if not isinstance(mode, str) or mode not in ("auto", "elementwise", "directional"):
        raise ValueError(f"gradcheck: unknown mode {mode!r} "
                         "(use 'auto', 'elementwise' or 'directional')")
    check_int("gradcheck", "n_directions", n_directions, 1)
    check_int("gradcheck", "seed", seed, 0)
    check_int("gradcheck", "max_elements", max_elements, 0)


def _elementwise(fn, inputs, projection, checked, analytic, eps, atol, rtol):
    """Perturb each element by +-eps; report the worst disagreement of all inputs."""
    worst = None
    for (i, t), a in zip(checked, analytic):
        flat = t.data.reshape(-1)  # a view: writing to it perturbs the input
        numeric = np.empty(t.size)
        for j in range(t.size):
            old = flat[j].item()
            flat[j] = old + eps
            up = _value(fn, inputs, projection)
            flat[j] = old - eps
            down = _value(fn, inputs, projection)
            flat[j] = old
            numeric[j] = (up - down) / (2 * eps)
        err = np.abs(a.reshape(-1) - numeric) - rtol * np.abs(numeric)
        j = int(np.argmax(err)) if t.size else 0
        if t.size and not _close(a.reshape(-1)[j], numeric[j], atol, rtol):
            if worst is None or err[j] > worst[0]:
                worst = (err[j], i, np.unravel_index(j, t.shape), a.reshape(-1)[j], numeric[j])
    if worst is not None:
        _, i, index, av, nv = worst
        where = tuple(int(k) for k in index)
        relative = abs(av - nv) / max(abs(nv), 1e-12)
        raise GradcheckError(
            f"gradient of input {i} is wrong at index {where}: analytic {av:.6g}, "
            f"numeric {nv:.6g}, relative error {relative:.3g}")


def _directional(fn, inputs, projection, checked, analytic, eps, atol, rtol, n_directions, seed):
    """Compare the numeric slope of L along random directions with the analytic dot product.

    All inputs move at once (two forward passes per direction); on a failure each input is then
    tried alone, so that the error names the input whose gradient is wrong.
    """
    rng = np.random.default_rng(seed + 1)
    for _ in range(n_directions):
        dirs = [rng.standard_normal(t.shape) for _, t in checked]
        norm = np.sqrt(sum(float((d * d).sum()) for d in dirs)) or 1.0
        dirs = [d / norm for d in dirs]
        slope = _slope(fn, inputs, projection, checked, dirs, eps)
        expected = sum(float((a * d).sum()) for a, d in zip(analytic, dirs))
        if _close(expected, slope, atol, rtol):
            continue
        for k, ((i, t), a, d) in enumerate(zip(checked, analytic, dirs)):
            alone = [dd if kk == k else np.zeros_like(dd) for kk, dd in enumerate(dirs)]
            s = _slope(fn, inputs, projection, checked, alone, eps)
            e = float((a * d).sum())
            if not _close(e, s, atol, rtol):
                relative = abs(e - s) / max(abs(s), 1e-12)
                raise GradcheckError(
                    f"gradient of input {i} (shape {t.shape}) is wrong along a random direction: "
                    f"analytic {e:.6g}, numeric {s:.6g}, relative error {relative:.3g}; "
                    "check it element-wise with mode='elementwise' on a smaller shape "
                    "to find the element")
        raise GradcheckError(
            f"directional check failed: analytic {expected:.6g}, numeric {slope:.6g}")


def _slope(fn, inputs, projection, checked, dirs, eps):
    """(L(x + eps d) - L(x - eps d)) / (2 eps), restoring x afterwards."""
    originals = [t.data.copy() for _, t in checked]
    values = []
    for sign in (1, -1):
        for (_, t), x, d in zip(checked, originals, dirs):
            t.data = x + sign * eps * backend.asarray(d)
        values.append(_value(fn, inputs, projection))
    for (_, t), x in zip(checked, originals):
        t.data = x
    return (values[0] - values[1]) / (2 * eps)
