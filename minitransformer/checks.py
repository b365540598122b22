"""Argument checks shared by the whole package: a value is an integer or a finite real number in a
range, or a ValueError of one sentence naming its owner and the argument ("Adam: lr must be a finite
number in [0.0, inf), got -1.0"). What every layer calls where an argument enters it.
Left out on purpose: a schema language; each check is one call.
"""
import math
import numbers

import numpy as np


class SettingError(ValueError):
    """A bad value of one setting, as data: `owner` ("Adam"), `setting` ("lr"), `value`; str() is the
    sentence ("Adam: lr must be ..."). The command line maps `setting` to its option (cli/common.py)
    without reading the message."""

    def __init__(self, owner, setting, message, value=None):
        super().__init__(f"{owner}: {message}")
        self.owner, self.setting, self.value, self.message = owner, setting, value, message


def fail(owner, msg, setting=None, value=None):
    raise SettingError(owner, setting, msg, value)


def check_int(owner, name, value, low, high=None, allow_none=False):
    """value is an int (not a bool) in [low, high] (high None: no bound), or None when allowed."""
    if value is None and allow_none:
        return
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        fail(owner, f"{name} must be an integer of at least {low}, got {value!r}", name, value)
    if high is not None and value > high:
        fail(owner, f"{name} must be at most {high:,}, got {value!r}", name, value)


def check_real(owner, name, value, low, high=math.inf, low_open=False, high_open=True, allow_none=False):
    """value is a finite real number in the interval [low, high) (ends open or closed as given), or None."""
    if value is None and allow_none:
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        fail(owner, f"{name} must be a finite number in {interval}, got {value!r}", name, value)
