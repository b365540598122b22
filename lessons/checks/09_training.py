"""Lesson 09, training: noam_lr against optim.noam_schedule (the warmup boundary, and seeded random
settings), smoothed_targets against the target q that F.cross_entropy uses (read off its gradient),
loss_floor against F.cross_entropy at its optimum, and adam against plain.adam (the bias corrections
at t = 1, other betas and eps, gradients where eps matters, seeded random steps)."""
import math

import numpy as np

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import optim, plain

from .common import leaf, tolerance


def check_noam_lr(fn, g):
    g.error_hint = "step 0 counts as step 1 (steps count from 1)"
    rng = np.random.default_rng(91)
    for d, w, steps in ((512, 4000, ()), (256, 1000, ()), (1024, 4000, ()),
                        (int(rng.integers(16, 2048)), int(rng.integers(1, 5000)),
                         rng.integers(1, 20000, 8)),
                        (64, 1, (2, 3))):
        for step in (0, 1, 2, 10, 999, 1000, 1001, 3999, 4000, 4001, 16000, 100000, w - 1, w, w + 1,
                     *steps):
            # one case a step: a mistake is confirmed on the next
            g.start(f"noam_lr({step}, {d}, {w})")
            s = max(step, 1)
            g.cmp("the rate", g.call(fn, step, d, w), optim.noam_schedule(step, d, w),
                  known=noam_lr_mistakes(s, d, w) + ([(0.0, g.error_hint)] if step == 0 else []),
                  otherwise="during warmup the rate is d_model^-0.5 * step * warmup_steps^-1.5 (a "
                            "straight line)"
                  if s < w else "after warmup it is d_model^-0.5 * step^-0.5")


def check_smoothed_targets(fn, g):
    rng = np.random.default_rng(90)
    for t, V, eps in ((np.array([0, 3, 3, 1]), 5, 0.1), (np.array([2]), 3, 0.0),
                      (rng.integers(0, 10, 6), 10, 0.3), (np.array([1, 0]), 4, 1.0)):
        g.start(f"{len(t)} targets, V={V}, eps={eps}")
        z = leaf(np.zeros((len(t), V)))                    # the package's q, read off its gradient:
        # dz = (softmax(0) - q) / N = (1/V - q) / N
        F.cross_entropy(z, t, label_smoothing=eps).backward()
        ref = 1 / V - len(t) * z.grad
        g.cmp("q", g.call(fn, t.copy(), V, eps), ref, known=smoothed_targets_mistakes(t, V, eps),
              shape_hint="one row of V probabilities per target")


def check_loss_floor(fn, g):
    for V, eps in ((4, 0.1), (37000, 0.1), (10, 0.0), (2, 1.0), (5, 0.3)):
        g.start(f"V={V}, eps={eps}")
        g.error_hint = "0 log 0 counts as 0 (with eps = 0, q is one-hot)" if eps == 0 else ""
        q = np.full(V, eps / V)
        q[0] += 1 - eps
        if eps == 0:
            ref = 0.0
        else:                                    # the package's loss at the optimum, logits = log q
            ref = F.cross_entropy(mt.tensor(np.log(q)[None]), np.array([0]),
                                  label_smoothing=eps).item()
        g.cmp("H(q)", g.call(fn, V, eps), ref,
              nan_hint="0 log 0 counts as 0 (with eps = 0, q is one-hot)",
              known=loss_floor_mistakes(V, eps),
              otherwise="the floor is the entropy H(q) of the smoothed target q, where the loss is "
                        "lowest (p = q)")


