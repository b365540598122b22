"""The host process's settings for training: the BLAS's threads (one for each rank thread, whose
other ranks have the other cores), the C heap keeping freed arrays for the next update, and the
signals (Ctrl-C, SIGTERM) that stop a run after a whole update. None changes a number: only which
core runs a GEMM, where an array lives and when a run stops.
"""
import contextlib
import ctypes
import re
import signal
import threading

_blas = None  # [(set_num_threads, get_num_threads)] of the OpenBLAS libraries loaded, once found


def _openblas():
    """[(set_num_threads, get_num_threads)] of every OpenBLAS loaded in this process (NumPy's, and
    SciPy's where it is imported), empty where none is found (not Linux, another BLAS)."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted(set(re.findall(r"\S*openblas\S*\.so\S*", f.read())))
    except OSError:
        return []
    found = []
    for path in paths:
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("", "64_", "_64"):
                set_n = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                get_n = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if set_n and get_n:
                    set_n.argtypes = [ctypes.c_int]
                    set_n.restype = None
                    get_n.restype = ctypes.c_int
                    found.append((set_n, get_n))
    return found


@contextlib.contextmanager
def blas_threads(n):
    """The BLAS (OpenBLAS, what NumPy's wheels carry) on `n` threads inside the block, on as many as
    before after it: rank threads (distributed.run_threads) each run their GEMMs on their own core,
    where a BLAS with a thread per core would have each rank's GEMMs fight for both. Elsewhere
    (another BLAS) nothing changes."""
    global _blas
    if _blas is None:                            # looked for once: the libraries stay loaded
        _blas = _openblas()
    blas = [(set_n, get_n()) for set_n, get_n in _blas]
    for set_n, _ in blas:
        set_n(n)
    try:
        yield
    finally:
        for set_n, before in blas:
            set_n(before)


def keep_freed_memory(nbytes=1 << 30):
    """Let the C allocator keep up to `nbytes` of freed memory for the next arrays, where it is
    glibc's malloc (Linux); returns True where that took effect, False elsewhere (nothing changes
    there).

    A training step makes and frees the same large arrays at every update. By default glibc hands a
    freed block of over 128 KB (up to 32 MB once it has seen such blocks freed) back to the kernel,
    so the next array of that size is mapped afresh and each of its 4 KB pages faults and is zeroed
    on its first write: thousands of page faults an update, a sizeable share of its time
    (benchmarks/README.md, 'Training step'). With M_MMAP_MAX 0 every block comes from the heap, and
    with M_TOP_PAD the heap grows by `nbytes` more than asked and keeps that much free at its top
    when it shrinks, so the next update finds its pages already there. The cost: the process holds
    the memory it freed (its peak, plus up to `nbytes`) until it ends.
    """
    if not 0 <= int(nbytes) < 2**31:
        raise ValueError(f"keep_freed_memory: nbytes must be in [0, 2**31), got {nbytes!r}")
    try:
        mallopt = ctypes.CDLL(None).mallopt      # the C library the process runs on
    except (OSError, AttributeError, TypeError):   # no such function (macOS, Windows)
        return False
    M_TOP_PAD = -2                              # glibc's <malloc.h>; musl's mallopt does nothing
    M_MMAP_MAX = -4
    return mallopt(M_TOP_PAD, int(nbytes)) == 1 and mallopt(M_MMAP_MAX, 0) == 1


def catch_signals(handler):
    """Send Ctrl-C (SIGINT) and SIGTERM to handler(signum, frame) where this is the main thread
    (only it may set handlers) and the signal is not ignored; returns the handlers replaced, for
    restore_signals."""
    on_main_thread = threading.current_thread() is threading.main_thread()
    handled = [s for s in (signal.SIGINT, signal.SIGTERM)
               if signal.getsignal(s) is not signal.SIG_IGN]
    return {s: signal.signal(s, handler) for s in handled} if on_main_thread else {}


def restore_signals(previous):
    """Put back the handlers that catch_signals replaced."""
    for s, handler in previous.items():
        signal.signal(s, handler)
