"""minitransformer: the Transformer of "Attention Is All You Need", from scratch on NumPy/CuPy.

Public names only; docs/architecture.md has the layout. `mt.use("gpu")` switches every later op
to CuPy.
"""
from .run.host import quiet_loading as _quiet_loading

_quiet_loading()  # Ctrl-C or SIGTERM while `python -m minitransformer` loads: one line, 130 or 143
from . import backend
from .backend import use, to_numpy, seed
from .tensor import Tensor, tensor, no_grad, is_grad_enabled, concat, stack, where
from .gradcheck import gradcheck, GradcheckError
from .profiler import profile
from . import functional, nn, optim, plain
from .text import data, bpe
from .attention import scaled_dot_product_attention, padding_mask, causal_mask
from .multihead import MultiHeadAttention
from .transformer import Transformer, TransformerConfig
from .config import SearchConfig
from . import search, viz
from .run import checkpoint
from .run.training import Trainer, TrainingConfig, TrainingError

__version__ = "0.1.0"
