"""Lesson 09, training: noam_lr against optim.noam_schedule, smoothed_targets against the target q that
F.cross_entropy uses (read off its gradient), and loss_floor against F.cross_entropy at its optimum."""
import math

import numpy as np

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import optim

from .common import leaf


def check_noam_lr(fn, g):
    g.error_hint = "step 0 counts as step 1 (steps count from 1)"
    for d, w in ((512, 4000), (256, 1000), (1024, 4000)):
        g.start(f"d_model {d}, warmup {w}")
        for step in (0, 1, 2, 10, 999, 1000, 1001, 3999, 4000, 4001, 16000, 100000):
            s = max(step, 1)
            g.cmp(f"noam_lr({step}, {d}, {w})", g.call(fn, step, d, w), optim.noam_schedule(step, d, w),
                  known=noam_lr_mistakes(s, d, w) + ([(0.0, g.error_hint)] if step == 0 else []),
                  otherwise="during warmup the rate is d_model^-0.5 * step * warmup_steps^-1.5 (a straight line)"
                  if s < w else "after warmup it is d_model^-0.5 * step^-0.5")


def check_smoothed_targets(fn, g):
    rng = np.random.default_rng(90)
    for t, V, eps in ((np.array([0, 3, 3, 1]), 5, 0.1), (np.array([2]), 3, 0.0), (rng.integers(0, 10, 6), 10, 0.3),
                      (np.array([1, 0]), 4, 1.0)):
        g.start(f"{len(t)} targets, V={V}, eps={eps}")
        z = leaf(np.zeros((len(t), V)))                       # the package's q, read off its gradient:
        F.cross_entropy(z, t, label_smoothing=eps).backward()  # dz = (softmax(0) - q) / N = (1/V - q) / N
        ref = 1 / V - len(t) * z.grad
        g.cmp("q", g.call(fn, t.copy(), V, eps), ref, known=smoothed_targets_mistakes(t, V, eps),
              shape_hint="one row of V probabilities per target")


def check_loss_floor(fn, g):
    for V, eps in ((4, 0.1), (37000, 0.1), (10, 0.0), (2, 1.0), (5, 0.3)):
        g.start(f"V={V}, eps={eps}")
        q = np.full(V, eps / V)
        q[0] += 1 - eps
        if eps == 0:
            ref = 0.0
        else:                                    # the package's loss at the optimum, logits = log q
            ref = F.cross_entropy(mt.tensor(np.log(q)[None]), np.array([0]), label_smoothing=eps).item()
        g.cmp("H(q)", g.call(fn, V, eps), ref, nan_hint="0 log 0 counts as 0 (with eps = 0, q is one-hot)",
              known=loss_floor_mistakes(V, eps))


# -------------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def noam_lr_mistakes(s, d, w):
    return [(min(s ** -0.5, s * w ** -1.5), "multiply by d_model^-0.5"),
            (d ** -0.5 * min(s ** -0.5, s * w ** -0.5), "the warmup branch is step * warmup_steps^-1.5"),
            (d ** -0.5 * max(s ** -0.5, s * w ** -1.5), "the min of the two branches, not the max: they cross at "
                                                         "warmup_steps")]


def smoothed_targets_mistakes(t, V, eps):
    onehot = np.eye(V)[t]
    return [((1 - eps) * onehot + eps / (V - 1) * (1 - onehot),
             "that is tensor2tensor's variant: here every token, the target included, gets eps / V"),
            ((1 - eps) * onehot + eps / V * (1 - onehot), "the target gets eps / V too: q_t = 1 - eps + eps / V")]


def loss_floor_mistakes(V, eps):
    if not 0 < eps < 1:
        return []
    t2t = -(1 - eps) * math.log(1 - eps) - eps * math.log(eps / (V - 1))
    return [(t2t, "that is tensor2tensor's q; here q_t = 1 - eps + eps / V and eps / V elsewhere")]


ITEMS = [("noam_lr", check_noam_lr), ("smoothed_targets", check_smoothed_targets), ("loss_floor", check_loss_floor)]
