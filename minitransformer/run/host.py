"""The host process's settings for training: the BLAS's threads (one for each rank thread, whose
other ranks have the other cores), the C heap keeping freed arrays for the next update, the bounds
a run's settings keep on this host before any work (integers within 2**53, an update's batches
within an epoch), and the signals (Ctrl-C, SIGTERM) that stop a run only where it may
(StopSignals: never inside an update or a save, and a second signal never cuts short the save the
first asked for). None changes a number: only which core runs a GEMM, where an array lives, what
is refused and when a run stops.
"""
import contextlib
import os
import re
import signal
import sys
import threading

# the largest integer that a float64 and a checkpoint's JSON hold exactly: a step count, a seed or
# a size beyond it would round or overflow later, so it is refused before any work
MAX_EXACT = 2**53 - 1
_blas = None  # [(set_num_threads, get_num_threads)] of the OpenBLAS libraries loaded, once found


def _openblas():
    """[(set_num_threads, get_num_threads)] of every OpenBLAS loaded in this process (NumPy's, and
    SciPy's where it is imported), empty where none is found (not Linux, another BLAS)."""
    import ctypes  # here, not above: this module is the package's first import (quiet_loading)
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
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt      # the C library the process runs on
    except (OSError, AttributeError, TypeError):   # no such function (macOS, Windows)
        return False
    M_TOP_PAD = -2                              # glibc's <malloc.h>; musl's mallopt does nothing
    M_MMAP_MAX = -4
    return mallopt(M_TOP_PAD, int(nbytes)) == 1 and mallopt(M_MMAP_MAX, 0) == 1


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, `kill` and job schedulers send): handled as Ctrl-C."""


def stop_for(signum):
    """The exception a signal stops a run with: Terminated for SIGTERM, else KeyboardInterrupt."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def exit_code(stop):
    """A stopped command's exit code, 128 + the signal: 143 for SIGTERM, 130 for Ctrl-C."""
    return 143 if isinstance(stop, Terminated) else 130


class StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM from catch() to release(): a run stops where it may, never inside
    what must be whole, and a second signal cannot cut short the work the first one asked to save.

        signals = StopSignals(alone=True).catch()
        try:
            ...                                  # the first signal raises KeyboardInterrupt here
            with signals.whole():                # ... but not here: it is noted,
                write_the_checkpoint()
            signals.stop_if_noted()              # and raised here
        except KeyboardInterrupt:
            signals.stopping = True              # a callback's KeyboardInterrupt: the same
            save()                               # every later signal is only noted
        finally:
            signals.release()

    Every signal is noted in `seen` ([Ctrl-C, SIGTERM]). The first one raises stop_for(signum) at
    once, unless the run is inside whole() (then at stop_if_noted), or `alone` is False (the
    ranks of a data-parallel run stop together: they sum their notes after each update, take()).
    From the first stop on (`stopping`), further signals are noted, never raised: git and SQLite
    finish a write before they answer a signal. Handlers are set on the main thread only (only it
    may set them), and never for a signal that is ignored (nohup); release() puts the old ones back.
    """

    def __init__(self, alone=True):
        self.alone = alone
        self.seen = [0, 0]
        self.signalled = False   # a signal came, to this block or to one inside it
        self.stopping = False
        self._whole = 0
        self._previous = {}

    def catch(self):
        """Handle both signals (where this is the main thread); returns self."""
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(s)
                if previous not in (signal.SIG_IGN, None):
                    self._previous[s] = previous     # noted first: a signal now still finds it
                    signal.signal(s, self._noted)
        return self

    def release(self):
        """Put back the handlers that catch() replaced. After a signal, the block around this one
        (a StopSignals whose handlers these were: the command line's) only notes too: the process
        is ending for that signal, and a later one must not cut short what remains (its message)."""
        while self._previous:
            s, handler = self._previous.popitem()
            signal.signal(s, handler)
            outer = getattr(handler, "__self__", None)
            if self.signalled and isinstance(outer, StopSignals):
                outer.stopping = True
                outer.signalled = True

    def _noted(self, signum, frame):
        self.seen[signum == signal.SIGTERM] += 1
        self.signalled = True
        if self.alone and not self._whole and not self.stopping:
            self.stopping = True
            raise stop_for(signum)

    @contextlib.contextmanager
    def whole(self):
        """A block no signal cuts: a signal inside it is only noted (stop_if_noted, after it)."""
        self._whole += 1
        try:
            yield
        finally:
            self._whole -= 1

    def take(self):
        """The signals noted since the last take(), [Ctrl-C, SIGTERM]; the notes start again."""
        seen = self.seen
        self.seen = [0, 0]
        return seen

    def stop_if_noted(self):
        """Alone: stop now if a signal was noted (inside whole(), or raised in a finalizer, which
        Python drops). Data parallel: the notes wait for the next update's sum."""
        if self.alone:
            self.stop(self.take())

    def stop(self, seen):
        """Stop (raise, and from now on only note) when `seen` ([Ctrl-C, SIGTERM], of every rank)
        holds a signal: Terminated when one was SIGTERM, else KeyboardInterrupt."""
        if any(seen):
            self.stopping = True
            raise stop_for(signal.SIGTERM if seen[1] else signal.SIGINT)


def check_exact(owner, **settings):
    """Before any work: each integer setting given (None is skipped) is at most MAX_EXACT in size;
    else a SettingError naming it (a long number said by its digits: 10**400 is not printed)."""
    from ..checks import fail   # here, not above: the package's first import (quiet_loading)
    for name, value in settings.items():
        if isinstance(value, int) and abs(value) > MAX_EXACT:
            digits = len(str(abs(value)))
            got = f"{value:,}" if digits <= 20 else f"a number of {digits:,} digits"
            fail(owner, f"{name} must be at most {MAX_EXACT:,} in size (2**53 - 1, the largest "
                 f"integer a float and a checkpoint's JSON hold exactly), got {got}", name, value)


def check_plan(owner, training_config, batches, ranks=1):
    """Before any work: a run's updates fit `batches`, the batches an epoch of its corpus holds (on
    each of `ranks` ranks). An update plans its accum batches at once, so accum is at most an
    epoch's; and its updates (steps, or epochs x batches / (accum x ranks)) are at most MAX_EXACT.
    Else a SettingError naming accum or epochs."""
    from ..checks import fail
    accum = training_config.accum
    if accum > batches:
        each = " on each rank" if ranks > 1 else ""
        fail(owner, f"accum {accum:,} asks for more batches per update than an epoch holds "
             f"({batches:,} of up to {training_config.max_tokens:,} tokens{each}): an update "
             f"would see pairs more than once; give at most {batches:,}", "accum", accum)
    epochs = training_config.epochs
    if training_config.steps is None and epochs * batches / (accum * ranks) > MAX_EXACT:
        fail(owner, f"epochs {epochs:g} of {batches:,} batches make more than {MAX_EXACT:,} "
             "updates (2**53 - 1, the most a step count holds exactly)", "epochs", epochs)


# Python's own handlers of the two signals, which quiet_loading replaces
DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


def stopped_while_loading(signum, frame):
    """Ctrl-C or SIGTERM while `python -m minitransformer` loads its modules: one line and exit code
    130 or 143 at once, not a traceback of the import under way (quiet_loading)."""
    for stop in DEFAULTS:  # ending: a later signal changes nothing
        signal.signal(stop, signal.SIG_IGN)
    what = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    print(f"python -m minitransformer: {what}", file=sys.stderr, flush=True)
    # at once: an exception here would surface inside the import under way (NumPy's turns it into
    # an ImportError), and nothing is written yet that an ending would need to finish
    os._exit(exit_code(stop_for(signum)))


def quiet_loading():
    """From here until __main__.py handles them, Ctrl-C and SIGTERM are stopped_while_loading, when
    the process is `python -m minitransformer` (whose sys.argv[0] is "-m" until __main__ runs) and
    they have Python's own handlers (not an ignored signal)."""
    if sys.argv[:1] == ["-m"]:
        for s, default in DEFAULTS.items():
            if signal.getsignal(s) is default:
                signal.signal(s, stopped_while_loading)
