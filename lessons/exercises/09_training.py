"""Lesson 09, build it: the learning-rate schedule of eq. (3), label smoothing's target and floor,
and Adam.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 09

The grader compares with optim.noam_schedule, with F.cross_entropy (whose gradient gives away its
target q) and with plain.adam, the package's Adam step of one parameter. The answers are in
lessons/solutions/09_training.py; try first.
"""
import math

import numpy as np


def noam_lr(step, d_model, warmup_steps=4000):
    """The learning rate of eq. (3) at `step`: linear warmup for warmup_steps steps, then
    1/sqrt(step) decay, scaled by d_model^-0.5 (section 5.3). Steps count from 1:
    take step 0 as step 1."""
    raise NotImplementedError("noam_lr: your turn")


def smoothed_targets(target, vocab_size, eps):
    """The smoothed target distributions q, one row per target id: an (N, V) array, from target, an
    integer array (N,). Label smoothing as minitransformer does it: every token, the target
    included, gets eps / V, and the target gets 1 - eps on top (rows sum to 1)."""
    raise NotImplementedError("smoothed_targets: your turn")


def loss_floor(vocab_size, eps):
    """The smallest value the label-smoothed cross-entropy -sum_j q_j log p_j can take over all
    predictions p, for V = vocab_size and smoothing eps (a float, in nats). Where is the minimum?"""
    raise NotImplementedError("loss_floor: your turn")


def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):
    """One Adam step of parameter p with gradient g (arrays of one shape; m, v arrays or
    0.0 at the start): the new (p, m, v), as new arrays. m and v are running means of g and g^2 with
    decays betas; t counts the steps from 1. Both means start at 0: what do they need at small t?
    (Kingma & Ba, Algorithm 1.)"""
    raise NotImplementedError("adam: your turn")
