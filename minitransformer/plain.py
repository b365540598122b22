"""The plain form of every fast path: the algorithms as a reader first meets them, in lesson order.

Each function here is the shortest correct code for one idea, built only from the engine's elementary
Tensor ops (autograd gives its gradients) or plain NumPy, never from a fast path. Each fast version in
functional.py, attention.py, optim.py and search.py names its plain form here, and the test suite holds
the two equal. Read this page first; read the fast code when you want to know where the time went.
Left out on purpose: speed (no fused backward, no flat buffers, no cache, one sentence at a time).
"""
import numpy as np

from . import backend
from .tensor import Tensor, tensor


# -------------------------------------------------------------------- softmax and friends (lesson 04)


# -------------------------------------------------------------------- attention (lesson 06)


# -------------------------------------------------------------------- Adam and the schedule (lesson 09)


# -------------------------------------------------------------------- decoding (lesson 10)
