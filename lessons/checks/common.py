"""What every lesson's checkers share: Grade, one function's grading (run your code, compare its
answer with the package's like micrograd's cmp: exact, within float64 round-off, or the largest
difference and a hint), the hint finder diagnose, the Clock that limits the time your code takes,
and float64 leaves and ops with your backward for mt.gradcheck."""
import contextlib
import math
import signal
import threading
import traceback
from pathlib import Path

import numpy as np

import minitransformer as mt
from minitransformer.tensor import Tensor, make_node

EPS = float(np.finfo(np.float64).eps)


class NotDone(Exception):
    """The function (or one it calls) still raises NotImplementedError."""


class Fail(Exception):
    """A wrong answer, or an error; the message is what the line says."""


def tolerance(ref):
    """How far float64 round-off may take a right answer: 1024 eps * sqrt(size) * the largest
    |value|."""
    ref = np.abs(np.asarray(ref, dtype=np.float64))
    finite = ref[np.isfinite(ref)]
    scale = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    return 1024 * EPS * math.sqrt(max(ref.size, 1)) * scale


def diagnose(yours, ref, known=(), otherwise=""):
    """A hint for a wrong array: a known mistake it matches, else its factor or sign, else
    `otherwise`, else where it is wrong."""
    for wrong, hint in known:
        if callable(wrong):                          # computed only when needed; a mistake that
            try:                                     # cannot happen for these shapes is skipped
                wrong = wrong()
            except ValueError:
                continue
        wrong = np.asarray(wrong, dtype=np.float64)
        if wrong.shape == yours.shape and np.allclose(yours, wrong, rtol=1e-6,
                                                      atol=tolerance(wrong)):
            return hint
    rr = float(np.sum(ref * ref))
    if rr > 0:
        s = float(np.sum(yours * ref)) / rr                      # the best factor: yours ~ s * ref?
        if np.linalg.norm(yours - s * ref) <= 1e-6 * math.sqrt(rr):
            if abs(s) < 1e-9:
                return "you return zeros"
            if abs(s + 1) < 1e-6:
                return "the sign is flipped"
            if abs(s - 0.5) < 1e-6:
                return ("yours is half the answer: did you add both paths (a value used twice gets "
                        "two gradients)?")
            if abs(s - 2) < 1e-6:
                return "yours is twice the answer: a term counted twice, or a factor 1/2 left out?"
            if abs(s - 1) < 1e-3:                                # not a factor: a tiny term
                return (f"yours is close to the answer (relative difference {abs(s - 1):.1g}) but "
                        f"beyond round-off: a tiny term left out or added, such as eps in "
                        f"sqrt(var + eps)?")
            if ref.size > 1:                     # (any two numbers differ by a factor)
                return f"yours is the answer times {s:.4g}: a constant factor is off"
    if otherwise or ref.size == 1:
        return otherwise
    bad = np.abs(yours - ref) > tolerance(ref)
    i = np.unravel_index(int(np.argmax(bad)), ref.shape)
    return (f"wrong in {int(bad.sum())} of {bad.size} elements, first at index "
            f"{tuple(int(k) for k in i)}: yours {yours[i]:.6g}, expected {ref[i]:.6g}")


class OutOfTime(BaseException):
    """The Clock's signal, raised in your code; not an Exception, so that an `except Exception`
    there cannot swallow it. Clock.running turns it into a Fail."""


