"""Checkpoints: one .npz of named arrays plus a JSON entry, read without pickle, written atomically;
and checkpoint averaging (section 6.1: "averaging the last 5 checkpoints").

Inside the .npz:
    model/<name>   the model's parameters (Module.state_dict(): a shared matrix is stored once)
    optim/<name>   the optimizer's arrays (Adam's moments: optim/m.3, optim/v.3 for parameter 3)
    meta.json      a uint8 array holding the UTF-8 bytes of one JSON object: format, version, the
                   model config (TransformerConfig.to_dict()), step, optimizer scalars, batch-stream
                   position, seed, the tokenizer (its JSON file, embedded) and its path, metrics.
The run directory of a training run is rundir.py's. Left out on purpose: sharded files, saving on a background thread, other dtypes than the model's.
"""
import json
import os
import zipfile
from dataclasses import dataclass, field

import numpy as np

from .fileio import atomic_write

FORMAT, VERSION = "minitransformer-checkpoint", 1
META_KEY = "meta.json"


class CheckpointError(ValueError):
    """A checkpoint file that is missing, damaged, or does not fit the model it is loaded into."""


@dataclass
class Checkpoint:
    """What a checkpoint file holds: meta (a dict from JSON), model and optim (name -> NumPy array)."""
    meta: dict
    model: dict
    optim: dict = field(default_factory=dict)
    path: str = None

    @property
    def step(self):
        return self.meta.get("step", 0)


# ---------------------------------------------------------------- writing
def save(path, model_state, meta, optim_arrays=None):
    """Write a checkpoint: model_state (name -> array), meta (a JSON-able dict), optim_arrays
    (name -> array, may be None). Returns the path."""
    arrays = {f"model/{k}": np.asarray(v) for k, v in model_state.items()}
    arrays.update({f"optim/{k}": np.asarray(v) for k, v in (optim_arrays or {}).items()})
    for k, a in arrays.items():
        if a.dtype.kind not in "biuf":
            raise TypeError(f"checkpoint entry {k} holds {a.dtype} values; only numeric arrays are stored")
    meta = {**meta, "format": FORMAT, "version": VERSION}  # meta's own "format" never hides the real one
    text = json.dumps(meta, allow_nan=False, sort_keys=True)
    arrays[META_KEY] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return atomic_write(path, lambda f: np.savez(f, **arrays))


