"""Data parallelism: N ranks train one model together. Every update, each rank runs forward and
backward on its own share of the update's batches, the ranks sum their gradients with an Allreduce,
and every rank takes the very same Adam step, so the N copies never drift apart (rank threads hold
one copy, and each updates its 1/N of it: ThreadWorld).

    # processes, the world read from mpiexec's environment:
    mpiexec -n 2 python -m minitransformer train ...
    # threads of one process (examples/multi30k.py):
    run_threads(main, (argv,), 2)

world() is this process's World: a LocalWorld (rank 0 of 1, every collective a no-op) unless
mpiexec started it as one of several (an MPIWorld over mpi4py's COMM_WORLD) or it runs in a rank
thread of run_threads (a ThreadWorld: a core each, the same bits as MPI's ranks). On the GPU backend
the array sums go through NCCL (cupy.cuda.nccl, one process per GPU); MPI still carries the few
Python objects (a checkpoint's path, a tokenizer). run_main() ends every rank when one fails
(MPI_Abort, or the threads' barrier broken): no rank is left waiting in a collective for a rank that
is gone.
Why the sum of the ranks' gradients is the big batch's gradient, and where it is not: lesson 12.
Left out on purpose: model and pipeline parallelism, gradient compression, elastic worlds, and
overlapping the Allreduce with backward (docs/data_parallel.md measures what it could save).
"""
import copy
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

from .. import backend
from . import host

# what launchers tell a process about the size of its world: MPICH / Intel MPI / Slurm's PMI,
# Open MPI, MVAPICH
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
BUCKET_BYTES = 25 * 2**20   # gradient bytes per Allreduce call (PyTorch DDP's default bucket)
INSTALL_HINT = 'pip install -e ".[mpi]" (mpi4py and MPICH from wheels; a system MPI works too)'
NCCL_HINT = ('pip install -e ".[gpu-cuda12]" (or ".[gpu-cuda13]"): '
             "NCCL comes as the nvidia-nccl-cu12 (-cu13) wheel")


class LocalWorld:
    """One process alone: rank 0 of 1. Every collective returns its input."""

    rank = 0
    size = 1
    local_rank = 0
    stopped_together = False  # set by the Trainer when every rank stopped after the same update

    @property
    def is_main(self):
        """Rank 0 writes checkpoints, the log and the progress bar, and evaluates."""
        return self.rank == 0

    def sum_(self, array, bucket_bytes=BUCKET_BYTES, own_part=False):
        """Sum a contiguous array over all ranks, in place; returns it. own_part: only this rank's
        1/size of the elements need hold the sum (rank threads write no more; processes sum it
        all)."""
        return array

    def broadcast_(self, array):
        """Overwrite a contiguous array with rank 0's, in place; returns it."""
        return array

    def broadcast_object(self, obj):
        """Rank 0's obj (a small JSON-like Python object), on every rank."""
        return obj

    def barrier(self):
        """Wait until every rank has called it."""

    def share_(self, optimizer):
        """Whether the ranks now hold one copy of the optimizer's buffers (rank threads), each to
        update its part (Adam.use_buffers, Adam.part); processes cannot."""
        return False

    def bind_device(self):
        """One GPU per rank: make GPU local_rank the current one (nothing to do alone)."""


