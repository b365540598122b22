"""Checkpoints: one .npz of named arrays plus a JSON entry, read without pickle, written
atomically; and checkpoint averaging (section 6.1: "averaging the last 5 checkpoints").

Inside the .npz:
    model/<name>   the model's parameters (Module.state_dict(): a shared matrix is stored once)
    optim/<name>   the optimizer's arrays (Adam's moments: optim/m.3, optim/v.3 for parameter 3)
    meta.json      a uint8 array holding the UTF-8 bytes of one JSON object: format, version, the
                   model config (TransformerConfig.to_dict()), step, optimizer scalars,
                   batch-stream position, seed, the tokenizer (its JSON file, embedded) and its
                   path, metrics.
The run directory of a training run is rundir.py's. Left out on purpose: sharded files, saving on
a background thread, other dtypes than the model's.
"""
import json
import math
import os
import zipfile
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..config import MAX_FLOATS, TransformerConfig, count_parameters
from ..text.fileio import atomic_write

FORMAT = "minitransformer-checkpoint"
VERSION = 1
META_KEY = "meta.json"


class CheckpointError(ValueError):
    """A checkpoint file that is missing, damaged, or does not fit the model it is loaded into."""


@dataclass
class Checkpoint:
    """What a checkpoint file holds: meta (a dict from JSON), model and optim (name -> array)."""
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
            raise TypeError(f"checkpoint entry {k} holds {a.dtype} values; "
                            "only numeric arrays are stored")
    # meta's own "format" never hides the real one
    meta = {**meta, "format": FORMAT, "version": VERSION}
    text = json.dumps(meta, allow_nan=False, sort_keys=True)
    arrays[META_KEY] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return atomic_write(path, lambda f: np.savez(f, **arrays))


# ---------------------------------------------------------------- reading
# Validate first, then allocate: every member's .npy header (its shape and dtype) is read and
# checked against the member's size in the zip directory, and the arrays' total against the size
# the config implies, before any array is read. MAX_META_BYTES: meta.json with a tokenizer of the
# most ids embedded. DEFLATE_RATIO: the most deflate can shrink data; a member that claims more is
# a zip bomb or a lie.
MAX_META_BYTES = 1 << 28
DEFLATE_RATIO = 1032
MAX_MEMBERS = 1 << 17


def _header(zf, info, path):
    """(shape, dtype, fortran order, where the data starts) of the .npy member `info`, from its
    header alone (no data is read), checked to declare exactly the bytes the member holds."""
    name = info.filename[:-len(".npy")]
    if info.file_size > DEFLATE_RATIO * max(info.compress_size, 1):
        raise CheckpointError(f"{path}: {name} claims {info.file_size:,} bytes packed into "
                              f"{info.compress_size:,}, more than compression can reach "
                              "(a zip bomb)")
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            read = {(1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                raise ValueError(f".npy version {version}")
            shape, fortran, dtype = read[version](f)
        except ValueError as e:
            raise CheckpointError(f"{path}: {name} has a damaged array header ({e})") from None
        start = f.tell()
    size = math.prod(shape) * dtype.itemsize
    if dtype.hasobject or start + size != info.file_size:
        raise CheckpointError(f"{path}: {name} declares {shape} {dtype} values ({size:,} bytes) "
                              f"but holds {info.file_size - start:,} bytes")
    return shape, dtype, fortran, start


def _array(zf, name, header):
    """The array of member `name` whose header _header checked, read in chunks of 256 KiB (as
    np.load does) without parsing its header again."""
    shape, dtype, fortran, start = header
    array = np.empty(math.prod(shape), dtype)
    view = memoryview(array).cast("B")
    with zf.open(name + ".npy") as f:
        f.seek(start)
        for i in range(0, len(view), 1 << 18):
            chunk = view[i:i + (1 << 18)]
            if f.readinto(chunk) != len(chunk):
                raise EOFError(f"{name} ends early")
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


def _read_meta(zf, header, path):
    """The meta.json member as a dict (size and kind checked first)."""
    shape, dtype = header[:2]
    if dtype != np.uint8 or len(shape) != 1 or shape[0] > MAX_META_BYTES:
        raise CheckpointError(f"{path}: its {META_KEY} entry is damaged (it must be at most "
                              f"{MAX_META_BYTES:,} bytes of text, got {shape} {dtype})")
    text = _array(zf, META_KEY, header).tobytes()
    try:
        meta = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: its {META_KEY} entry is damaged ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a minitransformer checkpoint (its {META_KEY} lacks "
                              f'"format": "{FORMAT}")')
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path} has checkpoint version {meta.get('version')!r}; "
                              f"this code reads {VERSION}")
    return meta


