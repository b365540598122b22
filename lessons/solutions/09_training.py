"""Lesson 09, answers: the learning-rate schedule of eq. (3), label smoothing's target and floor, and Adam.

Graded by `python lessons/check.py 09 --solutions`; your own go in lessons/exercises/09_training.py.

Answers to the lesson's questions:
1. At step = warmup_steps = 1000, the rate 256^-0.5 * 1000^-0.5 ~ 0.001976.
2. 1 - eps + eps / V = 0.90001 for eps = 0.1, V = 10,000.
3. (300 * 2.0 + 100 * 4.0) / 400 = 2.5, the mean over all 400 tokens; averaging the two means would give 3.0.
4. At t = 1, m = (1 - b1) g and v = (1 - b2) g^2; the bias corrections divide those out: m_hat = g,
   v_hat = g^2, and the step is lr * g / (|g| + eps) ~ lr * sign(g), for a gradient of 1e-6 as for 1e3.
   Every weight moves by the full rate at once, before the moments mean anything: a small rate at first
   keeps those early steps small.
5. n + 1: y_1 .. y_n and </s>. <s> is never predicted (it is only read, at position 0), and </s> is
   never read (it is only predicted, at position n).
6. d_model^-0.5 scales the whole schedule: (1024 / 512)^-0.5 = 1 / sqrt(2) ~ 0.707 (0.000494 against
   0.000699 at step 4,000).
7. The batch is 2 x 20 = 40 positions, 18 of them padding: 45%, computed and thrown away. Sentences of
   about the same length pad little; random ones pad up to the longest in every batch.
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


def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):
    """One Adam step of parameter p with gradient g: the new (p, m, v), new arrays (Kingma & Ba, Algorithm 1).

    m and v are running means of g and g^2; both start at 0, so at step t (from 1) they are too small by a
    factor 1 - beta^t, which the bias corrections divide out: the first step is lr * sign(g).
    """
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g                                    # the running mean of g
    v = b2 * v + (1 - b2) * g * g                                # the running mean of g^2
    m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)          # bias corrections
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    assert max(range(1, 5000), key=lambda s: noam_lr(s, 256, 1000)) == 1000
    assert math.isclose(noam_lr(1000, 256, 1000), 256 ** -0.5 * 1000 ** -0.5)
    assert math.isclose(smoothed_targets(np.array([0]), 10_000, 0.1)[0, 0], 0.90001)
    assert (300 * 2.0 + 100 * 4.0) / 400 == 2.5
    p, m, v = np.array([1.0, 1.0]), 0.0, 0.0                                                      # 4
    new, _, _ = adam(p, np.array([1e-6, -1e3]), m, v, 1, lr=0.01)
    assert np.allclose(p - new, [0.01, -0.01], rtol=1e-3)
    assert math.isclose(noam_lr(4000, 1024, 4000) / noam_lr(4000, 512, 4000), 2 ** -0.5)           # 6
    assert 18 / (2 * 20) == 0.45                                                                    # 7