class MPIWorld(LocalWorld):
    """Rank `comm.rank` of `comm.size` processes on an mpi4py communicator."""

    def __init__(self, comm):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        # this rank among its machine's
        self.local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
        self._nccl = None

    def sum_(self, array, bucket_bytes=BUCKET_BYTES, own_part=False):
        """Sum over all ranks in place, BUCKET_BYTES at a time: a few calls per update instead of
        one per parameter (each call has a fixed latency), and none so large that it stalls the
        link."""
        flat = array.reshape(-1)                         # a view: the array must be contiguous
        step = max(bucket_bytes // flat.itemsize, 1)
        for lo in range(0, flat.size, step):
            part = flat[lo:lo + step]
            if not isinstance(part, np.ndarray):         # a CuPy array: NCCL, on the current stream
                comm = self._nccl_comm()
                stream = backend.xp.cuda.get_current_stream().ptr
                comm.allReduce(part.data.ptr, part.data.ptr, part.size, self._nccl_dtype(part),
                               nccl().NCCL_SUM, stream)
            else:
                self.comm.Allreduce(self.MPI.IN_PLACE, part, op=self.MPI.SUM)
        return array

    def broadcast_(self, array):
        flat = array.reshape(-1)
        if not isinstance(flat, np.ndarray):
            stream = backend.xp.cuda.get_current_stream().ptr
            self._nccl_comm().bcast(flat.data.ptr, flat.size, self._nccl_dtype(flat), 0, stream)
        else:
            self.comm.Bcast(flat, root=0)
        return array

    def broadcast_object(self, obj):
        return self.comm.bcast(obj, root=0)

    def barrier(self):
        self.comm.Barrier()

    def bind_device(self):
        """One GPU per rank, and NCCL checked before any work (every rank fails alike without
        it)."""
        if backend.device == "gpu":
            backend.select_gpu(self.local_rank)
            nccl()

    def abort(self, code):
        """End every rank of the world with exit code `code` (MPI_Abort), half a second after this
        rank's output is flushed: mpiexec forwards it first (an abort at once can lose a rank's
        message)."""
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.5)
        self.comm.Abort(int(code))

    def _nccl_comm(self):
        """The NCCL communicator of the world's GPUs, made once: rank 0 makes its id, MPI sends
        it."""
        if self._nccl is None:
            lib = nccl()
            uid = self.comm.bcast(lib.get_unique_id() if self.rank == 0 else None, root=0)
            self._nccl = lib.NcclCommunicator(self.size, uid, self.rank)
        return self._nccl

    @staticmethod
    def _nccl_dtype(array):
        lib = nccl()
        return {np.float32: lib.NCCL_FLOAT32, np.float64: lib.NCCL_FLOAT64}[array.dtype.type]


