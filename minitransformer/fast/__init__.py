"""The speed wing: whole-op alternatives to the lesson modules' NumPy bodies, each with the same
signature and the same numbers, chosen here in one place. A lesson module reaches one through a
single seam line at the top of its op, and below it reads as its derivation:

    if fast.on(x):                     # the GPU, its fused kernels on (backend.fused)
        return fast.softmax(x)

The CPU has none: on it every op runs its NumPy body (benchmarks/README.md, 'The CPU's path', says
why nothing else paid its way there). docs/architecture.md draws the wing.
"""
from .kernels import active as on  # noqa: F401
from .kernels import (adam, cross_entropy, dropout, embedding_backward,  # noqa: F401
                      forward_rows, layer_norm, log_softmax, relu, softmax)
from .gpu import attention_backward, attention_forward, linear, multi_head_attention  # noqa: F401
