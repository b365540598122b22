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
import tokenize
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..config import MAX_FLOATS, TransformerConfig, count_parameters
from ..text.fileio import MAX_JSON_BYTES, atomic_write, parse_json

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
# Validate first, then allocate: the zip directory's sizes are checked against the file itself
# (every member's packed bytes lie inside the file; all members inflate to at most MAX_INFLATION
# times the file, or SMALL_ARCHIVE bytes: float weights barely compress, so more is a zip bomb),
# every member's .npy header (its shape and dtype) against the member's size, and the arrays' total
# against the size the config implies, before any array is read; meta.json is parsed with
# fileio.parse_json's bounds. MAX_META_BYTES: meta.json with a large tokenizer embedded.
# DEFLATE_RATIO: the most deflate can shrink data; a member that claims more is a lie.
MAX_META_BYTES = MAX_JSON_BYTES
DEFLATE_RATIO = 1032
MAX_INFLATION = 16
SMALL_ARCHIVE = 1 << 26
MAX_MEMBERS = 1 << 17
# what reading a cut or crafted .npy header can raise (its dict is parsed by ast.literal_eval)
HEADER_ERRORS = (ValueError, SyntaxError, tokenize.TokenError, TypeError, KeyError, EOFError,
                 RecursionError, MemoryError, OverflowError)


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
        except HEADER_ERRORS as e:
            reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            raise CheckpointError(f"{path}: {name} has a damaged array header ({reason})") from None
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
        meta = parse_json(text.decode("utf-8"), MAX_META_BYTES)
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: its {META_KEY} entry is damaged ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a minitransformer checkpoint (its {META_KEY} lacks "
                              f'"format": "{FORMAT}")')
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path} has checkpoint version {str(meta.get('version'))[:20]}; "
                              f"this code reads {VERSION}")
    _check_meta(meta, path)
    return meta


# meta's fields that every reader uses, and the JSON kinds they may have (None: absent or null)
META_KINDS = {"config": (dict,), "tokenizer": (str,), "optimizer": (dict,), "iterator": (dict,),
              "training": (dict,), "averaged_from": (list,)}


def _check_meta(meta, path):
    """meta's shared fields of the right JSON kind: step a whole number, config an object, ...;
    else a CheckpointError naming the file and the field (before average or resume uses it)."""
    step = meta.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise CheckpointError(f"{path} holds a damaged {META_KEY}: its step is "
                              f"{json.dumps(step)[:40]}, not a whole number of at least 0")
    for key, kinds in META_KINDS.items():
        if meta.get(key) is not None and not isinstance(meta[key], kinds):
            raise CheckpointError(f"{path} holds a damaged {META_KEY}: its {key} is "
                                  f"{json.dumps(meta[key])[:40]}, not a JSON "
                                  f"{'object' if kinds == (dict,) else kinds[0].__name__}")


def _check_optimizer(headers, meta, path):
    """The optimizer state is whole: a step count per parameter, Adam's m and v (of the model's
    dtype and of one shape) for every parameter that has taken a step and for no other; else a
    CheckpointError (resuming would fill the missing moments with zeros, or a float16 copy would
    round every update). Malformed scalars are resume.check_resume_data's to name."""
    scalars = meta.get("optimizer")
    optim = {k[len("optim/"):]: h for k, h in headers.items() if k.startswith("optim/")}
    counts = scalars.get("t") if scalars else None
    n = scalars.get("n_params") if scalars else None
    if not (isinstance(counts, list) and isinstance(n, int)):
        if optim and scalars is None:
            raise CheckpointError(f"{path} holds optimizer arrays but no optimizer state")
        return
    where = f"{path} holds damaged optimizer state"
    if len(counts) != n:
        raise CheckpointError(f"{where}: {len(counts):,} step counts for {n:,} parameters")
    expected = {f"{k}.{i}" for i, t in enumerate(counts) if t for k in "mv"}
    if set(optim) != expected:
        missing = sorted(expected - set(optim))
        what = (f"optim/{missing[0]} is missing (parameter {missing[0][2:]} has taken steps)"
                if missing else f"optim/{sorted(set(optim) - expected)[0]} belongs to no "
                "parameter that has taken a step")
        raise CheckpointError(f"{where}: {what}; resuming would not continue the run")
    dtypes = {h[1] for k, h in headers.items() if k.startswith("model/")}
    for name, (shape, dtype, *_) in sorted(optim.items()):
        other = optim["v" + name[1:] if name[0] == "m" else "m" + name[1:]]
        if len(dtypes) == 1 and dtype not in dtypes:
            raise CheckpointError(f"{where}: optim/{name} holds {dtype} values, but the model's "
                                  f"are {dtypes.pop()}")
        if other[0] != shape:
            raise CheckpointError(f"{where}: optim/{name} has shape {shape}, but its other moment "
                                  f"has {other[0]}")


