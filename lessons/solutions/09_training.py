"""Lesson 09, answers: the learning-rate schedule of eq. (3), and label smoothing's target and floor.

Graded by `python lessons/check.py 09 --solutions`; your own go in lessons/exercises/09_training.py.

Answers to the lesson's questions:
1. At step = warmup_steps = 1000, the rate 256^-0.5 * 1000^-0.5 ~ 0.001976.
2. 1 - eps + eps / V = 0.90001 for eps = 0.1, V = 10,000.
3. (300 * 2.0 + 100 * 4.0) / 400 = 2.5, the mean over all 400 tokens; averaging the two means would give 3.0.
"""
import math

import numpy as np


def noam_lr(step, d_model, warmup_steps=4000):
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (eq. 3); step 0 counts as step 1.

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
    """min_p -sum q log p = H(q) (Gibbs: reached at p = q) = -(q_t log q_t) - (V - 1)(eps/V) log(eps/V)."""
    V, q_t, q_o = vocab_size, 1 - eps + eps / vocab_size, eps / vocab_size
    return -q_t * math.log(q_t) - ((V - 1) * q_o * math.log(q_o) if q_o > 0 else 0.0)   # 0 log 0 = 0


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    assert max(range(1, 5000), key=lambda s: noam_lr(s, 256, 1000)) == 1000
    assert math.isclose(noam_lr(1000, 256, 1000), 256 ** -0.5 * 1000 ** -0.5)
    assert math.isclose(smoothed_targets(np.array([0]), 10_000, 0.1)[0, 0], 0.90001)
    assert (300 * 2.0 + 100 * 4.0) / 400 == 2.5
