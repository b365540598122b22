"""TransformerConfig: the model's hyperparameters as one dataclass with the paper's defaults and named
presets (base, big, small, tiny), JSON round trips for checkpoints, and count_parameters(config), the
model's size computed from the config alone. Left out: a config file format of its own (JSON is enough).
"""
import dataclasses

import numpy as np


@dataclasses.dataclass
class TransformerConfig:
    """Hyperparameters, with the paper's base model as the defaults (Table 3, first row)."""

    vocab_size: int = 37000        # the paper's shared EN-DE BPE vocabulary: set it to your tokenizer's
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1           # P_drop: on embeddings + positions and on every sub-layer output
    attention_dropout: float = 0.0  # Note: not in the paper (tensor2tensor v2+ and the Annotated Transformer: 0.1)
    relu_dropout: float = 0.0      # Note: not in the paper (as above): dropout after the FFN's ReLU
    max_len: int = 1024            # longest sequence the position table covers
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    label_smoothing: float = 0.1   # eps_ls
    norm_first: bool = False       # Note: True is pre-LN, not in the paper
    positional: str = "sinusoidal"  # or "learned" (Table 3 row E)
    share_embeddings: bool = True  # Note: False unties source, target and output matrices
    layer_norm_eps: float = 1e-6   # the paper gives none; tensor2tensor's value

    def __post_init__(self):
        def fail(msg):
            raise ValueError(f"TransformerConfig: {msg}")
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_encoder_layers", "n_decoder_layers", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                fail(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            fail(f"d_model must split evenly across heads: {self.d_model} is not a multiple of n_heads={self.n_heads}")
        if self.positional not in ("sinusoidal", "learned"):
            fail(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            fail(f"sinusoidal positions pair sines and cosines, so d_model must be even, got {self.d_model}")
        for name in ("dropout", "attention_dropout", "relu_dropout", "label_smoothing"):
            if not 0.0 <= getattr(self, name) < 1.0:
                fail(f"{name} must lie in [0, 1), got {getattr(self, name)!r}")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        if len(set(ids.values())) < 3:
            fail(f"pad_id, bos_id and eos_id must be three different tokens, got {ids}")
        for name, value in ids.items():
            if not 0 <= value < self.vocab_size:
                fail(f"{name}={value} lies outside the vocabulary [0, {self.vocab_size})")
        if not self.layer_norm_eps > 0:
            fail(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")

    @property
    def d_k(self):
        return self.d_model // self.n_heads

    # ---------------------------------------------------------------- presets
    @classmethod
    def _preset(cls, defaults, overrides):
        if "n_layers" in overrides:  # one number for both stacks
            n = overrides.pop("n_layers")
            overrides.setdefault("n_encoder_layers", n)
            overrides.setdefault("n_decoder_layers", n)
        return cls(**{**defaults, **overrides})

    @classmethod
    def base(cls, **overrides):
        """The paper's base model: D 512, F 2048, 8 heads, 6 + 6 layers, P_drop 0.1 (about 65M parameters)."""
        return cls._preset({}, overrides)

    @classmethod
    def big(cls, **overrides):
        """The paper's big model: D 1024, F 4096, 16 heads, P_drop 0.3 (about 213M parameters)."""
        return cls._preset(dict(d_model=1024, d_ff=4096, n_heads=16, dropout=0.3), overrides)

    @classmethod
    def small(cls, **overrides):
        """Not in the paper: D 256, F 1024, 8 heads, 3 + 3 layers, for a small corpus on one GPU."""
        return cls._preset(dict(d_model=256, d_ff=1024, n_heads=8, n_encoder_layers=3, n_decoder_layers=3), overrides)

    @classmethod
    def tiny(cls, **overrides):
        """Not in the paper: D 128, F 512, 4 heads, 2 + 2 layers, for toy tasks and tests on a CPU."""
        return cls._preset(dict(d_model=128, d_ff=512, n_heads=4, n_encoder_layers=2, n_decoder_layers=2), overrides)

    # ---------------------------------------------------------------- saving
    def to_dict(self):
        """A JSON-able dict (checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        """The inverse of to_dict; unknown keys are an error (a checkpoint from another version?)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"TransformerConfig.from_dict: unknown keys {unknown} (known: {sorted(known)})")
        return cls(**d)


def count_parameters(config):
    """The number of trained scalars of Transformer(config), from the config alone (no arrays)."""
    c = config
    D, d_ff, V = c.d_model, c.d_ff, c.vocab_size
    attention = 4 * (D * D + D)                     # W^Q, W^K, W^V, W^O with biases
    ffn = D * d_ff + d_ff + d_ff * D + D            # W_1, b_1, W_2, b_2
    norm = 2 * D
    encoder = c.n_encoder_layers * (attention + ffn + 2 * norm) + (norm if c.norm_first else 0)
    decoder = c.n_decoder_layers * (2 * attention + ffn + 3 * norm) + (norm if c.norm_first else 0)
    embeddings = V * D if c.share_embeddings else 3 * V * D
    positions = 2 * c.max_len * D if c.positional == "learned" else 0
    return encoder + decoder + embeddings + positions