def _check_archive(zf, path):
    """The zip directory does not lie about the file: every member's packed bytes lie inside it,
    none is encrypted, and all inflate to at most MAX_INFLATION times the file (or SMALL_ARCHIVE
    bytes)."""
    size = os.path.getsize(path)
    infos = zf.infolist()
    for info in infos:
        name = info.filename
        if info.flag_bits & 0x1:
            raise CheckpointError(f"{path}: its member {name} is encrypted; a checkpoint is a "
                                  "plain .npz that needs no password")
        if info.header_offset + info.compress_size > size:
            raise CheckpointError(f"{path}: its zip directory says {name} packs "
                                  f"{info.compress_size:,} bytes, more than the file's {size:,} "
                                  "(the file is cut short, or lies)")
    inflated = sum(i.file_size for i in infos)
    if inflated > max(MAX_INFLATION * size, SMALL_ARCHIVE):
        raise CheckpointError(f"{path}: its members inflate to {inflated:,} bytes from a file of "
                              f"{size:,}, more than {MAX_INFLATION} times its size (float weights "
                              "barely compress): a zip bomb")


def _check_sizes(headers, meta, path):
    """Floating point arrays only, as many model floats as the config implies (at most MAX_FLOATS
    without one), and at most two optimizer floats (Adam's m and v) per model float."""
    for k, (_, dtype, *_) in headers.items():
        if dtype.kind != "f" or dtype.itemsize < 4:
            raise CheckpointError(f"{path}: {k} holds {dtype} values; a checkpoint holds "
                                  "float32 or float64 arrays only")
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
        # no NumPy warning may come before the sentence
        with zipfile.ZipFile(path) as zf, warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return _read(zf, path)
    except CheckpointError:
        raise
    except MemoryError as e:
        raise CheckpointError(f"{path}: its arrays need more memory than this machine gives "
                              f"({str(e)[:100] or 'MemoryError'})") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, zlib.error,
            NotImplementedError, RuntimeError) as e:
        raise CheckpointError(f"{unreadable}: {type(e).__name__}: {str(e)[:200]}") from None


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
    _check_archive(zf, path)
    headers = {i.filename[:-len(".npy")]: _header(zf, i, path) for i in infos}
    if META_KEY not in headers:
        raise CheckpointError(f"{path} is an .npz file but not a minitransformer checkpoint: "
                              f"it has no {META_KEY}")
    meta = _read_meta(zf, headers.pop(META_KEY), path)
    _check_sizes(headers, meta, path)
    _check_optimizer(headers, meta, path)
    groups = {"model": {}, "optim": {}}
    for k, header in headers.items():
        a = _array(zf, k, header)
        if not np.isfinite(a).all():
            raise CheckpointError(f"{path}: {k} holds NaN or infinity; the run had diverged when "
                                  "this was written: use an earlier checkpoint")
        if a.dtype != np.float32 and a.size and np.abs(a).max() > np.finfo(np.float32).max:
            raise CheckpointError(f"{path}: {k} holds values past float32's range, in which the "
                                  "model computes: the file is damaged")
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
    with np.errstate(all="ignore"):    # an overflow is named below, not warned about
        mean = {k: (t / len(paths)).astype(first.model[k].dtype) for k, t in total.items()}
    for k, a in mean.items():
        if not np.isfinite(a).all():
            raise CheckpointError(f"the average of {paths[0]} ... {paths[-1]} overflows in {k}: "
                                  f"its values pass what {a.dtype} holds")
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
