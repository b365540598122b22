"""Lesson 01, build it: measure floating point from the inside.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 01

Use nothing but arithmetic in the dtype you are given (no np.finfo: that is what the grader compares
with). The answers are in lessons/solutions/01_backend.py; try first.
"""
import numpy as np


def machine_epsilon(dtype):
    """The machine epsilon of `dtype` (np.float16, np.float32 or np.float64), found by halving.

    Start from e = 1.0 and halve it while dtype(1) + dtype(e / 2) still differs from dtype(1); return
    the last e that changed 1 (a Python float or a NumPy scalar). For float32 that is 2^-23 ~ 1.19e-7.
    """
    raise NotImplementedError("machine_epsilon: your turn")


def smallest_lost_power_of_ten(dtype):
    """The smallest k >= 1 such that dtype(1) + dtype(10.0 ** -k) == dtype(1), as an int.

    Lesson 01's exercise 2: for float32 it is 8. Do the addition in `dtype`, not in Python floats.
    """
    raise NotImplementedError("smallest_lost_power_of_ten: your turn")
