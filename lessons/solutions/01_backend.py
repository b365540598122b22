"""Lesson 01, answers: floating point, measured from the inside.

Graded by `python lessons/check.py 01 --solutions`; your own go in lessons/exercises/01_backend.py.

Answers to the lesson's questions:
1. `from minitransformer.backend import xp` binds the name once, at import, to the NumPy module;
   `mt.use("gpu")` rebinds `backend.xp`, not your copy, which keeps pointing at NumPy.
2. k = 8 for float32: 1e-8 is below eps/2 = 5.96e-8 and rounds away, while 1e-7 is above it and
   still changes 1 (`smallest_lost_power_of_ten` below; float16 gives 4, float64 16).
3. 2^24 + 1 = 2^24 in float32: from 2^24 on, float32 numbers are 2 apart (a 24-bit significand), and
   the tie rounds to the even neighbour. So (2^24 + 1) + 1 = 2^24, but 2^24 + (1 + 1) = 2^24 + 2: float
   addition is not associative, and the order of a sum changes its last bits (or more).
4. The initial weights and the dropout masks change: both come from the generators mt.seed resets. The
   batch order stays: the batch iterator draws it from its own seed and the epoch.
5. From the host generator, a model gets the same weights on the CPU and on the GPU (copied once, when
   it is built). Masks are drawn at every step: drawn on the host, each would cross the bus every step.
6. 4 MiB = 4,194,304 bytes at 16e9 bytes/s: 0.26 ms, plus the latency. But to_numpy first waits until
   every queued GPU kernel has run (it synchronises), so it also times the work queued before it.
"""
import numpy as np


def machine_epsilon(dtype):
    """eps = the last power of two e with dtype(1) + dtype(e) != 1: halve until the next halving is lost.

    Rounding to nearest makes 1 + e/2 round back to 1 once e is the spacing of the numbers next to 1.
    """
    e = 1.0
    while dtype(1) + dtype(e / 2) != dtype(1):      # the sum is rounded to `dtype`, not to float64
        e /= 2
    return e


def smallest_lost_power_of_ten(dtype):
    """The first k with dtype(1) + dtype(10^-k) == 1: where 10^-k falls below eps/2."""
    k = 1
    while dtype(1) + dtype(10.0 ** -k) != dtype(1):
        k += 1
    return k


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    assert smallest_lost_power_of_ten(np.float32) == 8 and machine_epsilon(np.float32) == np.finfo(np.float32).eps
    big = np.float32(2 ** 24)                                                                     # 3
    assert big + np.float32(1) == big and (big + np.float32(1)) + np.float32(1) == big
    assert big + (np.float32(1) + np.float32(1)) == np.float32(2 ** 24 + 2)
    assert round(4 * 2 ** 20 / 16e9 * 1e3, 2) == 0.26                                             # 6
