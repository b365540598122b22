"""Lesson 01, backend: machine_epsilon and smallest_lost_power_of_ten, per dtype (float16, float32,
float64), against np.finfo(dtype).eps; both answers must be exact."""
import math

import numpy as np

DTYPES = (np.float16, np.float32, np.float64)


def check_machine_epsilon(fn, g):
    for dtype in DTYPES:
        g.start(f"{dtype.__name__}")
        eps = float(np.finfo(dtype).eps)
        g.cmp("machine_epsilon", g.call(fn, dtype), eps, tol=0,
              known=machine_epsilon_mistakes(dtype, eps))


def check_smallest_lost_power_of_ten(fn, g):
    for dtype in DTYPES:
        g.start(f"{dtype.__name__}")
        # the first 10^-k <= eps/2 rounds away
        k = math.ceil(-math.log10(float(np.finfo(dtype).eps) / 2))
        got = g.call(fn, dtype)
        g.cmp("k", got, k, tol=0, known=smallest_lost_power_of_ten_mistakes(dtype, k))
        if not isinstance(got, (int, np.integer)):
            g.fail(f"k is {got!r}, a {type(got).__name__}: return an int (count k = 1, 2, ... in "
                   f"an int)")


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def machine_epsilon_mistakes(dtype, eps):
    return [(eps / 2,
             "that is eps/2, the first step that is lost: return the last e with 1 + e != 1"),
            (2 * eps, "that is 2 eps: keep halving while 1 + e/2 still differs from 1")] + \
        [(float(np.finfo(other).eps),
          f"that is {other.__name__}'s eps: add in the dtype asked for, dtype(1) + dtype(e / 2), "
          f"not in Python floats or another dtype")
         for other in DTYPES if other is not dtype]


def smallest_lost_power_of_ten_mistakes(dtype, k):
    known = [(k - 1,
              "that power of ten still changes 1: you want the first k where it no longer does"),
             (k + 1, "one past it: 10^-k is already lost at that k; return the first k where 1 + "
                     "10^-k == 1")]
    if k != 16:
        known.append((16, "16 is float64's answer: add in the dtype asked for, dtype(1) + "
                          "dtype(10.0 ** -k)"))
    if dtype is not np.float32:
        known.append(
            (8, "8 is float32's answer: add in the dtype asked for, dtype(1) + dtype(10.0 ** -k)"))
    return known


ITEMS = [("machine_epsilon", check_machine_epsilon),
         ("smallest_lost_power_of_ten", check_smallest_lost_power_of_ten)]
