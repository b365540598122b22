"""Optimisation: Adam with the paper's betas, the warmup schedule of eq. (3), gradient-norm clipping.

Every update runs in place on the parameters' arrays (no new arrays per step beyond one scratch
buffer), so it costs a few passes over memory. The state splits into JSON-able scalars and named
arrays, so a checkpoint stores it without pickle. Left out on purpose: parameter groups, AMSGrad,
other optimisers (the paper uses only Adam).
"""
import math

import numpy as np

from . import backend


class Adam:
    """Adam (Kingma & Ba), bias-corrected, with the paper's defaults (section 5.3):

        m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
        m_hat = m / (1 - b1^t)         v_hat = v / (1 - b2^t)
        p = p - lr * m_hat / (sqrt(v_hat) + eps)

    Note: the paper's beta2 = 0.98 and eps = 1e-9, not Adam's usual 0.999 and 1e-8.
    Note: weight_decay (0 in the paper) is decoupled, as in AdamW: p = p - lr * weight_decay * p.

    Moments have the dtype of their parameter (float32 in training) and live on its backend. A
    parameter whose .grad is None is skipped, and its own step count t does not advance.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0):
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got an empty parameter list")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Adam: betas must lie in [0, 1), got {betas}")
        if not (eps >= 0.0 and weight_decay >= 0.0):
            raise ValueError(f"Adam: eps and weight_decay must be non-negative, got {eps}, {weight_decay}")
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), tuple(map(float, betas)), float(eps), float(weight_decay)
        self.steps = 0                        # calls to step()
        self.t = [0] * len(self.params)       # updates each parameter has had (for bias correction)
        self.m = [None] * len(self.params)    # first moments, made at a parameter's first update
        self.v = [None] * len(self.params)    # second moments
        self._scratch = {}                    # dtype -> one flat buffer as big as the largest parameter

    def _buffer(self, a):
        """A scratch array shaped like `a`, a view into one buffer reused by every parameter."""
        buf = self._scratch.get(a.dtype)
        if buf is None or buf.size < a.size:
            size = max(p.data.size for p in self.params)
            buf = self._scratch[a.dtype] = backend.xp.empty(max(size, a.size), dtype=a.dtype)
        return buf[:a.size].reshape(a.shape)

    def step(self, lr=None):
        """One update of every parameter that has a gradient; `lr` (from a schedule) replaces self.lr."""
        if lr is not None:
            self.lr = float(lr)
        b1, b2 = self.betas
        xp = backend.xp
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                continue
            if self.m[i] is None:
                self.m[i] = xp.zeros_like(p.data)
                self.v[i] = xp.zeros_like(p.data)
            self.t[i] += 1
            m, v, buf = self.m[i], self.v[i], self._buffer(p.data)
            m *= b1                              # m = b1 m + (1 - b1) g
            xp.multiply(g, 1.0 - b1, out=buf)
            m += buf
            v *= b2                              # v = b2 v + (1 - b2) g^2
            xp.multiply(g, g, out=buf)
            buf *= 1.0 - b2
            v += buf
            # p -= lr m_hat / (sqrt(v_hat) + eps), written as Adam's section 2 does, with the bias
            # corrections folded into two scalars: p -= lr sqrt(bc2) / bc1 * m / (sqrt(v) + eps sqrt(bc2))
            bc1, bc2 = 1.0 - b1 ** self.t[i], math.sqrt(1.0 - b2 ** self.t[i])
            xp.sqrt(v, out=buf)
            buf += self.eps * bc2
            xp.divide(m, buf, out=buf)
            buf *= -self.lr * bc2 / bc1
            if self.weight_decay:
                p.data *= 1.0 - self.lr * self.weight_decay
            p.data += buf
        self.steps += 1

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
        for i, (m, v) in enumerate(zip(self.m, self.v)):
            if m is not None:
                arrays[f"m.{i}"], arrays[f"v.{i}"] = backend.to_numpy(m), backend.to_numpy(v)
        return scalars, arrays

    def load_state_dict(self, scalars, arrays):
        """Restore what state_dict() gave (arrays go to the current backend, in each parameter's dtype)."""
        n = len(self.params)
        if scalars["n_params"] != n:
            raise ValueError(f"the optimizer state holds {scalars['n_params']} parameters but this "
                             f"optimizer has {n}: was it saved for another model?")
        self.lr, self.betas, self.eps = float(scalars["lr"]), tuple(scalars["betas"]), float(scalars["eps"])
        self.weight_decay, self.steps, self.t = float(scalars["weight_decay"]), int(scalars["steps"]), list(scalars["t"])
        for i, p in enumerate(self.params):
            if f"m.{i}" not in arrays:
                self.m[i] = self.v[i] = None
                continue
            m, v = np.asarray(arrays[f"m.{i}"]), np.asarray(arrays[f"v.{i}"])
            if m.shape != p.data.shape or v.shape != p.data.shape:
                raise ValueError(f"optimizer state for parameter {i} has shape {m.shape}, but the "
                                 f"parameter has shape {p.data.shape}")
            self.m[i] = backend.asarray(m, dtype=p.data.dtype)
            self.v[i] = backend.asarray(v, dtype=p.data.dtype)


def noam_schedule(step, d_model, warmup_steps=4000, scale=1.0):
    """The learning rate of eq. (3): scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    It rises linearly for warmup_steps steps, peaks at step = warmup_steps with
    d_model^-0.5 * warmup_steps^-0.5, then decays as 1/sqrt(step). Steps count from 1; step 0 is
    taken as step 1 (so a loop counting from 0 never gets a zero rate or a division by zero).
    noam_schedule(4000, 512) -> 512^-0.5 * 4000^-0.5 = 0.000699
    """
    step = max(int(step), 1)
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


class WarmupSchedule:
    """noam_schedule with its settings held: WarmupSchedule(512)(4000) -> 0.000699."""

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        if not (d_model > 0 and warmup_steps > 0):
            raise ValueError(f"WarmupSchedule: d_model and warmup_steps must be positive, got {d_model}, {warmup_steps}")
        self.d_model, self.warmup_steps, self.scale = int(d_model), int(warmup_steps), float(scale)

    def __call__(self, step):
        return noam_schedule(step, self.d_model, self.warmup_steps, self.scale)

    @property
    def peak(self):
        """The highest rate, reached at step = warmup_steps."""
        return self(self.warmup_steps)

    def __repr__(self):
        return f"WarmupSchedule(d_model={self.d_model}, warmup_steps={self.warmup_steps}, scale={self.scale})"


def clip_grad_norm(params, max_norm):
    """Scale all gradients together so that their global L2 norm is at most max_norm.

    Returns the norm before clipping as a Python float: reading it synchronises with the GPU once.
    Gradients are scaled by max_norm / (norm + 1e-6) only when norm > max_norm. A non-finite norm
    (inf or nan) is returned with the gradients left alone, so the caller can skip that step.
    """
    xp = backend.xp
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    # vdot on flat views: a dot product per array, no g*g temporary; one sum, one host read
    total = math.sqrt(float(sum(xp.vdot(g.reshape(-1), g.reshape(-1)) for g in grads)))
    if math.isfinite(total) and total > max_norm:
        coef = max_norm / (total + 1e-6)
        for g in grads:
            g *= coef
    return total
