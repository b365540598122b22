"""The run directory of a training run: checkpoint_<step>.npz files (names that sort by step) and
the best copy, of which the last `keep` that this run wrote are kept, log.jsonl, its one owner
(run.lock), and the check before a run starts in a directory (resume.py: what a checkpoint must
hold to continue the run; checkpoint.py: the file itself).

One owner: a run holds an flock on out_dir/run.lock while it writes there (git's index.lock,
SQLite's one writer). flock rather than a file made with O_EXCL: the kernel releases it when its
process dies, even by kill -9, so a lock is never left held by a dead run; the file says who holds
it ("pid host"), and a run that finds the file unlocked says once whose lock it takes over.
Left out on purpose: several runs sharing one directory, cloud storage, waiting for a lock.
"""
import contextlib
import errno
import fcntl
import glob
import json
import math
import os
import re
import shutil
import socket
import stat
import sys

import numpy as np

from .checkpoint import CheckpointError, save
from ..checks import check_int
from ..text.fileio import NAME_MAX, atomic_write, inside_target, remove_stale_temporaries

BEST = "checkpoint_best.npz"
LOCK = "run.lock"   # out_dir/run.lock: held (flock) by the run writing there; holds "pid host"
# what a fresh run would replace or mix with its own (the tokenizer only when it learns one)
LOG = "log.jsonl"    # out_dir/log.jsonl: a JSON object per line, appended
RUN_FILES = (BEST, LOG)
PATH_MAX = 4096      # bytes of a path, with its final NUL (Linux; macOS allows 1024)
# bytes of the longest name a run writes in out_dir: a step checkpoint's temporary (2**53 steps)
RUN_NAME_MAX = 64
# the real path of a run directory -> the descriptor of its run.lock that this process holds
_held = {}
# run.lock paths whose loss (deleted or replaced while held) was said
_lost = set()


def checkpoint_path(out_dir, step):
    """out_dir/checkpoint_<step, 7 digits>.npz: names sort by step."""
    return os.path.join(out_dir, f"checkpoint_{int(step):07d}.npz")


def step_of(path):
    """The step in a checkpoint file's name: step_of("runs/x/checkpoint_0000300.npz") -> 300."""
    return int(re.search(r"checkpoint_(\d+)\.npz$", os.fspath(path)).group(1))


def list_checkpoints(out_dir):
    """The step checkpoints in out_dir, oldest first (checkpoint_best.npz is not among them)."""
    paths = [p for p in glob.glob(os.path.join(out_dir, "checkpoint_*.npz"))  # not checkpoint_avg_5
             if re.fullmatch(r"checkpoint_\d+\.npz", os.path.basename(p))]
    return sorted(paths, key=step_of)


def check_new_run(out_dir, what, hint="", tokenizer=None):
    """Before a new run in out_dir: it holds no file of an earlier run that the new one would mix
    with its own or replace (a step checkpoint, checkpoint_best.npz, log.jsonl, and `tokenizer`,
    the name of the tokenizer file the run will learn, when it learns one); else a CheckpointError
    naming `what`, then `hint` ("continue that run (--resume auto), or "), then the ways out."""
    if not os.path.isdir(out_dir):
        return
    latest = [os.path.basename(p) for p in list_checkpoints(out_dir)[-1:]]
    names = latest + list(RUN_FILES) + [tokenizer]
    found = [name for name in names if name and os.path.lexists(os.path.join(out_dir, name))]
    if found:
        raise CheckpointError(f"{what} {out_dir} already holds {found[0]} of an earlier run: "
                         f"{hint}move its files away, or choose another output directory")


@contextlib.contextmanager
def owning(out_dir):
    """Hold out_dir/run.lock for the with-block (made with the directory if need be; nested blocks
    of one process share it): a CheckpointError at once, naming the process and host, when a live
    run holds it. A lock left by a process that ended without releasing it is taken over, said
    once on stderr. On exit the lock file is removed (and out_dir, when this made it and nothing
    else was written). out_dir None: nothing to hold (a run that writes no files, a rank of a
    data-parallel run but 0)."""
    key = None if out_dir is None else os.path.realpath(out_dir)
    if key is None or key in _held:
        yield
        return
    check_run_path(out_dir, "the run folder")
    made = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, LOCK)
    _held[key] = _lock(path)
    try:
        log = os.path.join(out_dir, LOG)
        if os.path.lexists(log):  # a FIFO or a link out, planted: named now, before any work
            os.close(open_own(inside_target(log), os.O_RDONLY))
        yield
    finally:
        # still holding it: a run that opened the old file sees it gone and tries again
        if held_still(out_dir):
            os.unlink(path)
        _lost.discard(path)
        os.close(_held.pop(key))
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(out_dir)  # only when empty


def held_still(out_dir):
    """Whether out_dir/run.lock is still the file this process locked (owning). When it was
    deleted or replaced meanwhile (another run may then start there), says so once on stderr, and
    locks a new one if no other run holds it; the run goes on, its files its own, to its
    checkpoint. True where this process holds no lock of out_dir."""
    key = os.path.realpath(out_dir)
    path = os.path.join(out_dir, LOCK)
    fd = _held.get(key)
    with contextlib.suppress(OSError):
        if fd is None or os.path.samestat(os.fstat(fd), os.lstat(path)):
            return True
    if path not in _lost:
        _lost.add(path)
        print(f"warning: {path} was removed or replaced while this run held it, so another run "
              f"could start writing in {out_dir}; this run goes on and ends with its checkpoint",
              file=sys.stderr)
        with contextlib.suppress(CheckpointError, OSError):  # a new lock, unless another run's
            _held[key] = _lock(path)
            os.close(fd)
            _lost.discard(path)
    return False


