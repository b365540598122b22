"""The configurations: TransformerConfig, the model's hyperparameters with the paper's defaults and
named presets (base, big, small, tiny); SearchConfig, the settings of decoding (section 6.1); and
TrainingConfig, the settings of a training run (section 5), which holds the SearchConfig of its
evaluations. Each checks every field when made, so a bad value fails at once with one sentence
naming it, never later inside the work (a TrainingConfig, never at its first evaluation). Also
count_parameters(config), the model's size from the config alone.

One rule for the type of every field of the three: a field holds the plain Python type it declares,
so that what is made is what a checkpoint's JSON writes and reads back.
- int: a Python int or a NumPy integer (converted exactly: np.int64(16) -> 16), of size at most
  2**53 - 1 (float64 and JSON readers keep it exact); never a bool or a float, not even 16.0.
- float: a finite real number, int and NumPy's included, stored as float; never a bool, NaN or inf.
- bool: True or False (numpy.bool_ converted); never 0 or 1. str: a str.
- betas: a tuple or list of exactly two such floats, stored as a tuple.
Anything else is refused when the config is made, in one sentence naming the field.
Left out: a config file format of its own (JSON is enough).
"""
import dataclasses
import numbers

import numpy as np

from .checks import check_int, check_max_tokens, check_real, fail as _fail

# Upper bounds, so that a config from a file (a checkpoint, --config) cannot ask for more memory
# than any machine has before a single array exists. MAX_FLOATS: the floats a model holds (its
# parameters and the sinusoid tables), 2^31 = 8 GiB in float32 before gradients and Adam's two
# moments triple it (the big model holds 213M). MAX_LEN: attention holds max_len^2 scores per head
# and sentence (2^16: 16 GiB in float32). MAX_LAYERS per stack: each layer is dozens of Python
# objects and graph nodes, and the deepest Transformers trained have about 1,000 (DeepNet).
# MAX_BEAM: beam search scores beam_size x vocabulary candidates per sentence of a batch (256 x
# 37,000 x 64 sentences: 2.4 GB in float32).
MAX_FLOATS = 1 << 31
MAX_LEN = 1 << 16
MAX_LAYERS = 1 << 10
MAX_BEAM = 256
MAX_INT = (1 << 53) - 1  # any int field: exact in float64 and in every JSON reader


def _size(value):
    """A number as the error shows it: an integer of 400 digits by its length in bits (Python will
    not print one of over 4,300 digits)."""
    bits = value.bit_length() if isinstance(value, int) else 0
    return f"an integer of {bits:,} bits" if bits > 80 else repr(value)


