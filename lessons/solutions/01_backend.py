"""Lesson 01, answers: floating point, measured from the inside.

Graded by `python lessons/check.py 01 --solutions`; your own go in lessons/exercises/01_backend.py.

The answers to the lesson's questions, explained, are in lessons/answers/01_backend.md.
"""
import numpy as np


def machine_epsilon(dtype):
    """eps = the last power of two e with dtype(1) + dtype(e) != 1: halve until the next halving is
    lost.

    Rounding to nearest makes 1 + e/2 round back to 1 once e is the spacing of the numbers next to
    1.
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