def open_own(path, flags):
    """A descriptor of `path` opened with `flags`, never through a link and never waiting on a
    FIFO; it must be a regular file with one name. A FIFO, a device, a folder, or a file with
    another hard link (a name that may lie outside the run's folder, which writing would change
    too) is a CheckpointError naming it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise
        what = "a symbolic link" if e.errno == errno.ELOOP else "not a regular file"
        raise CheckpointError(f"{path} is {what}, not a file of a run: remove it, or choose "
                              "another output directory") from None
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        return fd
    os.close(fd)
    what = "is not a regular file (a FIFO, a device or a socket), so no run writes it"
    if stat.S_ISREG(info.st_mode):
        what = (f"has {info.st_nlink} names (hard links): writing it would change the file of "
                "another name, maybe outside the folder")
    raise CheckpointError(f"{path} {what}; remove it, or choose another output directory")


def check_run_path(out_dir, what):
    """Before any work, creating nothing: a run's files fit in out_dir, each part of its path at
    most NAME_MAX bytes and its whole path with the longest name a run writes there (RUN_NAME_MAX:
    a checkpoint's temporary) under PATH_MAX; else a CheckpointError naming `what`."""
    shown = _shortened(os.fspath(out_dir))
    for part in os.fspath(out_dir).split(os.sep):
        if len(os.fsencode(part)) > NAME_MAX:
            which = "" if part == os.fspath(out_dir) else f" {_shortened(part)} of it"
            raise CheckpointError(f"{what} {shown}: the name{which} is "
                                  f"{len(os.fsencode(part)):,} bytes long, more than the "
                                  f"{NAME_MAX} a file name may have")
    size = len(os.fsencode(os.path.abspath(out_dir)))
    if size + 1 + RUN_NAME_MAX >= PATH_MAX:
        raise CheckpointError(f"{what} {shown} is a path of {size:,} bytes: with the names of a "
                              f"run's files in it (up to {RUN_NAME_MAX}) it passes the "
                              f"{PATH_MAX - 1:,} bytes a path may have; choose a shorter one")


def _shortened(text, keep=60):
    """text, or its first and last characters around "..." when it is longer than `keep`."""
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 4:]}"


def _lock(path):
    """The descriptor of `path`, created if need be, flock-ed and holding "pid host"; see owning."""
    while True:
        fd = open_own(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, host = (os.read(fd, 300).decode("utf-8", "replace").split() + ["?", "?"])[:2]
            os.close(fd)
            raise CheckpointError(f"{os.path.dirname(path)} is in use by another run "
                                  f"(process {pid} on {host} holds {LOCK}): wait for it to end, "
                                  "or choose another output directory") from None
        if os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
            break
        os.close(fd)  # its holder removed it as we opened it: lock the new one
    old = os.read(fd, 300).decode("utf-8", "replace").split()
    if old:
        print(f"{path}: taking over the lock of process {old[0]} on {old[-1]}, "
              "which ended without releasing it", file=sys.stderr)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    return fd


class RunDirectory:
    """The checkpoints of one training run in out_dir: checkpoint_<step>.npz, of which the last
    `keep` that THIS run wrote are kept (files of other runs are never deleted), and
    checkpoint_best.npz, a copy of the one saved after the best evaluation.

        run = RunDirectory("runs/x", keep=5)
        run.check_start(step)        # before any work: no later checkpoint of another run there
        path = run.save(step, model_state, meta, optim_arrays, best=True)
        run.log({"step": step, "loss": 4.2})   # a line of out_dir/log.jsonl
    """

    def __init__(self, out_dir, keep):
        check_int("RunDirectory", "keep", keep, 1)
        self.out_dir = out_dir
        self.keep = int(keep)
        self.written = []  # step checkpoints this run wrote, oldest first

    def check_start(self, step):
        """Refuse (CheckpointError) a directory that holds a checkpoint of a later step than `step`,
        where this run starts: its files would be mixed with this run's and averaged with them.
        Also remove the temporaries that a killed save left behind (remove_stale_temporaries)."""
        later = [p for p in list_checkpoints(self.out_dir) if step_of(p) > step]
        if later:
            raise CheckpointError(
                f"{self.out_dir} already holds {os.path.basename(later[-1])}, a later step than "
                f"{step} where this run starts: continue that run (--resume auto), or move its "
                "checkpoints away, or choose another output directory")
        remove_stale_temporaries(self.out_dir)

    def save(self, step, model_state, meta, optim_arrays=None, best=False):
        """Write checkpoint_<step>.npz (atomically), copy it to checkpoint_best.npz when `best`,
        delete this run's step checkpoints beyond the last `keep`; returns the path written."""
        held_still(self.out_dir)  # run.lock lost: said once, taken again where it can be
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
        path = os.path.join(self.out_dir, LOG)
        try:  # a regular file of the folder only: a FIFO would hang, a hard link write elsewhere
            fd = open_own(inside_target(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            with open(fd, "a", encoding="utf-8") as f:
                f.write(json.dumps(jsonable(record)) + "\n")
        except OSError as e:  # a full disk: name the file
            raise OSError(e.errno, e.strerror, path) from None


def jsonable(x):
    """Tuples to lists, NaN/inf to strings, NumPy scalars to Python: strict json.dumps takes it."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x