def check_adam(fn, g):
    rng = np.random.default_rng(92)
    scales = 10.0 ** rng.integers(-3, 4, 6)     # gradients of every size: the first step ignores it
    cases = [("t=1 from m = v = 0, gradients from 1e-3 to 1e3", 1, 0.1, (0.9, 0.98), 1e-9, 0.0),
             ("t=2, betas (0.9, 0.999), eps 1e-8", 2, 0.01, (0.9, 0.999), 1e-8, 1.0),
             ("t=5, gradients near 1e-10, where eps matters", 5, 0.001, (0.9, 0.98), 1e-9, 1e-10),
             ("t=3, betas (0.5, 0.6)", 3, 0.5, (0.5, 0.6), 1e-9, 1.0),
             ("t=1000: the corrections near 1", 1000, 1e-4, (0.9, 0.98), 1e-9, 1.0),
             ("t=1 from m = v = 0.0, the floats an optimiser starts from", 1, 0.1, (0.9, 0.98),
              1e-9, None)]
    for case, t, lr, betas, eps, size in cases:
        g.start(case)
        p, grad = rng.standard_normal(6), (size or scales) * rng.standard_normal(6)
        m = np.zeros(6) if t == 1 else size * rng.standard_normal(6)
        v = np.zeros(6) if t == 1 else size ** 2 * rng.exponential(1.0, 6)
        if size is None:                                  # m and v not arrays yet
            m = v = 0.0
        given = [a.copy() if isinstance(a, np.ndarray) else a for a in (p, grad, m, v)]
        ref = plain.adam(p, grad, m, v, t, lr, betas, eps)
        g.error_hint = "" if np.ndim(m) else ("m and v start as the float 0.0: b1 * m + (1 - b1) * "
                                              "g makes new arrays")
        got = g.unpack(g.call(fn, *given, t, lr, betas=betas, eps=eps), ["p", "m", "v"])
        if any(not np.array_equal(a, b) for a, b in zip(given, (p, grad, m, v))):
            g.fail("adam changed its inputs in place: return new arrays (p - ... makes one)")
        known = adam_mistakes(p, grad, m, v, t, lr, betas, eps)
        for name, yours, right, wrong in zip(("m", "v", "p"), (got[1], got[2], got[0]),
                                             (ref[1], ref[2], ref[0]),
                                             (known["m"], known["v"], known["p"])):
            # not those that are right on this case (m_hat = g at t = 1)
            wrong = [(w, h) for w, h in wrong
                     if not np.allclose(w, right, rtol=1e-6, atol=tolerance(right))]
            g.cmp(f"the new {name}", yours, right, known=wrong,
                  nan_hint="t counts from 1: at t = 1 the corrections divide by 1 - beta (t - 1 = "
                           "0 would divide by 0)")


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def adam_mistakes(p, g, m, v, t, lr, betas, eps):
    """{"m": [(wrong m, hint)], "v": ..., "p": ...}."""
    b1, b2 = betas

    def step(m_hat, v_hat, sign=-1.0, root=np.sqrt, eps_inside=False):
        return p + sign * lr * m_hat / (root(v_hat + eps) if eps_inside else root(v_hat) + eps)
    m1, v1 = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    mh, vh = m1 / (1 - b1 ** t), v1 / (1 - b2 ** t)
    return {"m": [(b2 * m + (1 - b2) * g,
                   "m decays with beta1 (betas[0]), v with beta2 (betas[1])"),
                  ((1 - b1) * m + b1 * g,
                   "m = beta1 m + (1 - beta1) g: the old mean keeps the weight beta1"),
                  (mh, "return m itself, not m_hat: the corrections are for the step only, the "
                       "means carry on uncorrected"),
                  (0.9 * m + 0.1 * g, "use the betas given, not the paper's")],
            "v": [(b2 * v + (1 - b2) * g, "v is the running mean of g^2 (g * g), not of g"),
                  (b1 * v + (1 - b1) * g * g,
                   "m decays with beta1 (betas[0]), v with beta2 (betas[1])"),
                  (vh, "return v itself, not v_hat: the corrections are for the step only, the "
                       "means carry on uncorrected"),
                  (0.98 * v + 0.02 * g * g, "use the betas given, not the paper's")],
            "p": [(step(m1, v1),
                   "divide m by 1 - beta1^t and v by 1 - beta2^t: both means start at 0 (the bias "
                   "corrections)"),
                  (step(m1, vh), "correct m too: m_hat = m / (1 - beta1^t)"),
                  (step(mh, v1), "correct v too: v_hat = v / (1 - beta2^t)"),
                  (step(m1 / (1 - b1 ** (t + 1)), v1 / (1 - b2 ** (t + 1))),
                   "t counts from 1, and the corrections use it as it is: 1 - beta^t"),
                  (step(mh, vh, eps_inside=True),
                   "eps goes outside the square root: sqrt(v_hat) + eps"),
                  (step(mh, vh, sign=1.0),
                   "step against the gradient: p - lr * m_hat / (sqrt(v_hat) + eps)"),
                  (step(g, vh), "move by the running mean m_hat, not by this step's g (RMSprop)"),
                  (step(mh, vh, root=lambda x: x),
                   "divide by the square root of v_hat (the gradient's RMS), not by v_hat")]}


def noam_lr_mistakes(s, d, w):
    return [(min(s ** -0.5, s * w ** -1.5), "multiply by d_model^-0.5"),
            (d ** 0.5 * min(s ** -0.5, s * w ** -1.5),
             "d_model^-0.5, not d_model^0.5: a wider model gets a smaller rate"),
            (d ** -1 / 2 * min(s ** -0.5, s * w ** -1.5),
             "** binds tighter than /: d_model ** -1/2 is (1/d_model)/2; write d_model ** -0.5"),
            (d ** -0.5 * min((s + 1) ** -0.5, (s + 1) * w ** -1.5),
             "steps count from 1: use step as it is, not step + 1 (only step 0 counts as 1)"),
            (d ** -0.5 * min(max(s - 1, 1) ** -0.5, max(s - 1, 1) * w ** -1.5),
             "steps count from 1: use step as it is, not step - 1"),
            (d ** -0.5 * min(s ** -0.5, s * w ** -0.5),
             "the warmup branch is step * warmup_steps^-1.5"),
            (d ** -0.5 * max(s ** -0.5, s * w ** -1.5),
             "the min of the two branches, not the max: they cross at warmup_steps")]


def smoothed_targets_mistakes(t, V, eps):
    onehot = np.eye(V)[t]
    return [((1 - eps) * onehot + eps / (V - 1) * (1 - onehot),
             "that is tensor2tensor's variant: here every token, the target included, gets "
             "eps / V"),
            ((1 - eps) * onehot + eps / V * (1 - onehot),
             "the target gets eps / V too: q_t = 1 - eps + eps / V")]


def loss_floor_mistakes(V, eps):
    if not 0 < eps < 1:
        return []
    t2t = -(1 - eps) * math.log(1 - eps) - eps * math.log(eps / (V - 1))
    q_t, q_o = 1 - eps + eps / V, eps / V
    bits = -q_t * math.log2(q_t) - (V - 1) * q_o * math.log2(q_o)
    every = -q_t * math.log(q_t) - V * q_o * math.log(q_o)
    return [(t2t, "that is tensor2tensor's q; here q_t = 1 - eps + eps / V and eps / V elsewhere"),
            (every,
             "the target's term is -q_t log q_t, and only the V - 1 other tokens get -(eps/V) "
             "log(eps/V) each"),
            (bits, "that is in bits: the loss is in nats, natural logarithms (math.log)")]


ITEMS = [("noam_lr", check_noam_lr), ("smoothed_targets", check_smoothed_targets),
         ("loss_floor", check_loss_floor), ("adam", check_adam)]
