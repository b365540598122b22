"""Data parallelism: N processes (ranks) train one model together. Every update, each rank runs
forward and backward on its own share of the update's batches, the ranks sum their gradients with
an Allreduce, and every rank then takes the very same Adam step, so the N copies of the model never
drift apart.

    mpiexec -n 2 python -m minitransformer train ...   # the world is read from mpiexec's environment
    launch("examples/multi30k.py", [...], 2)           # the same, started from a program (mpiexec found)

world() is this process's World: a LocalWorld (rank 0 of 1, every collective a no-op) unless the
process was started by mpiexec with more than one rank, else an MPIWorld over mpi4py's COMM_WORLD.
On the GPU backend the array sums go through NCCL (cupy.cuda.nccl, one process per GPU); MPI still
carries the few Python objects (a checkpoint's path, a tokenizer). run_main() ends every rank when
one fails (MPI_Abort): no rank is left waiting in a collective for a rank that is gone.
Why the sum of the ranks' gradients is the big batch's gradient, and where it is not: lesson 12.
Left out on purpose: model and pipeline parallelism, gradient compression, elastic worlds, and
overlapping the Allreduce with backward (docs/data_parallel.md measures what it could save).
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import traceback

import numpy as np

from . import backend

# what launchers tell a process about the size of its world: MPICH / Intel MPI / Slurm's PMI, Open MPI, MVAPICH
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
BUCKET_BYTES = 25 * 2**20   # gradient bytes per Allreduce call (PyTorch DDP's default bucket)
INSTALL_HINT = 'pip install -e ".[mpi]" (mpi4py and MPICH from wheels; a system MPI works too)'
NCCL_HINT = ('pip install -e ".[gpu-cuda12]" (or ".[gpu-cuda13]"), which brings NCCL as the nvidia-nccl-cu12 '
             '(nvidia-nccl-cu13) wheel')


class LocalWorld:
    """One process alone: rank 0 of 1. Every collective returns its input."""

    rank, size, local_rank = 0, 1, 0
    stopped_together = False  # set by the Trainer when every rank stopped after the same update

    @property
    def is_main(self):
        """Rank 0 writes checkpoints, the log and the progress bar, and evaluates."""
        return self.rank == 0

    def sum_(self, array, bucket_bytes=BUCKET_BYTES):
        """Sum a contiguous array over all ranks, in place; returns it."""
        return array

    def broadcast_(self, array):
        """Overwrite a contiguous array with rank 0's, in place; returns it."""
        return array

    def broadcast_object(self, obj):
        """Rank 0's obj (a small JSON-like Python object), on every rank."""
        return obj

    def barrier(self):
        """Wait until every rank has called it."""

    def bind_device(self):
        """One GPU per rank: make GPU local_rank the current one (nothing to do alone)."""


