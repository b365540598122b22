"""Lesson 09, answers: the learning-rate schedule of eq. (3), label smoothing's target and floor,
and Adam.

Graded by `python lessons/check.py 09 --solutions`; your own go in lessons/exercises/09_training.py.

The answers to the lesson's questions, explained, are in lessons/answers/09_training.md.
"""
import math

import numpy as np


def noam_lr(step, d_model, warmup_steps=4000):
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (eq. 3); step 0 counts as
    step 1.

    The two branches cross at step = warmup_steps: a straight line up, then 1/sqrt(step) down.
    """
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def smoothed_targets(target, vocab_size, eps):
    """q = (1 - eps) onehot(target) + eps / V: every token gets eps / V, the target 1 - eps more."""
    q = np.full((len(target), vocab_size), eps / vocab_size)
    q[np.arange(len(target)), target] += 1 - eps
    return q


def loss_floor(vocab_size, eps):
    """min_p -sum q log p = H(q) (Gibbs: reached at p = q) = -(q_t log q_t) -
    (V - 1)(eps/V) log(eps/V)."""
    V, q_t, q_o = vocab_size, 1 - eps + eps / vocab_size, eps / vocab_size
    return -q_t * math.log(q_t) - ((V - 1) * q_o * math.log(q_o) if q_o > 0 else 0.0)  # 0 log 0 = 0


def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):
    """One Adam step of parameter p with gradient g: the new (p, m, v), new arrays (Kingma &
    Ba, Algorithm 1).

    m and v are running means of g and g^2; both start at 0, so at step t (from 1) they are too
    small by a factor 1 - beta^t, which the bias corrections divide out: the first step is
    lr * sign(g).
    """
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g                                    # the running mean of g
    v = b2 * v + (1 - b2) * g * g                                # the running mean of g^2
    m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)          # bias corrections
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v
