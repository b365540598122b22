"""Starting ranks: how many a CPU run starts by default (threads of this process, run_threads), the
BLAS threads each rank of several processes gets, whether this process can start ranks with mpiexec
and its command line, and the warning when ranks would oversubscribe the cores. The ranks themselves,
their collectives and run_main: distributed.py.
"""
import importlib.util
import os
import shutil
import subprocess

from .distributed import ThreadWorld, world


def can_launch():
    """Whether this process can start ranks itself: an mpiexec on the PATH and mpi4py installed."""
    return shutil.which("mpiexec") is not None and importlib.util.find_spec("mpi4py") is not None


def default_ranks():
    """The ranks a CPU training run starts by default here, as threads (run_threads; examples/multi30k.py,
    benchmarks/train_step.py): 2 where the machine has 2 cores or more, else 1. Two ranks of one core each
    train faster than one rank whose passes are cut over both (small preset, 4,096 tokens an update:
    0.78-0.88x its step time; benchmarks/README.md): each rank runs all its passes on its own core, and no
    core waits for a hand-off from the other."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1


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


def thread_warning():
    """A warning when several processes share a machine and BLAS may start a thread per core in each
    (2 ranks x 2 threads on 2 cores slows both down), else None (rank threads: run_threads sets the BLAS)."""
    threads = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    if world().size == 1 or isinstance(world(), ThreadWorld) or any(os.environ.get(v) for v in threads):
        return None
    return (f"{world().size} ranks and no OMP_NUM_THREADS: each rank's BLAS may use every core; set it to "
            f"cores / ranks per machine, e.g. mpiexec -n 2 -genv OMP_NUM_THREADS 1 ...")