class Clock:
    """The time your code may take on one function: `cpu` seconds of CPU time, and as a backstop
    `wall` seconds of wall-clock time, so that an answer that sleeps or waits for input ends too.
    Both count only while your code runs (in `running()`: Grade.call, a file's top-level code),
    not while the grader computes its references. CPU time, not wall-clock time, is the limit,
    because a busy machine slows a right answer down without adding CPU time to it.

    The process's interval timers count (signal.setitimer: ITIMER_PROF, the CPU time of all its
    threads, and ITIMER_REAL): armed with the time left when your code starts, stopped when it
    returns, and their signal interrupts your code once the time is spent. Where there are no
    interval timers (Windows) or off the main thread (signals reach only it), nothing is timed.
    Use it as a context manager around one function's grading: it installs its signal handlers
    and is `grade.clock`."""

    REPEAT = 0.25      # once spent, the signal comes again every REPEAT s while your code runs

    def __init__(self, grade, cpu, wall):
        self.grade, self.depth, self.over, self.previous = grade, 0, None, {}
        self.on = (hasattr(signal, "setitimer") and
                   threading.current_thread() is threading.main_thread())
        if self.on:
            self.left = {signal.ITIMER_PROF: float(cpu), signal.ITIMER_REAL: float(wall)}
            self.why = {
                signal.SIGPROF: f"still running after {cpu:g} s of CPU time: an endless loop?",
                signal.SIGALRM: f"still running after {wall:g} s, though it uses little CPU time: "
                                f"is it waiting for something (input(), sleep, a lock)?"}

    def __enter__(self):
        if self.on:
            self.previous = {sig: signal.signal(sig, self.ring) for sig in self.why}
        self.grade.clock = self
        return self

    def __exit__(self, *exc):
        if self.on:
            for which in self.left:
                signal.setitimer(which, 0)
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)
        self.grade.clock = None

    def ring(self, signum, frame):
        """The signal handler: the time is spent; interrupt your code if it is running."""
        self.over = self.over or self.why[signum]
        if self.depth:
            raise OutOfTime

    @contextlib.contextmanager
    def running(self):
        """Your code runs inside: its time counts, and fails the grading once spent (nests)."""
        if not self.on:
            yield
            return
        outer = self.depth == 0
        if outer and self.over is None:
            for which, left in self.left.items():
                signal.setitimer(which, left, self.REPEAT)
        self.depth += 1
        try:
            try:
                if self.over:                    # spent earlier, or while the timers were armed
                    raise OutOfTime
                yield
            finally:
                self.depth -= 1
                if outer:
                    self.pause()
        except OutOfTime as e:                   # your file's frames stay in the traceback
            if outer:
                self.pause()                     # (the signal may come before the first pause)
            raise self.grade.failure(self.over).with_traceback(e.__traceback__) from None

    def pause(self):
        """Stop the timers, keeping the time left."""
        for which in self.left:
            left = signal.setitimer(which, 0)[0]
            if self.over is None:
                self.left[which] = max(left, 1e-6)       # (0 would disarm it for good)


