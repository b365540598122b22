"""Lesson 01, build it: measure floating point from the inside.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 01

Use nothing but arithmetic in the dtype you are given (no np.finfo: that is what the grader compares
with). The answers are in lessons/solutions/01_backend.py; try first.
"""
import numpy as np


def machine_epsilon(dtype):
    """The machine epsilon of `dtype` (np.float16, np.float32 or np.float64): the smallest power of
    two e for which dtype(1) + dtype(e) still differs from dtype(1), found by arithmetic in `dtype`
    (not read from np.finfo). A Python float or a NumPy scalar.
    """
    raise NotImplementedError("machine_epsilon: your turn")


def smallest_lost_power_of_ten(dtype):
    """The smallest int k >= 1 such that dtype(1) + dtype(10.0 ** -k) == dtype(1), the addition done
    in `dtype`.
    """
    raise NotImplementedError("smallest_lost_power_of_ten: your turn")