def _exact(owner, config, limit=MAX_INT):
    """Refuse an int field past `limit` in absolute value: at the end of the checks, so that a
    field's own tighter bound speaks first; at the start (_plain) for one too long to print."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.type is int and type(value) is int and abs(value) > limit:
            _fail(owner, f"{field.name} must be at most 2**53 - 1 = {MAX_INT:,} in absolute value "
                  f"(integers are kept exact in float64 and JSON), got {_size(value)}",
                  field.name, value)


def _plain(owner, config):
    """Each field of `config` as the plain type it declares (the rule of the module's docstring), or
    one sentence naming it; None and values of another type pass to the field's own check."""
    for field in dataclasses.fields(config):
        name = field.name
        value = getattr(config, name)
        if field.type is int and isinstance(value, np.integer):
            value = int(value)
        if field.type is float and isinstance(value, numbers.Real) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:  # an int past float64's range
                _fail(owner, f"{name} must be a finite number, got {_size(value)}", name, value)
        if field.type is bool and not isinstance(value, (bool, np.bool_)):
            # a TransformerConfig is read from JSON (--config, checkpoints): JSON's spelling
            spelled = "true or false" if owner == "TransformerConfig" else "True or False"
            _fail(owner, f"{name} must be {spelled}, got {value!r}", name, value)
        if field.type is bool or field.type is str and isinstance(value, str):
            value = field.type(value)
        if field.type is tuple:  # betas
            if not isinstance(value, (tuple, list)) or len(value) != 2:
                _fail(owner, f"{name} must be a pair of numbers (beta1, beta2), got {value!r}",
                      name, value)
            for i, b in enumerate(value):
                check_real(owner, f"{name}[{i}]", b, 0.0, 1.0)
            value = tuple(map(float, value))
        object.__setattr__(config, name, value)  # SearchConfig is frozen
    _exact(owner, config, 1 << 4096)


@dataclasses.dataclass
class TransformerConfig:
    """Hyperparameters, with the paper's base model as the defaults (Table 3, first row)."""

    # the paper's shared EN-DE BPE vocabulary: set it to your tokenizer's
    vocab_size: int = 37000
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1           # P_drop: on embeddings + positions and on every sub-layer output
    # Note: not in the paper (tensor2tensor v2+ and the Annotated Transformer: 0.1)
    attention_dropout: float = 0.0
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
        def fail(msg, setting):
            _fail("TransformerConfig", msg, setting)
        _plain("TransformerConfig", self)
        for name in ("vocab_size", "d_model", "n_heads", "d_ff",
                     "n_encoder_layers", "n_decoder_layers", "max_len"):
            check_int("TransformerConfig", name, getattr(self, name), 1)
        deep = "deeper than any Transformer trained"
        limits = (("max_len", MAX_LEN, "attention holds max_len^2 scores per head and sentence"),
                  ("n_encoder_layers", MAX_LAYERS, deep),
                  ("n_decoder_layers", MAX_LAYERS, deep))
        for name, high, why in limits:
            if getattr(self, name) > high:
                fail(f"{name} must be at most {high:,}, got {getattr(self, name):,}: {why}", name)
        for name in ("pad_id", "bos_id", "eos_id"):
            check_int("TransformerConfig", name, getattr(self, name), 0)
        for name in ("dropout", "attention_dropout", "relu_dropout", "label_smoothing"):
            check_real("TransformerConfig", name, getattr(self, name), 0.0, 1.0)
        check_real("TransformerConfig", "layer_norm_eps", self.layer_norm_eps, 0.0, low_open=True)
        if self.d_model % self.n_heads:
            fail(f"d_model must split evenly across heads: {self.d_model} is not a multiple of "
                 f"n_heads={self.n_heads}", ("d_model", "n_heads"))
        if self.positional not in ("sinusoidal", "learned"):
            fail(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}",
                 "positional")
        if self.positional == "sinusoidal" and self.d_model % 2:
            fail("sinusoidal positions pair sines and cosines, so d_model must be even, "
                 f"got {self.d_model}", "d_model")
        tables = 0 if self.positional == "learned" else 2 * self.max_len * self.d_model
        floats = count_parameters(self) + tables
        if floats > MAX_FLOATS:
            sizes = ("vocab_size", "d_model", "d_ff",
                     "n_encoder_layers", "n_decoder_layers", "max_len")
            listed = ", ".join(f"{n} {getattr(self, n):,}" for n in sizes)
            fail(f"the model would hold {floats:,} floats ({listed}), over the limit of "
                 f"{MAX_FLOATS:,} (8 GiB in float32, before gradients and Adam's moments)", sizes)
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        if len(set(ids.values())) < 3:
            fail(f"pad_id, bos_id and eos_id must be three different tokens, got {ids}", tuple(ids))
        for name, value in ids.items():
            if not 0 <= value < self.vocab_size:
                fail(f"{name}={value} lies outside the vocabulary [0, {self.vocab_size})", name)
        _exact("TransformerConfig", self)

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
        """The paper's base model: D 512, F 2048, 8 heads, 6 + 6 layers, P_drop 0.1 (~65M)."""
        return cls._preset({}, overrides)

    @classmethod
    def big(cls, **overrides):
        """The paper's big model: D 1024, F 4096, 16 heads, P_drop 0.3 (about 213M parameters)."""
        return cls._preset(dict(d_model=1024, d_ff=4096, n_heads=16, dropout=0.3), overrides)

    @classmethod
    def small(cls, **overrides):
        """Not in the paper: D 256, F 1024, 8 heads, 3 + 3 layers, for a small corpus on one GPU."""
        sizes = dict(d_model=256, d_ff=1024, n_heads=8, n_encoder_layers=3, n_decoder_layers=3)
        return cls._preset(sizes, overrides)

    @classmethod
    def tiny(cls, **overrides):
        """Not in the paper: D 128, F 512, 4 heads, 2 + 2 layers, for toy tasks and CPU tests."""
        sizes = dict(d_model=128, d_ff=512, n_heads=4, n_encoder_layers=2, n_decoder_layers=2)
        return cls._preset(sizes, overrides)

    # ---------------------------------------------------------------- saving
    def to_dict(self):
        """A JSON-able dict (checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        """The inverse of to_dict; unknown keys are an error (a checkpoint of another version?)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            _fail("TransformerConfig.from_dict", f"unknown keys {unknown} (known: {sorted(known)})")
        return cls(**d)


STOPS = ("exact", "fast")  # beam search's ways to decide that a sentence is done (search.py)


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """How to decode, made once and taken by search, translation, evaluation, the Trainer and the
    command line; the defaults are the paper's (section 6.1: beam 4, alpha 0.6, outputs up to
    input length + 50). Frozen: a variant is dataclasses.replace(search, beam_size=1), checked
    again when made."""
    beam_size: int = 4             # k; 1 with nbest 1 is greedy search (translate_lines)
    alpha: float = 0.6             # length penalty lp(|Y|) = ((5 + |Y|) / 6) ** alpha
    # at most a * source length + b output tokens, then </s> is forced
    max_len_a: float = 1.0
    max_len_b: int = 50
    nbest: int = 1                 # hypotheses returned per sentence, best first
    stop: str = "exact"            # when a sentence is done: "exact" or "fast" (search.beam_search)

    def __post_init__(self):
        owner = "SearchConfig"
        _plain(owner, self)
        check_int(owner, "beam_size", self.beam_size, 1)
        if self.beam_size > MAX_BEAM:
            _fail(owner, f"beam_size must be at most {MAX_BEAM}, got {self.beam_size:,}: beam "
                  "search scores beam_size x vocabulary candidates per sentence of a batch",
                  "beam_size", self.beam_size)
        check_int(owner, "nbest", self.nbest, 1)
        if self.nbest > self.beam_size:
            _fail(owner, f"nbest ({self.nbest}) cannot exceed beam_size ({self.beam_size})",
                  ("nbest", "beam_size"), self.nbest)
        # the upper bounds: lp stays finite, and a |x| + b an int64
        check_real(owner, "alpha", self.alpha, 0.0, 10.0, high_open=False)
        check_real(owner, "max_len_a", self.max_len_a, 0.0, 1000.0, high_open=False)
        check_int(owner, "max_len_b", self.max_len_b, 0, 1_000_000)
        if self.max_len_a == 0 and self.max_len_b == 0:
            _fail(owner, "max_len_a and max_len_b are both 0: every translation would be empty",
                  ("max_len_a", "max_len_b"), 0)
        if self.stop not in STOPS:
            _fail(owner, f"stop must be one of {', '.join(map(repr, STOPS))}, not {self.stop!r}",
                  "stop", self.stop)
        _exact(owner, self)


