"""Lesson 01, backend: machine_epsilon and smallest_lost_power_of_ten, per dtype (float16, float32,
float64), against np.finfo(dtype).eps; both answers must be exact."""
import math

import numpy as np


def check_machine_epsilon(fn, g):
    for dtype in (np.float16, np.float32, np.float64):
        g.start(f"{dtype.__name__}")
        eps = float(np.finfo(dtype).eps)
        g.cmp("machine_epsilon", g.call(fn, dtype), eps, tol=0, known=machine_epsilon_mistakes(eps))


def check_smallest_lost_power_of_ten(fn, g):
    for dtype in (np.float16, np.float32, np.float64):
        g.start(f"{dtype.__name__}")
        k = math.ceil(-math.log10(float(np.finfo(dtype).eps) / 2))   # the first 10^-k <= eps/2 rounds away
        g.cmp("k", g.call(fn, dtype), k, tol=0, known=smallest_lost_power_of_ten_mistakes(k))


# -------------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def machine_epsilon_mistakes(eps):
    return [(eps / 2, "that is eps/2, the first step that is lost: return the last e with 1 + e != 1"),
            (2 * eps, "that is 2 eps: keep halving while 1 + e/2 still differs from 1")]


def smallest_lost_power_of_ten_mistakes(k):
    known = [(k - 1, "that power of ten still changes 1: you want the first k where it no longer does")]
    if k != 16:
        known.append((16, "16 is float64's answer: add in the dtype asked for, dtype(1) + dtype(10.0 ** -k)"))
    return known


ITEMS = [("machine_epsilon", check_machine_epsilon),
         ("smallest_lost_power_of_ten", check_smallest_lost_power_of_ten)]