def _check_sizes(headers, meta, path):
    """Floating point arrays only, as many model floats as the config implies (at most MAX_FLOATS
    without one), and at most two optimizer floats (Adam's m and v) per model float."""
    for k, (_, dtype, *_) in headers.items():
        if dtype.kind != "f":
            raise CheckpointError(f"{path}: {k} holds {dtype} values; "
                                  "a checkpoint holds floating point arrays only")
    held = {kind: sum(math.prod(h[0]) for k, h in headers.items() if k.startswith(kind + "/"))
            for kind in ("model", "optim")}
    expected = MAX_FLOATS
    if meta.get("config") is not None:
        try:
            expected = count_parameters(TransformerConfig.from_dict(meta["config"]))
        except (ValueError, TypeError) as e:
            raise CheckpointError(f"{path}: its model config is damaged ({e})") from None
        if held["model"] != expected:
            raise CheckpointError(f"{path}: its model config implies {expected:,} parameters but "
                                  f"its arrays hold {held['model']:,}: the file is damaged or its "
                                  "config is not its model's")
    if held["model"] > expected or held["optim"] > 2 * expected:
        raise CheckpointError(f"{path} holds {held['model']:,} model and {held['optim']:,} "
                              f"optimizer floats, more than the {expected:,} (and twice as many) "
                              "a checkpoint may hold")


def load(path):
    """Read a checkpoint into a Checkpoint; a missing, damaged or hostile file raises
    CheckpointError before any array is allocated (each member's header against its size, the
    arrays against the config)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise CheckpointError(f"{path} is a directory, not a checkpoint file")
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        # np.load reads any other file as a pickle, and refuses it as one
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as e:                                    # no permission to read it
        raise CheckpointError(f"{path} cannot be read: {e.strerror}") from None
    unreadable = f"{path} is not a readable checkpoint (.npz written by minitransformer)"
    if head == b"\x93NUMPY":                                # a lone .npy array, renamed
        raise CheckpointError(f"{path} holds a single array (.npy), not a checkpoint "
                              "(.npz written by minitransformer)")
    if not head.startswith(b"PK"):
        raise CheckpointError(f"{unreadable}: it is not a zip archive")
    try:
        with zipfile.ZipFile(path) as zf:
            return _read(zf, path)
    except CheckpointError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, zlib.error) as e:
        raise CheckpointError(f"{unreadable}: {type(e).__name__}: {e}") from None


def _read(zf, path):
    """load()'s work on the open zip: names, headers, meta and sizes checked; then the arrays."""
    infos = zf.infolist()
    names = [i.filename for i in infos]
    ours = [n for n in names if n.endswith(".npy")
            and (n == META_KEY + ".npy" or n.startswith(("model/", "optim/")))]
    if len(ours) != len(names) or len(set(names)) != len(names) or len(names) > MAX_MEMBERS:
        odd = sorted(set(names) - set(ours)) or sorted({n for n in names if names.count(n) > 1})
        what = f"{odd[0]!r}, which no checkpoint holds" if odd else f"{len(names):,} entries"
        raise CheckpointError(f"{path} is not a minitransformer checkpoint: it holds {what}")
    headers = {i.filename[:-len(".npy")]: _header(zf, i, path) for i in infos}
    if META_KEY not in headers:
        raise CheckpointError(f"{path} is an .npz file but not a minitransformer checkpoint: "
                              f"it has no {META_KEY}")
    meta = _read_meta(zf, headers.pop(META_KEY), path)
    _check_sizes(headers, meta, path)
    groups = {"model": {}, "optim": {}}
    for k, header in headers.items():
        a = _array(zf, k, header)
        if not np.isfinite(a).all():
            raise CheckpointError(f"{path}: {k} holds NaN or infinity; the run had diverged when "
                                  "this was written: use an earlier checkpoint")
        kind, name = k.split("/", 1)
        groups[kind][name] = a
    return Checkpoint(meta, groups["model"], groups["optim"], path)


def average(paths):
    """A Checkpoint whose model arrays are the element-wise mean of the inputs' (summed in float64,
    stored in the inputs' dtype), with the meta of the last input and no optimizer state.

    Every parameter is averaged once: state_dict() lists a shared matrix under one name.
    Refused (CheckpointError): checkpoints of another model configuration or tokenizer, two of
    the same step.
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
            raise CheckpointError(f"{p} and {steps[step]} both hold step {step}: the same "
                                  "checkpoint twice (checkpoint_best.npz is a copy of one) would "
                                  "weigh twice in the average")
        steps[step] = p
        if set(ck.model) != set(total):
            diff = ", ".join(sorted(set(ck.model) ^ set(total))[:5])
            raise CheckpointError(f"cannot average {p} with {paths[0]}: "
                                  f"their parameters differ ({diff})")
        for k, a in ck.model.items():
            if a.shape != total[k].shape:
                raise CheckpointError(f"cannot average {p} with {paths[0]}: "
                                      f"{k} has shape {a.shape}, not {total[k].shape}")
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
    from ..text.bpe import BPE
    if not isinstance(text, str):
        raise CheckpointError(f"{source}: its embedded tokenizer is damaged "
                              "(not the text of a tokenizer file)")
    return BPE.from_json(text, f"the tokenizer embedded in {source}")