@dataclasses.dataclass
class TrainingConfig:
    """The settings of a run; the defaults are the paper's where it gives one (section 5)."""
    max_tokens: int = 4096        # tokens per batch and side, padding included
    accum: int = 1                # batches per update (section 5.1: ~25,000 tokens per update)
    steps: int = None             # number of updates; or
    epochs: float = None          # passes over the training data (converted to updates)
    warmup_steps: int = 4000      # eq. (3)
    lr_scale: float = 1.0         # multiplies eq. (3) (Note: 1.0 in the paper)
    betas: tuple = (0.9, 0.98)    # section 5.3
    eps: float = 1e-9
    clip_norm: float = None       # Note: not in the paper; off by default
    eval_every: int = 1000        # steps between evaluations (0: only at the end)
    save_every: int = 1000        # steps between checkpoints (0: only at the end)
    keep: int = 5                 # step checkpoints kept on disk (the best one is kept besides)
    seed: int = 0                 # batch order and dropout
    # read the loss from the device every N steps (None: 1 on CPU, 20 on GPU)
    log_every: int = None
    search: SearchConfig = SearchConfig(beam_size=1)  # evaluation decoding: beam 1 is greedy search
    # translate only the first N validation sentences for BLEU (None: all)
    eval_sentences: int = None
    progress: bool = True         # the tqdm bar
    # GPU: each batch shape's update recorded once as a CUDA graph, then replayed
    cuda_graphs: bool = False

    def __post_init__(self):
        owner = "TrainingConfig"
        _plain(owner, self)
        if self.steps is None and self.epochs is None:
            _fail(owner, "give steps or epochs")
        check_int(owner, "steps", self.steps, 1, allow_none=True)
        check_real(owner, "epochs", self.epochs, 0.0, low_open=True, allow_none=True)
        check_max_tokens(owner, self.max_tokens)
        for name in ("accum", "warmup_steps", "keep"):
            check_int(owner, name, getattr(self, name), 1)
        for name in ("eval_every", "save_every", "seed"):
            check_int(owner, name, getattr(self, name), 0)
        for name in ("log_every", "eval_sentences"):
            check_int(owner, name, getattr(self, name), 1, allow_none=True)
        check_real(owner, "lr_scale", self.lr_scale, 0.0, low_open=True)
        check_real(owner, "clip_norm", self.clip_norm, 0.0, low_open=True, allow_none=True)
        check_real(owner, "eps", self.eps, 0.0)
        if self.cuda_graphs and (self.accum != 1 or self.clip_norm is not None):
            _fail(owner, "cuda_graphs replays one batch per update without clipping: give accum=1 "
                  f"and no clip_norm, got accum={self.accum}, clip_norm={self.clip_norm}",
                  ("cuda_graphs", "accum", "clip_norm"))
        if not isinstance(self.search, SearchConfig):
            _fail(owner, f"search must be a SearchConfig, got {self.search!r}",
                  "search", self.search)
        if self.search.nbest != 1:   # evaluation scores one translation per sentence
            _fail(owner, "search.nbest must be 1 (BLEU scores one translation per sentence), "
                  f"got {self.search.nbest}", "nbest", self.search.nbest)
        _exact(owner, self)


def count_parameters(config):
    """The number of trained scalars of Transformer(config), from the config alone (no arrays)."""
    c = config
    D = c.d_model
    d_ff = c.d_ff
    V = c.vocab_size
    attention = 4 * (D * D + D)                     # W^Q, W^K, W^V, W^O with biases
    ffn = D * d_ff + d_ff + d_ff * D + D            # W_1, b_1, W_2, b_2
    norm = 2 * D
    encoder = c.n_encoder_layers * (attention + ffn + 2 * norm) + (norm if c.norm_first else 0)
    decoder = c.n_decoder_layers * (2 * attention + ffn + 3 * norm) + (norm if c.norm_first else 0)
    embeddings = V * D if c.share_embeddings else 3 * V * D
    positions = 2 * c.max_len * D if c.positional == "learned" else 0
    return encoder + decoder + embeddings + positions