class ThreadWorld(LocalWorld):
    """Rank `rank` of `size` threads of one process (run_threads): each runs its own model on its
    own core, and the collectives meet at a barrier. A sum adds the ranks' arrays in rank order,
    each rank summing its 1/size of the elements into every rank's array (own_part: into its own
    only): the same bits on every rank, and for 2 ranks MPI's (a + b is b + a). share_ gives every
    rank rank 0's weights and moments, one copy that each rank updates its 1/size of
    (Adam.use_buffers, Adam.part): half the Adam work and the sum's writes of 2 ranks, one copy's
    memory (benchmarks/README.md, 'Training step')."""

    def __init__(self, rank, size, shared):
        self.rank = rank
        self.size = size
        self.local_rank = rank
        self._shared = shared

    # every rank's value, in rank order, until the next barrier
    def _gather(self, value):
        self._shared["slots"][self.rank] = value
        self.barrier()
        return self._shared["slots"]

    def sum_(self, array, bucket_bytes=BUCKET_BYTES, own_part=False):
        # views: the arrays must be contiguous
        flats = [a.reshape(-1) for a in self._gather(array)]
        part = slice(array.size * self.rank // self.size, array.size * (self.rank + 1) // self.size)
        total = functools.reduce(np.add, (flat[part] for flat in flats))   # (a0 + a1) + a2 ...
        for flat in [flats[self.rank]] if own_part else flats:
            flat[part] = total
        self.barrier()                              # every part written before any rank goes on
        return array

    def broadcast_(self, array):
        first = self._gather(array)[0]
        if self.rank:
            array[...] = first
        self.barrier()
        return array

    def broadcast_object(self, obj):
        first = self._gather(obj)[0]
        self.barrier()
        return copy.deepcopy(first) if self.rank else first   # each rank its own, as MPI's copies

    def share_(self, optimizer):
        first = self._gather(optimizer)[0]      # rank 0's optimizer: its buffers for every rank
        if optimizer is not first:
            optimizer.use_buffers(first)
        optimizer.part = (self.rank, self.size)  # each rank's step updates its 1/N of them
        self.barrier()
        return True

    def barrier(self):
        try:
            self._shared["barrier"].wait()
        except threading.BrokenBarrierError:    # another rank failed (abort): end this one
            raise SystemExit(1) from None

    # the ranks at a barrier, or the next to reach one, exit
    def abort(self, code):
        self._shared["barrier"].abort()


def run_threads(main, args, ranks):
    """main(*args) as `ranks` ranks of one process, one thread each (rank 0 on this thread, for the
    signals), each with the BLAS on one thread (host.blas_threads): data parallel without
    mpiexec. Returns the exit code: 0, or the first failing rank's (run_main; a failure ends every
    rank). At most max_rank_threads() ranks."""
    if not 1 <= ranks <= max_rank_threads():
        raise ValueError(f"run_threads: ranks must be between 1 and {max_rank_threads()} (2 per "
                         f"core of this machine's {os.cpu_count() or 1}), got {ranks}")
    shared = {"barrier": threading.Barrier(ranks), "slots": [None] * ranks}
    codes = [0] * ranks

    def rank(r):
        _here.world = ThreadWorld(r, ranks, shared)
        try:
            codes[r] = run_main(main, *args)
        finally:
            _here.world = None
    with host.blas_threads(1):
        # daemons: a rank left behind never keeps the process from ending
        others = [threading.Thread(target=rank, args=(r,), name=f"rank {r}", daemon=True)
                  for r in range(1, ranks)]
        try:
            for thread in others:
                thread.start()
            rank(0)
        except BaseException:  # a signal before rank 0 could run: no rank may wait for it
            shared["barrier"].abort()
            raise
        for thread in others:
            thread.join()
    return next((code for code in codes if code), 0)


def step_seed(seed, step, rank=0):
    """The dropout seed of one update on one rank, a function of (seed, step, rank) alone: resuming
    at any step replays the same dropout masks, and each rank of a data-parallel run draws its own.
    step_seed(0, 1) != step_seed(0, 2) != step_seed(1, 1) != step_seed(0, 1, rank=1)."""
    return int(np.random.SeedSequence([int(seed), int(step)] + ([int(rank)] if rank else []))
               .generate_state(1)[0])


def start_together(world, optimizer):
    """Every rank starts from rank 0's weights; returns whether the ranks now hold one copy of the
    optimizer's buffers, each rank updating its part (rank threads: share_)."""
    for flat in optimizer.flat.values():
        world.broadcast_(flat["data"])
    return world.share_(optimizer)


def nccl():
    """CuPy's NCCL bindings (backend.nccl()), checked: CuPy imports them even where no NCCL library
    is installed, then without NcclCommunicator; a RuntimeError says what to install."""
    module = backend.nccl()
    if not getattr(module, "available", False) or not hasattr(module, "NcclCommunicator"):
        raise RuntimeError("summing gradients across GPUs needs NCCL, which CuPy did not find: "
                           f"{NCCL_HINT}")
    return module


def launched_size(environ=None):
    """How many processes the launcher started (1 when none did), read from its environment."""
    environ = os.environ if environ is None else environ
    for name in SIZE_VARIABLES:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return 1


_world = None
_here = threading.local()   # .world: this thread's ThreadWorld, in a rank of run_threads


def world():
    """In a rank thread of run_threads, its ThreadWorld; else this process's World, made on the
    first call: an MPIWorld when mpiexec started several processes (mpi4py imported then, and only
    then), else a LocalWorld."""
    global _world
    if getattr(_here, "world", None) is not None:
        return _here.world
    if _world is None:
        size = launched_size()
        if size > 1:
            try:
                from mpi4py import MPI
            except ImportError:
                raise RuntimeError(f"this process is one of {size} started by mpiexec, but mpi4py "
                                   f"is not installed: {INSTALL_HINT}") from None
            _world = MPIWorld(MPI.COMM_WORLD)
        else:
            _world = LocalWorld()
    return _world


def sum_over_ranks(world, optimizer, loss, stops, own_part=False):
    """Sum an update over the ranks: the gradients in the optimizer's flat buffers (in place;
    own_part: only in this rank's part, ThreadWorld.sum_), the loss (a device scalar) and `stops`
    ([Ctrl-C, SIGTERM] seen on this rank, on the host: no wait for the GPU). Returns (the loss of
    the whole update, the stops seen by every rank)."""
    for flat in optimizer.gradient_buffers():
        world.sum_(flat, own_part=own_part)
    xp = backend.xp
    loss = world.sum_(xp.asarray(loss, dtype=xp.float32).reshape(1))[0]
    return loss, world.sum_(np.array(stops, dtype=np.int64))


def run_main(main, *args):
    """Run a program's main(*args) -> exit code as one rank of the world; returns the exit code.

    A rank that fails (an exception, a non-zero exit: bad input, a diverged loss, a signal) ends
    every rank with its code (MPI_Abort), after printing its own message: the others may be waiting
    in a collective for it, and would wait for ever. Ctrl-C and SIGTERM: the first stops main (a
    KeyboardInterrupt; host.StopSignals), later ones are only noted: exit 130 or 143, one line."""
    signals = host.StopSignals()
    try:
        signals.catch()
        code = main(*args)
    except SystemExit as e:                        # argparse's exit 2, sys.exit("message")
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt as e:                 # a signal after main's own handling of one
        print("terminated (SIGTERM)" if isinstance(e, host.Terminated) else "interrupted",
              file=sys.stderr)
        code = host.exit_code(e)
    except BaseException:                          # a bug: its traceback, then every rank ends
        traceback.print_exc()
        code = 1
    finally:
        signals.stopping = True
        signals.release()
    code = code or 0
    # a rank thread: the barrier ends the others
    if getattr(_here, "world", None) is not None:
        if code and not _here.world.stopped_together:
            _here.world.abort(code)
        return code
    if code and launched_size() > 1 and not (_world is not None and _world.stopped_together):
        try:
            here = world()
        except RuntimeError:                       # no mpi4py: every rank fails alike, none waits
            return code
        here.abort(code)
    return code


# -------------------------------------------------------------------- starting ranks

def can_launch():
    """Whether this process can start ranks itself: an mpiexec on the PATH and mpi4py installed."""
    return shutil.which("mpiexec") is not None and importlib.util.find_spec("mpi4py") is not None


def default_ranks():
    """The ranks a CPU training run starts by default here, as threads (run_threads;
    examples/multi30k.py, benchmarks/train_step.py): 2 where the machine has 2 cores or more,
    else 1. NumPy runs an elementwise pass on one core: two ranks of one core each, the BLAS on
    one thread each, keep both cores busy on every pass and meet only at the gradient sum."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def max_rank_threads():
    """The most rank threads one process starts (run_threads, `train --ranks`): 2 per core here.
    More would only wait for a core, each holding its own activations and gradients."""
    return 2 * (os.cpu_count() or 1)


def threads_per_rank(ranks):
    """BLAS threads for each of `ranks` processes on this machine: its cores shared out, at least
    one."""
    return max(1, (os.cpu_count() or 1) // ranks)


def mpiexec_command(ranks):
    """[mpiexec, -n, ranks], with the flag Open MPI asks for when run as root (else it refuses).
    Open MPI 4's mpiexec names itself "mpiexec (OpenRTE) 4.1.6" and links open-mpi.org; 5's says
    "Open MPI"."""
    mpiexec = shutil.which("mpiexec")
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    open_mpi = any(name in version for name in ("Open MPI", "OpenRTE", "open-mpi.org"))
    return [mpiexec, *["--allow-run-as-root"] * (open_mpi and os.geteuid() == 0), "-n", str(ranks)]


def thread_warning():
    """A warning when several processes share a machine and BLAS may start a thread per core in each
    (2 ranks x 2 threads on 2 cores slows both down), else None (rank threads: run_threads sets the
    BLAS)."""
    threads = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    if world().size == 1 or isinstance(world(), ThreadWorld) or any(os.environ.get(v)
                                                                   for v in threads):
        return None
    return (f"{world().size} ranks and no OMP_NUM_THREADS: each rank's BLAS may use every core; "
            f"set it to cores / ranks per machine, e.g. mpiexec -n 2 -genv OMP_NUM_THREADS 1 ...")