# ---------------------------------------------------------------- reading
def load(path):
    """Read a checkpoint into a Checkpoint; a missing or damaged file raises CheckpointError."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"{path} is a directory, not a checkpoint file" if os.path.isdir(path) else
                              f"checkpoint not found: {path}")
    try:
        with open(path, "rb") as f:  # np.load reads any other file as a pickle, and refuses it as one
            head = f.read(6)
    except OSError as e:                                                  # no permission to read it
        raise CheckpointError(f"{path} cannot be read: {e.strerror}") from None
    if not head.startswith(b"PK") and head != b"\x93NUMPY":
        raise CheckpointError(f"{path} is not a readable checkpoint (.npz written by minitransformer): it is "
                              f"not a zip archive")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (.npz written by minitransformer): "
                              f"{type(e).__name__}: {e}") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):                      # a lone .npy array, renamed
        raise CheckpointError(f"{path} holds a single array (.npy), not a checkpoint (.npz written by "
                              f"minitransformer)")
    try:
        with loaded as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (.npz written by minitransformer): "
                              f"{type(e).__name__}: {e}") from None
    if META_KEY not in arrays:
        raise CheckpointError(f"{path} is an .npz file but not a minitransformer checkpoint: it has no {META_KEY}")
    try:
        meta = json.loads(arrays.pop(META_KEY).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: its {META_KEY} entry is damaged ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a minitransformer checkpoint (its {META_KEY} lacks "
                              f'"format": "{FORMAT}")')
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path} has checkpoint version {meta.get('version')!r}; this code reads {VERSION}")
    model = {k[len("model/"):]: a for k, a in arrays.items() if k.startswith("model/")}
    optim = {k[len("optim/"):]: a for k, a in arrays.items() if k.startswith("optim/")}
    for kind, group in (("model", model), ("optim", optim)):
        for k, a in group.items():
            if a.dtype.kind != "f":
                raise CheckpointError(f"{path}: {kind}/{k} holds {a.dtype} values; a checkpoint holds floating "
                                      f"point arrays only")
            if not np.isfinite(a).all():
                raise CheckpointError(f"{path}: {kind}/{k} holds NaN or infinity; the run had diverged when "
                                      f"this was written: use an earlier checkpoint")
    return Checkpoint(meta, model, optim, path)


def average(paths):
    """A Checkpoint whose model arrays are the element-wise mean of the inputs' (summed in float64,
    stored in the inputs' dtype), with the meta of the last input and no optimizer state.

    Every parameter is averaged once: state_dict() lists a shared matrix under one name. Refused
    (CheckpointError): checkpoints of another model configuration or tokenizer, two of the same step.
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TypeError(f"average takes a list of checkpoint files, got one: {os.fsdecode(paths)}")
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise CheckpointError("average needs at least one checkpoint")
    first = load(paths[0])
    total = {k: a.astype(np.float64) for k, a in first.model.items()}
    steps = {first.meta.get("step"): paths[0]}
    for p in paths[1:]:
        ck = load(p)
        for key, what in (("config", "model configurations"), ("tokenizer", "tokenizers")):
            if ck.meta.get(key) != first.meta.get(key):
                raise CheckpointError(f"cannot average {p} with {paths[0]}: their {what} differ")
        step = ck.meta.get("step")
        if step is not None and step in steps:
            raise CheckpointError(f"{p} and {steps[step]} both hold step {step}: the same checkpoint twice "
                                  f"(checkpoint_best.npz is a copy of one) would weigh twice in the average")
        steps[step] = p
        if set(ck.model) != set(total):
            diff = sorted(set(ck.model) ^ set(total))
            raise CheckpointError(f"cannot average {p} with {paths[0]}: their parameters differ ({', '.join(diff[:5])})")
        for k, a in ck.model.items():
            if a.shape != total[k].shape:
                raise CheckpointError(f"cannot average {p} with {paths[0]}: {k} has shape {a.shape}, "
                                      f"not {total[k].shape}")
            total[k] += a
        last = ck
    last = last if len(paths) > 1 else first
    mean = {k: (t / len(paths)).astype(first.model[k].dtype) for k, t in total.items()}
    meta = dict(last.meta, averaged_from=paths, optimizer=None, iterator=None)
    return Checkpoint(meta, mean, {}, None)


def average_files(paths, out):
    """average(paths), written to `out` (a checkpoint for translation, not for resuming)."""
    ck = average(paths)
    meta = {k: v for k, v in ck.meta.items() if k not in ("format", "version")}
    return save(out, ck.model, meta)


# ---------------------------------------------------------------- tokenizer inside the checkpoint
def tokenizer_to_json(tokenizer):
    """The text of the tokenizer's JSON file (BPE.to_json), to embed in a checkpoint."""
    return tokenizer.to_json()


def tokenizer_from_json(text, source="the checkpoint"):
    """The inverse of tokenizer_to_json: a BPE; errors name `source`."""
    from .bpe import BPE
    return BPE.from_json(text, f"the tokenizer embedded in {source}")


def load_model(path, tokenizer_path=None):
    """(model in eval mode on the current backend, tokenizer, Checkpoint) from a checkpoint file.

    The tokenizer is the one embedded in the checkpoint, unless tokenizer_path is given.
    """
    from .transformer import Transformer, TransformerConfig
    ck = load(path)
    if "config" not in ck.meta:
        raise CheckpointError(f"{ck.path} holds no model config")
    try:
        model = Transformer(TransformerConfig.from_dict(ck.meta["config"]))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{ck.path}: its model config is damaged ({e})") from None
    try:
        model.load_state_dict(ck.model)
    except ValueError as e:
        raise CheckpointError(f"{ck.path}: {e}") from None
    model.eval()
    if tokenizer_path is not None:
        from .bpe import BPE
        tokenizer = BPE.load(tokenizer_path)
    elif ck.meta.get("tokenizer"):
        tokenizer = tokenizer_from_json(ck.meta["tokenizer"], ck.path)
    else:
        raise CheckpointError(f"{ck.path} embeds no tokenizer: give one with --tokenizer")
    if tokenizer.vocab_size != model.config.vocab_size:
        source = tokenizer_path or f"the tokenizer embedded in {ck.path}"
        raise CheckpointError(f"{source} has {tokenizer.vocab_size:,} ids but the model in {ck.path} was built "
                              f"for {model.config.vocab_size:,}: they do not belong together")
    return model, tokenizer, ck