class MPIWorld(LocalWorld):
    """Rank `comm.rank` of `comm.size` processes on an mpi4py communicator."""

    def __init__(self, comm):
        from mpi4py import MPI
        self.MPI, self.comm = MPI, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()  # this rank among its machine's
        self._nccl = None

    def sum_(self, array, bucket_bytes=BUCKET_BYTES):
        """Sum over all ranks in place, BUCKET_BYTES at a time: a few calls per update instead of one
        per parameter (each call has a fixed latency), and none so large that it stalls the link."""
        flat = array.reshape(-1)                         # a view: the array must be contiguous
        step = max(bucket_bytes // flat.itemsize, 1)
        for lo in range(0, flat.size, step):
            part = flat[lo:lo + step]
            if not isinstance(part, np.ndarray):         # a CuPy array: NCCL, on the current stream
                comm, stream = self._nccl_comm(), backend.xp.cuda.get_current_stream().ptr
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
        """One GPU per rank, and NCCL checked before any work (every rank fails alike without it)."""
        if backend.device == "gpu":
            backend.select_gpu(self.local_rank)
            nccl()

    def abort(self, code):
        """End every rank of the world now with exit code `code` (MPI_Abort)."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(int(code))

    def _nccl_comm(self):
        """The NCCL communicator of the world's GPUs, made once: rank 0 makes its id, MPI sends it."""
        if self._nccl is None:
            lib = nccl()
            uid = self.comm.bcast(lib.get_unique_id() if self.rank == 0 else None, root=0)
            self._nccl = lib.NcclCommunicator(self.size, uid, self.rank)
        return self._nccl

    @staticmethod
    def _nccl_dtype(array):
        lib = nccl()
        return {np.float32: lib.NCCL_FLOAT32, np.float64: lib.NCCL_FLOAT64}[array.dtype.type]


def nccl():
    """CuPy's NCCL bindings (backend.nccl()), checked: CuPy imports them even where no NCCL library is
    installed, then without NcclCommunicator; a RuntimeError says what to install."""
    module = backend.nccl()
    if not getattr(module, "available", False) or not hasattr(module, "NcclCommunicator"):
        raise RuntimeError(f"summing gradients across GPUs needs NCCL, which CuPy did not find: {NCCL_HINT}")
    return module


def can_launch():
    """Whether this process can start ranks itself: an mpiexec on the PATH and mpi4py installed."""
    return shutil.which("mpiexec") is not None and importlib.util.find_spec("mpi4py") is not None


def default_ranks():
    """The ranks a CPU training run starts by default here (examples/multi30k.py; benchmarks/train_step.py
    times it so): 2 where mpiexec and mpi4py are installed and the machine has 2 cores or more, else 1.
    Two processes of one thread each train faster than one process of two threads (small preset, 4,096
    tokens an update: 0.78x its step time, the median of seven paired runs; benchmarks/README.md): each
    rank runs its own Python and all its passes on its own core, and no thread waits for another."""
    return 2 if (os.cpu_count() or 1) >= 2 and can_launch() else 1


def threads_per_rank(ranks):
    """BLAS threads for each of `ranks` processes on this machine: its cores shared out, at least one."""
    return max(1, (os.cpu_count() or 1) // ranks)


def mpiexec_command(ranks):
    """[mpiexec, -n, ranks], with the flag Open MPI asks for when run as root (else it refuses). Open MPI 4's
    mpiexec names itself "mpiexec (OpenRTE) 4.1.6" and links open-mpi.org; 5's says "Open MPI"."""
    mpiexec = shutil.which("mpiexec")
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    open_mpi = any(name in version for name in ("Open MPI", "OpenRTE", "open-mpi.org"))
    return [mpiexec, *["--allow-run-as-root"] * (open_mpi and os.geteuid() == 0), "-n", str(ranks)]


def launch(script, argv, ranks):
    """Run `python script *argv` as `ranks` processes under mpiexec, OMP_NUM_THREADS = cores / ranks (one
    BLAS thread per core); the exit code. A Ctrl-C reaches mpiexec too, which passes it to the ranks: they
    stop after the same update, with a checkpoint, while this process waits for them."""
    proc = subprocess.Popen([*mpiexec_command(ranks), sys.executable, str(script), *argv],
                            env={**os.environ, "OMP_NUM_THREADS": str(threads_per_rank(ranks))})
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def launched_size(environ=None):
    """How many processes the launcher started (1 when none did), read from its environment."""
    environ = os.environ if environ is None else environ
    for name in SIZE_VARIABLES:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return 1


_world = None


def world():
    """This process's World, made on the first call: an MPIWorld when mpiexec started more than one
    process (mpi4py is imported then, and only then), else a LocalWorld."""
    global _world
    if _world is None:
        size = launched_size()
        if size > 1:
            try:
                from mpi4py import MPI
            except ImportError:
                raise RuntimeError(f"this process is one of {size} started by mpiexec, but mpi4py is not "
                                   f"installed: {INSTALL_HINT}") from None
            _world = MPIWorld(MPI.COMM_WORLD)
        else:
            _world = LocalWorld()
    return _world


def sum_over_ranks(world, optimizer, loss, stops):
    """Sum an update over the ranks: the gradients in the optimizer's flat buffers (in place), the
    loss (a device scalar) and `stops` ([Ctrl-C, SIGTERM] seen on this rank, on the host: no wait for
    the GPU). Returns (the loss of the whole update, the stops seen by every rank)."""
    for flat in optimizer.gradient_buffers():
        world.sum_(flat)
    xp = backend.xp
    loss = world.sum_(xp.asarray(loss, dtype=xp.float32).reshape(1))[0]
    return loss, world.sum_(np.array(stops, dtype=np.int64))


def thread_warning():
    """A warning when several ranks share a machine and BLAS may start a thread per core in each
    (2 ranks x 2 threads on 2 cores slows both down), else None."""
    threads = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    if world().size == 1 or any(os.environ.get(v) for v in threads):
        return None
    return (f"{world().size} ranks and no OMP_NUM_THREADS: each rank's BLAS may use every core; set it to "
            f"cores / ranks per machine, e.g. mpiexec -n 2 -genv OMP_NUM_THREADS 1 ...")


def run_main(main, *args):
    """Run a program's main(*args) -> exit code as one rank of the world; returns the exit code.

    A rank that fails (an exception, a non-zero exit: bad input, a diverged loss, a signal) ends
    every rank with its code (MPI_Abort), after printing its own message: the others may be waiting
    in a collective for it, and would wait for ever."""
    try:
        code = main(*args)
    except SystemExit as e:                        # argparse's exit 2, sys.exit("message")
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:                          # a bug: its traceback, then every rank ends
        traceback.print_exc()
        code = 1
    code = code or 0
    if code and launched_size() > 1 and not (_world is not None and _world.stopped_together):
        try:
            here = world()
        except RuntimeError:                       # no mpi4py: every rank fails alike, none waits
            return code
        here.abort(code)
    return code
