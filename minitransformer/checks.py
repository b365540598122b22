"""Argument checks shared by the whole package: a value is an integer or a finite real number in a
range, or a ValueError of one sentence naming its owner and the argument ("Adam: lr must be a finite
number in [0.0, inf), got -1.0"). What every layer calls where an argument enters it.

Errors are data: a SettingError carries the owner, the setting and the value; a FileError the file
and the line. The command line names its option or file from these fields, never from the message.
Left out on purpose: a schema language; each check is one call.
"""
import math
import numbers
import re

import numpy as np


class SettingError(ValueError):
    """A bad value of a setting, as data: `owner` ("Adam"), `setting` ("lr"; a tuple of names when a
    combination is at fault, ("max_len_a", "max_len_b"); None when no setting is), `value`,
    `message` (the sentence without the owner, naming the settings as spelled in `setting`); str()
    is "Adam: lr must be ...". The command line calls renamed() to name its options instead."""

    def __init__(self, owner, setting, message, value=None):
        super().__init__(f"{owner}: {message}")
        self.owner = owner
        self.setting = setting
        self.value = value
        self.message = message

    def renamed(self, names):
        """The message without the owner, each of the error's settings called by its name in
        `names`: SettingError("Adam", "lr", "lr must be ...").renamed({"lr": "--lr"}) gives
        "--lr must be ..."."""
        settings = (self.setting,) if isinstance(self.setting, str) else self.setting or ()
        message = self.message
        for setting in settings:
            if setting in names:  # the word itself, not a part of another: steps, not warmup_steps
                word = rf"(?<![\w-]){re.escape(setting)}(?![\w-])"
                message = re.sub(word, names[setting], message)
        return message


class FileError(ValueError):
    """A fault in an input, as data: `path` (None while only the caller knows the file; "-" is
    stdin), `line` (1-based, or None for the whole file), `message` (what is wrong, after the file
    and line); str() is "train.de: line 3 is not valid UTF-8 (...)", or "line 3 has 300 tokens, ..."
    without a path. The caller that knows the file names it with in_file(path)."""

    def __init__(self, path, line, message):
        where = [] if path is None else ["stdin" if path == "-" else str(path)]
        where += [] if line is None else [f"line {line}"]
        super().__init__(": ".join(where) + " " + message if where else message)
        self.path = path
        self.line = line
        self.message = message

    def in_file(self, path):
        """The same error, naming the file `path`."""
        return FileError(path, self.line, self.message)


def fail(owner, msg, setting=None, value=None):
    """Raise SettingError(owner, setting, msg, value); msg: one sentence, the setting first."""
    raise SettingError(owner, setting, msg, value)


def check_int(owner, name, value, low, high=None, allow_none=False):
    """value is an int (not a bool) in [low, high] (high None: no bound), or None when allowed."""
    if value is None and allow_none:
        return
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        fail(owner, f"{name} must be an integer of at least {low}, got {value!r}", name, value)
    if high is not None and value > high:
        fail(owner, f"{name} must be at most {high:,}, got {value!r}", name, value)


def check_real(owner, name, value, low, high=math.inf,
               low_open=False, high_open=True, allow_none=False):
    """value is a finite real number in [low, high) (ends open or closed as given), or None."""
    if value is None and allow_none:
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        ok = above and below
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        fail(owner, f"{name} must be a finite number in {interval}, got {value!r}", name, value)


def check_max_tokens(owner, max_tokens):
    """A batch's token budget, the one check for every place that takes one (batching,
    TrainingConfig): an integer >= 1."""
    check_int(owner, "max_tokens", max_tokens, 1)


def check_ids(ids, V, what="embedding", of="embeddings"):
    """Refuse ids outside [0, V), naming one, if they are on the host (on the GPU it would sync)."""
    if type(ids) is np.ndarray and ids.size and (ids.min() < 0 or ids.max() >= V):
        bad = ids[(ids < 0) | (ids >= V)][0]
        raise ValueError(f"{what}: id {int(bad)} is out of range for {V} {of} "
                         f"(ids must lie in [0, {V}))")


def check_target(t, shape, n_classes, ignore_index):
    """Integer target of the logits' shape without the class axis, ids in [0, V) or ignore_index."""
    if t.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold integer class ids, got dtype {t.dtype}")
    if t.shape != shape:
        raise ValueError(f"cross_entropy: target shape {tuple(t.shape)} must equal the logits' "
                         f"shape without the last (class) axis, {tuple(shape)}")
    if type(t) is np.ndarray and t.size:       # on the GPU the check would synchronise every step
        ids = t[t != ignore_index] if ignore_index is not None else t
        if ids.size and (ids.min() < 0 or ids.max() >= n_classes):
            bad = ids[(ids < 0) | (ids >= n_classes)][0]
            allowed = f"[0, {n_classes})"
            if ignore_index is not None:
                allowed += f" or equal ignore_index={ignore_index}"
            raise ValueError(f"cross_entropy: target id {int(bad)} is out of range for "
                             f"{n_classes} classes (ids must lie in {allowed})")


def check_mask(mask, q, k):
    """Attention's mask: a boolean array that broadcasts to the scores' shape (B, H, Tq, Tk) of
    queries q (B, H, Tq, K) and keys k (B, H, Tk, K), or one sentence saying what it is."""
    scores = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    if mask.dtype != bool:
        additive = (" (for an additive mask of 0 and -inf, pass mask == 0)"
                    if mask.dtype.kind == "f" else "")
        raise TypeError("attention: the mask must be boolean, True where attention is allowed, "
                        f"got dtype {mask.dtype}{additive}")
    if len(mask.shape) > len(scores) or any(n not in (1, m)
                                            for n, m in zip(mask.shape[::-1], scores[::-1])):
        raise ValueError(f"attention: a mask of shape {tuple(mask.shape)} does not broadcast to "
                         f"the scores' (B, H, Tq, Tk) = {tuple(scores)}")
