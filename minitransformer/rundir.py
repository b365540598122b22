"""The run directory of a training run: checkpoint_<step>.npz files (names that sort by step) and the
best copy, of which the last `keep` that this run wrote are kept, log.jsonl, the check before a run
starts in a directory, and the checks before resuming a checkpoint (checkpoint.py: the file itself).
Left out on purpose: several runs sharing one directory, cloud storage.
"""
import glob
import json
import math
import os
import re
import shutil

import numpy as np

from .checkpoint import CheckpointError, load, save
from .checks import check_int
from .fileio import TEMP_PREFIX, atomic_write

BEST = "checkpoint_best.npz"


def checkpoint_path(out_dir, step):
    """out_dir/checkpoint_<step, 7 digits>.npz: names sort by step."""
    return os.path.join(out_dir, f"checkpoint_{int(step):07d}.npz")


def step_of(path):
    """The step in a checkpoint file's name: step_of("runs/x/checkpoint_0000300.npz") -> 300."""
    return int(re.search(r"checkpoint_(\d+)\.npz$", os.fspath(path)).group(1))


def list_checkpoints(out_dir):
    """The step checkpoints in out_dir, oldest first (checkpoint_best.npz is not among them)."""
    paths = [p for p in glob.glob(os.path.join(out_dir, "checkpoint_*.npz"))
             if re.fullmatch(r"checkpoint_\d+\.npz", os.path.basename(p))]   # not checkpoint_avg_5.npz
    return sorted(paths, key=step_of)


def check_new_run(out_dir, what, hint=""):
    """Before a new run in out_dir: it holds no step checkpoint, which the run would mix with its own
    (and replace the tokenizer.json and log.jsonl beside it); else a ValueError naming `what`, then
    `hint` ("continue that run (--resume auto), or "), then the ways out."""
    found = list_checkpoints(out_dir) if os.path.isdir(out_dir) else []
    if found:
        raise ValueError(f"{what} {out_dir} already holds {os.path.basename(found[-1])} of an earlier run: "
                         f"{hint}move its checkpoints away, or choose another output directory")


class RunDirectory:
    """The checkpoints of one training run in out_dir: checkpoint_<step>.npz, of which the last
    `keep` that THIS run wrote are kept (files of other runs are never deleted), and
    checkpoint_best.npz, a copy of the one saved after the best evaluation.

        run = RunDirectory("runs/x", keep=5)
        run.check_start(step)        # before any work: no later checkpoint of another run in out_dir
        path = run.save(step, model_state, meta, optim_arrays, best=True)
        run.log({"step": step, "loss": 4.2})   # a line of out_dir/log.jsonl
    """

    def __init__(self, out_dir, keep):
        check_int("RunDirectory", "keep", keep, 1)
        self.out_dir, self.keep = out_dir, int(keep)
        self.written = []  # step checkpoints this run wrote, oldest first

    def check_start(self, step):
        """Refuse (CheckpointError) a directory that holds a checkpoint of a later step than `step`,
        where this run starts: its files would be mixed with this run's and averaged with them.
        Also remove temporaries that a killed save left behind."""
        later = [p for p in list_checkpoints(self.out_dir) if step_of(p) > step]
        if later:
            raise CheckpointError(
                f"{self.out_dir} already holds {os.path.basename(later[-1])}, a later step than {step} where "
                f"this run starts: continue that run (--resume auto), or move its checkpoints away, or choose "
                f"another output directory")
        for tmp in glob.glob(os.path.join(self.out_dir, f"{TEMP_PREFIX}*-checkpoint_*.npz")):
            os.remove(tmp)

    def save(self, step, model_state, meta, optim_arrays=None, best=False):
        """Write checkpoint_<step>.npz (atomically), copy it to checkpoint_best.npz when `best`,
        delete this run's step checkpoints beyond the last `keep`; returns the path written."""
        path = save(checkpoint_path(self.out_dir, step), model_state, meta, optim_arrays)
        if best:
            self.copy_to_best(path)
        if path not in self.written:
            self.written.append(path)
        while len(self.written) > self.keep:
            old = self.written.pop(0)
            if os.path.exists(old):
                os.remove(old)
        return path

    def copy_to_best(self, path):
        """Copy checkpoint `path` to out_dir/checkpoint_best.npz, atomically."""
        with open(path, "rb") as src:
            atomic_write(os.path.join(self.out_dir, BEST), lambda f: shutil.copyfileobj(src, f))

    def log(self, record):
        """Append record (a dict) to out_dir/log.jsonl as one line of strict JSON."""
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, "log.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(jsonable(record)) + "\n")


def jsonable(x):
    """Tuples to lists, NaN/inf to strings, NumPy scalars to Python: what json.dumps accepts strictly."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def load_resumable(path, model_config, tokenizer_json=None):
    """load(path), checked to continue a run of a model with config dict `model_config` (and, when
    given, the tokenizer whose JSON text is tokenizer_json): CheckpointError otherwise."""
    ck = load(path)
    for key in ("config", "optimizer", "iterator", "step"):
        if ck.meta.get(key) is None:
            raise CheckpointError(f"{path} cannot be resumed from: it has no {key} "
                                  f"(an averaged checkpoint is for translation only)")
    if ck.meta["config"] != model_config:
        raise CheckpointError(f"{path} was saved for another model configuration")
    saved = ck.meta.get("tokenizer")
    if saved and tokenizer_json is not None and saved != tokenizer_json:
        raise CheckpointError(f"{path} was trained with another tokenizer than the one given")
    return ck