class Grade:
    """One function's grading: the case being run, and for a pass the largest difference and
    notes."""

    def __init__(self, path):
        self.path, self.case, self.cases = path, "", 0
        self.worst, self.exact, self.notes = 0.0, True, []
        self.error_hint = ""                     # added to the line when the function raises
        self.clock = None                        # a Clock while one times the grading

    def start(self, case):
        self.case, self.cases = case, self.cases + 1

    def failure(self, message):
        return Fail(f"{self.case}: {message}" if self.case else message)

    def fail(self, message):
        raise self.failure(message)

    def timed(self):
        """A context in which your code runs: the clock (if any) counts its time."""
        return self.clock.running() if self.clock is not None else contextlib.nullcontext()

    def call(self, fn, *args, **kwargs):
        """Run your code, timed: NotImplementedError means not done yet; any other error fails, in
        one line."""
        try:
            with np.errstate(all="ignore"), self.timed():
                return fn(*args, **kwargs)
        except NotImplementedError as e:
            raise NotDone(self.where(e, "name")) from None
        except (Fail, NotDone):
            raise
        except mt.GradcheckError as e:
            self.fail(f"mt.gradcheck with your backward: {e}")
        except (Exception, SystemExit) as e:     # exit() too: it would end the grader
            hint = f"; {self.error_hint}" if self.error_hint else ""
            what = ("called exit()" if isinstance(e, SystemExit) else
                    f"raised {type(e).__name__}: {e}")
            self.fail(f"{what}{self.where(e)}{hint}")

    def where(self, error, what="line"):
        """The line of the graded file that raised (or the function's name), or ''."""
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if Path(f.filename).resolve() == self.path]
        if not frames:
            return ""
        if what == "name":
            return frames[-1].name
        return f" (line {frames[-1].lineno} of {self.path.name})"

    def gradcheck(self, fn, *inputs, case=None):
        """mt.gradcheck (float64, central differences) of an op whose backward is yours; `case`
        names it when it is not part of the case last started."""
        if case is not None:
            self.case = case
        self.call(mt.gradcheck, fn, *inputs)
        if "mt.gradcheck passed" not in self.notes:
            self.notes.append("mt.gradcheck passed")

    def cmp(self, what, yours, ref, tol=None, known=(), shape_hint="", nan_hint="", otherwise=""):
        """Exact, or within `tol` (float64 round-off by default), or fail with the difference and a
        hint: a `known` (wrong answer, hint) it matches, its factor or sign, else `otherwise`."""
        ref = np.asarray(ref, dtype=np.float64)
        if isinstance(yours, Tensor):
            yours = yours.numpy()
        want = "a number" if ref.ndim == 0 else f"numbers of shape {ref.shape}"
        if yours is None:
            self.fail(f"{what} is None (a function without return gives None); expected {want}")
        try:
            y, kind = np.asarray(yours, dtype=np.float64), np.asarray(yours).dtype.kind
        except (TypeError, ValueError):
            self.fail(f"{what} should be {want}, got {held(yours)}")
        if kind not in "biuf":                   # text ("1.5" converts to a number), None (NaN)
            self.fail(f"{what} should be {want}, got {held(yours)}")
        if y.shape != ref.shape:
            self.fail(f"{what} has shape {y.shape}, expected {ref.shape}" +
                      (f": {shape_hint}" if shape_hint else ""))
        if np.array_equal(y, ref):
            return
        if not np.isfinite(y).all() and np.isfinite(ref).all():
            i = tuple(int(k) for k in np.argwhere(~np.isfinite(y))[0])
            self.fail(f"{what} holds NaN or inf" + (f" (first at index {i})" if y.ndim else "") +
                      (f"; {nan_hint}" if nan_hint else ""))
        tol = tolerance(ref) if tol is None else tol
        with np.errstate(invalid="ignore"):
            diff = np.where(y == ref, 0.0, np.abs(y - ref))      # equal infinities differ by 0
        d = float(diff.max())
        if d <= tol:
            self.exact, self.worst = False, max(self.worst, d)
            return
        hint = diagnose(y, ref, known, otherwise)
        if ref.size == 1:
            self.fail(f"{what} is {y.item():.6g}, expected {ref.item():.6g}" +
                      (f"; {hint}" if hint else ""))
        self.fail(f"{what}: max diff {d:.2g}; {hint}")

    def same(self, what, yours, ref, hint=""):
        """Exact equality of lists and ints."""
        if yours != ref:
            self.fail(f"{what} gave {yours}, expected {ref}" + (f"; {hint}" if hint else ""))

    def ids(self, got, what="it"):
        """Your answer as a list of ints (token ids), or fail saying what to return ("23" is no
        [2, 3])."""
        try:
            if isinstance(got, (str, bytes)):
                raise TypeError
            return [int(i) for i in got]
        except (TypeError, ValueError):
            self.fail(f"{what} should be a list of token ids, got {got!r}" +
                      (" (a function without return gives None)" if got is None else ""))

    def unpack(self, result, names):
        """A tuple of len(names) results, or fail saying what to return."""
        if not isinstance(result, (tuple, list)) or len(result) != len(names):
            got = f" of {len(result)}" if isinstance(result, (tuple, list)) else ""
            self.fail(f"return the tuple ({', '.join(names)}), got {type(result).__name__}{got}")
        return result

    def summary(self):
        how = "exact" if self.exact else f"within round-off, max diff {self.worst:.1e}"
        cases = f"{self.cases} case" + ("s" if self.cases != 1 else "")
        return f"{how} on {cases}" + "".join(f"; {n}" for n in self.notes)


def held(value):
    """What an answer that is not numbers is, for a message: 'str', 'NoneType', 'a list holding
    NoneType'."""
    if isinstance(value, (list, tuple)):
        odd = [v for v in value if not isinstance(v, (int, float, np.number))]
        if odd:
            return f"a {type(value).__name__} holding {type(odd[0]).__name__}" + \
                (" (a function without return gives None)" if odd[0] is None else "")
    return type(value).__name__


def leaf(a):
    """A float64 leaf Tensor of a copy of `a` (gradient checks run in float64, lesson 03)."""
    return mt.tensor(np.array(a, dtype=np.float64), requires_grad=True)


def with_your_backward(forward, backward, parents):
    """A node with the package's forward values and YOUR backward: what mt.gradcheck then judges."""
    return make_node(forward(*[p.detach() for p in parents]).data, tuple(parents), backward,
                     "yours")
