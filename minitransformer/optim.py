"""Optimisation: Adam with the paper's betas, the warmup schedule of eq. (3), gradient-norm
clipping.

Every update runs in place on one flat buffer of all parameters (no new arrays per step), so it
costs a few passes over memory (one on the GPU, with the fused kernel of fast/kernels.py). The state
splits into JSON-able scalars and named arrays, so a checkpoint stores it without pickle. Left out
on purpose: parameter groups, AMSGrad, other optimisers (the paper uses only Adam).
"""
import math

import numpy as np

from . import backend, fast, plain
from .checks import check_int, check_real, fail
from .tensor import Tensor


class Adam:
    """Adam (Kingma & Ba), bias-corrected, with the paper's defaults (section 5.3):

        m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
        m_hat = m / (1 - b1^t)         v_hat = v / (1 - b2^t)
        p = p - lr * m_hat / (sqrt(v_hat) + eps)            (plain form, one parameter: plain.adam)

    Note: the paper's beta2 = 0.98 and eps = 1e-9, not Adam's usual 0.999 and 1e-8.
    Note: weight_decay (0 in the paper) is decoupled, as in AdamW: p = p - lr * weight_decay * p.

    One flat buffer per dtype holds every parameter side by side (each `p.data` becomes a view into
    it), and flat buffers beside it hold the gradients and the moments, so an update is a handful of
    whole-buffer operations instead of a dozen per parameter (on a GPU: a handful of kernel
    launches).
    A parameter whose .grad is None is skipped, and its own step count t does not advance; a run of
    parameters updated together must share t, so skipping splits the update into a few runs.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0):
        if hasattr(params, "parameters"):
            raise TypeError("Adam takes the parameters, not the model: Adam(model.parameters())")
        self.params = list(params)
        if not self.params:
            fail("Adam", "params is an empty parameter list: there is nothing to update", "params")
        # id -> index: a shared weight listed twice would be updated twice
        first = {}
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or p.dtype.kind != "f":
                raise TypeError(f"Adam: parameter {i} must be a floating-point Tensor, "
                                f"got {type(p).__name__}"
                                + (f" of dtype {p.dtype}" if isinstance(p, Tensor) else ""))
            if first.setdefault(id(p), i) != i:
                fail("Adam", f"parameter {i} is parameter {first[id(p)]} again; list each "
                     f"parameter once (model.parameters() does)", "params")
        _check_lr(lr)
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            fail("Adam", f"betas must be two numbers in [0, 1), got {betas}", "betas", betas)
        for beta in betas:
            check_real("Adam", "betas", beta, 0.0, 1.0)
        check_real("Adam", "eps", eps, 0.0)
        check_real("Adam", "weight_decay", weight_decay, 0.0)
        self.lr = float(lr)
        self.betas = tuple(map(float, betas))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        # calls to step()
        self.steps = 0
        # (k, n): step() updates the k-th of n slices of each buffer
        self.part = None
        # updates each parameter has had (for bias correction)
        self.t = [0] * len(self.params)
        # dtype -> {"data", "grad", "m", "v", "scratch"}: flat arrays
        self.flat = {}
        # per parameter: (dtype, start, stop) in its flat arrays
        self.where = []
        xp = backend.xp
        for dtype in dict.fromkeys(p.data.dtype for p in self.params):
            group = [i for i, p in enumerate(self.params) if p.data.dtype == dtype]
            size = sum(self.params[i].data.size for i in group)
            self.flat[dtype] = {k: xp.zeros(size, dtype=dtype)
                                for k in ("data", "grad", "m", "v", "scratch")}
        starts = {dtype: 0 for dtype in self.flat}
        for p in self.params:
            start = starts[p.data.dtype]
            starts[p.data.dtype] = stop = start + p.data.size
            self.where.append((p.data.dtype, start, stop))
        self._views = [self._view(i, "data") for i in range(len(self.params))]
        # step() copies each .grad in
        self._grads = [self._view(i, "grad") for i in range(len(self.params))]
        for p, view in zip(self.params, self._views):
            view[...] = p.data
            p.data = view                     # the parameter now lives in the flat buffer

    def _view(self, i, kind):
        """Parameter i's part of the flat `kind` array, shaped like the parameter."""
        dtype, start, stop = self.where[i]
        return self.flat[dtype][kind][start:stop].reshape(self.params[i].data.shape)

    @property
    def m(self):
        """First moments, one view per parameter (None before the parameter's first update)."""
        return [self._view(i, "m") if t else None for i, t in enumerate(self.t)]

    @property
    def v(self):
        """Second moments, one view per parameter (None before the parameter's first update)."""
        return [self._view(i, "v") if t else None for i, t in enumerate(self.t)]

    def step(self, lr=None):
        """One update of every parameter that has a gradient; `lr` (from a schedule) replaces
        self.lr. With `part` = (k, n) set, only the k-th of n equal slices of each flat buffer is
        updated (rank threads sharing one copy: distributed.ThreadWorld.share_); every parameter's t
        still advances."""
        for dtype, start, stop, t in self.count_step(lr):
            flat = self.flat[dtype]
            if self.part is not None:         # this rank's slice of the run, maybe none
                k, n = self.part
                size = flat["data"].size
                start = max(start, size * k // n)
                stop = min(stop, size * (k + 1) // n)
            if start < stop:
                run = slice(start, stop)
                self._update(*(flat[name][run] for name in ("data", "grad", "m", "v", "scratch")),
                             t)

    def count_step(self, lr=None):
        """The host's part of a step: lr set, each gradient copied into the flat gradient buffer,
        each updated parameter's t advanced. Returns the runs [dtype, start, stop, t] of neighbours
        that are updated together (a parameter without a gradient splits a run). A replayed CUDA
        graph does the device's part itself (run/replay.py)."""
        if lr is not None:
            self.lr = _check_lr(lr)
        runs = []
        for i, p in enumerate(self.params):
            if p.data is not self._views[i]:      # assigned anew by hand: back into the flat buffer
                self._views[i][...] = p.data
                p.data = self._views[i]
            if p.grad is None:
                continue
            if p.grad is not self._grads[i]:      # (it is there already after gradient_buffers())
                self._grads[i][...] = p.grad
            self.t[i] += 1
            # a graph that saved p before this step refuses backward
            p.changed()
            dtype, start, stop = self.where[i]
            if runs and runs[-1][0] == dtype and runs[-1][2] == start and runs[-1][3] == self.t[i]:
                runs[-1][2] = stop
            else:
                runs.append([dtype, start, stop, self.t[i]])
        self.steps += 1
        return runs

    def use_buffers(self, other):
        """Keep the weights and the moments in `other`'s flat buffers (an Adam over the same
        shapes), this optimizer's own dropped: the rank threads of one process hold one copy
        (ThreadWorld.share_)."""
        if self.where != other.where:
            raise ValueError("Adam.use_buffers: the other optimizer's parameters have other sizes")
        for dtype, flat in self.flat.items():
            for name in ("data", "m", "v"):
                flat[name] = other.flat[dtype][name]
        self._views = [self._view(i, "data") for i in range(len(self.params))]
        for p, view in zip(self.params, self._views):
            p.data = view

    def _update(self, p, g, m, v, buf, t):
        """The update of eq. (Adam) on flat arrays, in place: p the parameters, g their gradients.
        Plain form, per parameter and straight from the formulas: plain.adam."""
        numbers = self.update_numbers(t)                   # Python floats
        if fast.on(p):
            return fast.adam(p, g, m, v, numbers)
        xp = backend.xp
        b1, one_minus_b1, b2, one_minus_b2, eps_bc2, step, decay = numbers
        m *= b1                              # m = b1 m + (1 - b1) g
        xp.multiply(g, one_minus_b1, out=buf)
        m += buf
        v *= b2                              # v = b2 v + (1 - b2) g^2
        xp.multiply(g, g, out=buf)
        buf *= one_minus_b2
        v += buf
        # p -= lr m_hat / (sqrt(v_hat) + eps), written as Adam's section 2 does, with the bias
        # corrections folded into two numbers:
        # p -= lr sqrt(bc2) / bc1 * m / (sqrt(v) + eps sqrt(bc2)), bc = 1 - beta^t
        xp.sqrt(v, out=buf)
        buf += eps_bc2
        xp.divide(m, buf, out=buf)
        buf *= step
        if self.weight_decay:
            p *= decay
        p += buf

    def update_numbers(self, t, lr=None):
        """The 7 numbers of an update at step t (from 1) and rate lr (None: self.lr), as Python
        floats: b1, 1 - b1, b2, 1 - b2, eps sqrt(bc2), -lr sqrt(bc2) / bc1, 1 - lr weight_decay,
        with the bias corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t. The one place they are computed,
        so that _update, the fused kernel and a replayed CUDA graph (which reads them from device
        memory) agree."""
        lr = self.lr if lr is None else _check_lr(lr)
        b1, b2 = self.betas
        bc1 = 1.0 - b1 ** t
        sqrt_bc2 = math.sqrt(1.0 - b2 ** t)
        return (b1, 1.0 - b1, b2, 1.0 - b2, self.eps * sqrt_bc2, -lr * sqrt_bc2 / bc1,
                1.0 - lr * self.weight_decay)

    def gradient_buffers(self):
        """The flat gradient arrays, one per dtype, with every parameter's .grad made a view into
        them (zeros for a parameter without a gradient): what the ranks of a data-parallel run add
        up."""
        for p, buffer in zip(self.params, self._grads):
            if p.grad is not buffer:
                buffer[...] = 0 if p.grad is None else p.grad
                p.grad = buffer
        return [flat["grad"] for flat in self.flat.values()]

    def zero_grad(self):
        """Forget every gradient (set .grad to None, so the next backward writes fresh arrays)."""
        for p in self.params:
            p.grad = None

    def state_dict(self):
        """(scalars, arrays): a JSON-able dict and a dict of name -> NumPy array ("m.3", "v.3" for
        parameter 3, in the order of `params`), ready for json.dump and np.savez."""
        scalars = {"lr": self.lr, "betas": list(self.betas), "eps": self.eps,
                   "weight_decay": self.weight_decay, "steps": self.steps, "t": list(self.t),
                   "n_params": len(self.params)}
        arrays = {}
        for i, t in enumerate(self.t):
            if t:
                arrays[f"m.{i}"], arrays[f"v.{i}"] = (backend.host_copy(self._view(i, k))
                                                      for k in "mv")
        return scalars, arrays

    def load_state_dict(self, scalars, arrays):
        """Restore what state_dict() gave (arrays go to the current backend, in each parameter's
        dtype)."""
        n = len(self.params)
        if scalars["n_params"] != n:
            raise ValueError(f"the optimizer state holds {scalars['n_params']} parameters but this "
                             f"optimizer has {n}: was it saved for another model?")
        self.lr = float(scalars["lr"])
        self.betas = tuple(scalars["betas"])
        self.eps = float(scalars["eps"])
        self.weight_decay = float(scalars["weight_decay"])
        self.steps = int(scalars["steps"])
        self.t = list(scalars["t"])
        for i, p in enumerate(self.params):
            if f"m.{i}" not in arrays:
                continue
            m = np.asarray(arrays[f"m.{i}"])
            v = np.asarray(arrays[f"v.{i}"])
            if m.shape != p.data.shape or v.shape != p.data.shape:
                raise ValueError(f"optimizer state for parameter {i} has shape {m.shape}, but the "
                                 f"parameter has shape {p.data.shape}")
        for i, p in enumerate(self.params):   # checked first, so a bad state changes nothing
            for k in "mv":
                self._view(i, k)[...] = backend.asarray(arrays[f"{k}.{i}"], dtype=p.data.dtype) \
                    if f"m.{i}" in arrays else 0


def _check_lr(lr):
    """lr as a float, if it is a finite number >= 0 (a negative rate climbs the loss, NaN ruins
    every weight)."""
    check_real("Adam", "lr", lr, 0.0)
    return float(lr)


def noam_schedule(step, d_model, warmup_steps=4000, scale=1.0):
    """The learning rate of eq. (3) times `scale`:
    scale * plain.noam_schedule(step, d_model, warmup_steps).

    It rises linearly for warmup_steps steps, peaks at step = warmup_steps with
    d_model^-0.5 * warmup_steps^-0.5, then decays as 1/sqrt(step). Steps count from 1; step 0 is
    taken as step 1 (so a loop counting from 0 never gets a zero rate or a division by zero).
    noam_schedule(4000, 512) -> 512^-0.5 * 4000^-0.5 = 0.000699
    """
    return scale * plain.noam_schedule(max(int(step), 1), d_model, warmup_steps)


class WarmupSchedule:
    """noam_schedule with its settings held: WarmupSchedule(512)(4000) -> 0.000699.
    Plain form: plain.noam_schedule."""

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        check_int("WarmupSchedule", "d_model", d_model, 1)
        check_int("WarmupSchedule", "warmup_steps", warmup_steps, 1)
        check_real("WarmupSchedule", "scale", scale, 0.0, low_open=True)
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)

    def __call__(self, step):
        return noam_schedule(step, self.d_model, self.warmup_steps, self.scale)

    @property
    def peak(self):
        """The highest rate, reached at step = warmup_steps."""
        return self(self.warmup_steps)

    def __repr__(self):
        return (f"WarmupSchedule(d_model={self.d_model}, warmup_steps={self.warmup_steps}, "
                f"scale={self.scale})")


def clip_grad_norm(params, max_norm):
    """Scale all gradients together so that their global L2 norm is at most max_norm.

    Returns the norm before clipping as a Python float: reading it synchronises with the GPU once.
    Gradients are scaled by max_norm / (norm + 1e-6) only when norm > max_norm. A non-finite norm
    (inf or nan) is returned with the gradients left alone, so the caller can skip that step.
    """
    check_real("clip_grad_norm", "max_norm", max_norm, 0.0, low_open=True)
    xp = backend.xp
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    # on the GPU, one copy kernel and one dot product, not ~100 dots and adds (launch-bound); on
    # the CPU, a dot per array and no copy: there the copy costs more than it saves
    if backend.device == "gpu":
        flat = xp.concatenate([g.reshape(-1) for g in grads])
        squares = xp.vdot(flat, flat)
    else:
        squares = sum(xp.vdot(g.reshape(-1), g.reshape(-1)) for g in grads)
    total = math.sqrt(float(squares))                                 # the one host read
    if math.isfinite(total) and total > max_norm:
        coef = max_norm / (total + 1e-6)
        for g in grads:
            g *= coef
    return total
