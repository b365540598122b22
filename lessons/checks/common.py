"""What every lesson's checkers share: Grade, one function's grading (run your code, compare its
answer with the package's like micrograd's cmp: exact, within float64 round-off, or the largest
difference and a hint), the hint finder diagnose, the Clock that limits the time your code takes,
and float64 leaves and ops with your backward for mt.gradcheck.

The API a checker uses (`check(fn, g)`, g a Grade):
  g.start(case)                 names the case that the lines below report.
  g.call(fn, *args, **kwargs)   runs your code, timed (CPU time, yours only), and guards EVERY call:
                                each input (arrays, lists, dicts, Tensors' data, nested; the
                                incoming gradient too) must be unchanged after it, and no array it
                                returns may share memory with an input or with another returned
                                array.
      g.may_write = {"p"}       opt-out: arguments the contract lets the function write into
                                (True: any); g.may_share = True: outputs may be views (a backward
                                that returns g itself, np.broadcast_to(g, ...)); `with
                                g.contract(may_write=..., may_share=...):` for some calls only;
                                g.write_hints = {"x": "..."}: what to say when x is written into.
                                A shared result fails at the next g.start or at g.finish (check.py
                                calls it after the checker), so that a wrong value is said first.
  g.cmp(what, yours, ref, known=[(wrong, hint)], ...)   exact, within round-off, or FAIL with the
                                largest difference; a `known` mistake is named only once a second
                                case confirms it (yours matches that hint's wrong answer there too,
                                where it differs from the right one: the same hint, word for word),
                                else the line says what differs and where (the case, the element).
                                So give each mistake two cases that show it.
  g.fail(message), g.same, g.ids, g.unpack, g.gradcheck: see each.
"""
import contextlib
import copy
import inspect
import math
import signal
import threading
import time
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


def evaluated(known):
    """The known (wrong answer, hint) pairs as float64 arrays; a lazy one (a callable) is computed
    now, and one that cannot happen for these shapes (ValueError) is skipped."""
    for wrong, hint in known:
        if callable(wrong):
            try:
                wrong = wrong()
            except ValueError:
                continue
        yield np.asarray(wrong, dtype=np.float64), hint


def matching(yours, known):
    """The hint of the first known (wrong answer, hint) that `yours` matches, or None."""
    yours = np.asarray(yours, dtype=np.float64)
    for wrong, hint in evaluated(known):
        with np.errstate(invalid="ignore"):
            if wrong.shape == yours.shape and np.allclose(yours, wrong, rtol=1e-6,
                                                          atol=tolerance(wrong)):
                return hint
    return None


def diagnose(yours, ref, known=(), otherwise=""):
    """A hint for a wrong array: a known mistake it matches, else its factor or sign, else
    `otherwise` and where it is wrong."""
    hint = matching(yours, known)
    if hint is not None:
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
                return "yours is half the answer, in every element: a factor 2 or a path left out?"
            if abs(s - 2) < 1e-6:
                return "yours is twice the answer, in every element: a term counted twice?"
            if abs(s - 1) < 1e-3:                                # not a factor: a tiny term
                return otherwise or (f"yours is close to the answer (relative difference "
                                     f"{abs(s - 1):.1g}) but beyond round-off: a tiny term left "
                                     f"out or added (an eps?)")
            if ref.size > 1:                     # (any two numbers differ by a factor)
                return f"yours is the answer times {s:.4g} in every element: a constant factor"
    if ref.size == 1:
        return otherwise
    bad = np.abs(yours - ref) > tolerance(ref)
    i = np.unravel_index(int(np.argmax(bad)), ref.shape)
    where = (f"wrong in {int(bad.sum())} of {bad.size} elements, first at index "
             f"{tuple(int(k) for k in i)}: yours {yours[i]:.8g}, expected {ref[i]:.8g}")
    return f"{otherwise}; {where}" if otherwise else where


class OutOfTime(BaseException):
    """The Clock's signal, raised in your code; not an Exception, so that an `except Exception`
    there cannot swallow it. Clock.running turns it into a Fail."""


class Clock:
    """The time your code may take on one function: `cpu` seconds of CPU time, and as a backstop
    `wall` seconds of wall-clock time, so that an answer that sleeps or waits for input ends too.
    Both count only while your code runs (in `running()`: Grade.call, a file's top-level code),
    not while the grader computes its references. CPU time, not wall-clock time, is the limit,
    because a busy machine slows a right answer down without adding CPU time to it.

    The CPU time is that of the thread your code runs on (time.pthread_getcpuclockid, read by a
    watchdog thread that signals it once the time is spent), so that other threads of the process,
    busy or not, add nothing to it; where a thread's clock cannot be read, the process's interval
    timer ITIMER_PROF (all its threads). The backstop is ITIMER_REAL. Where there are no interval
    timers (Windows) or off the main thread (signals reach only it), nothing is timed. Use it as a
    context manager around one function's grading: it installs its signal handlers and is
    `grade.clock`."""

    REPEAT = 0.25      # once spent, the signal comes again every REPEAT s while your code runs
    POLL = 0.02        # how often the watchdog reads your thread's CPU clock

    def __init__(self, grade, cpu, wall, per_thread=True):
        self.grade, self.depth, self.over, self.previous = grade, 0, None, {}
        self.on = (hasattr(signal, "setitimer") and
                   threading.current_thread() is threading.main_thread())
        if self.on:
            # None: count the process's CPU time instead (per_thread=False: no watchdog to start)
            self.mine = thread_clock() if per_thread else None
            self.left = {signal.ITIMER_REAL: float(wall)}
            if self.mine is None:
                self.left[signal.ITIMER_PROF] = float(cpu)
            self.cpu_left, self.budget, self.watchdog = float(cpu), None, None   # (mark, cpu left)
            self.stop = threading.Event()
            self.why = {
                signal.SIGPROF: f"still running after {cpu:g} s of CPU time: an endless loop, or "
                                f"the machine is busy?",
                signal.SIGALRM: f"still running after {wall:g} s, though it uses little CPU time: "
                                f"is it waiting for something (input(), sleep, a lock), or is the "
                                f"machine busy?"}

    def __enter__(self):
        if self.on:
            self.previous = {sig: signal.signal(sig, self.ring) for sig in self.why}
            if self.mine is not None:
                self.watchdog = threading.Thread(target=self.watch, args=(threading.get_ident(),),
                                                 daemon=True)
                self.watchdog.start()
        self.grade.clock = self
        return self

    def __exit__(self, *exc):
        if self.on:
            self.stop.set()
            if self.watchdog is not None:
                self.watchdog.join()
            for which in self.left:
                signal.setitimer(which, 0)
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)
        self.grade.clock = None

    def watch(self, main):
        """The watchdog: while your code runs, signal its thread once its CPU time is spent."""
        last = None
        while not self.stop.wait(self.POLL):
            budget = self.budget                 # one read: the mark and the time left agree
            if not self.depth or budget is None:
                continue
            now = time.monotonic()
            if (time.clock_gettime(self.mine) - budget[0] >= budget[1] and
                    (last is None or now - last >= self.REPEAT)):
                last = now
                signal.pthread_kill(main, signal.SIGPROF)

    def ring(self, signum, frame):
        """The signal handler: the time is spent; interrupt your code if it is running (a signal
        that comes between two calls is not lost: the time left is then about 0)."""
        if self.depth:
            self.over = self.over or self.why[signum]
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
            if self.mine is not None:
                self.budget = (time.clock_gettime(self.mine), self.cpu_left)
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
        if self.mine is not None and self.budget is not None:
            self.cpu_left = max(self.budget[1] - (time.clock_gettime(self.mine) - self.budget[0]),
                                0.0)
            self.budget = None


def thread_clock():
    """The id of the calling thread's CPU-time clock, or None where it cannot be read."""
    try:
        clock = time.pthread_getcpuclockid(threading.get_ident())
        time.clock_gettime(clock)
        return clock
    except (AttributeError, OSError):
        return None


class Grade:
    """One function's grading: the case being run, and for a pass the largest difference and
    notes."""

    def __init__(self, path):
        self.path, self.case, self.cases = path, "", 0
        self.worst, self.exact, self.notes = 0.0, True, []
        self.error_hint = ""                     # added to the line when the function raises
        self.clock = None                        # a Clock while one times the grading
        # the contract's opt-outs
        self.may_write, self.may_share, self.write_hints = set(), False, {}
        self.pending = None                      # (line, (what, hint), named line): to confirm
        self.sharing = ""                        # a result that shares memory: fails once right

    @contextlib.contextmanager
    def contract(self, may_write=None, may_share=None):
        """Within it, calls may write into `may_write` (names, or True) and return views."""
        saved = (self.may_write, self.may_share)
        self.may_write = saved[0] if may_write is None else may_write
        self.may_share = saved[1] if may_share is None else may_share
        try:
            yield
        finally:
            self.may_write, self.may_share = saved

    def start(self, case):
        if self.sharing and self.pending is None:    # the case before returned shared memory
            self.fail(self.sharing)
        self.case, self.cases = case, self.cases + 1

    def failure(self, message):
        """The Fail of a line; a match still unconfirmed comes first, without its name (it was the
        first failure)."""
        if self.pending is not None:
            return Fail(self.pending[0])
        return Fail(f"{self.case}: {message}" if self.case else message)

    def finish(self):
        """After the checker: a match no second case confirmed fails with what differs, unnamed."""
        if self.pending is not None:
            raise Fail(self.pending[0])
        if self.sharing:
            self.fail(self.sharing)

    def fail(self, message):
        raise self.failure(message)

    def timed(self):
        """A context in which your code runs: the clock (if any) counts its time."""
        return self.clock.running() if self.clock is not None else contextlib.nullcontext()

    def call(self, fn, *args, **kwargs):
        """Run your code, timed: NotImplementedError means not done yet; any other error fails, in
        one line."""
        before = snapshot((args, kwargs))
        try:
            with np.errstate(all="ignore"), self.timed():
                result = fn(*args, **kwargs)
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
        self.guard(fn, args, kwargs, before, result)
        return result

    def guard(self, fn, args, kwargs, before, result):
        """Fail when the call wrote into an input or returned memory it does not own."""
        names = argument_names(fn, args, kwargs)
        given = list(zip(names, [*args, *kwargs.values()], [*before[0], *before[1].values()]))
        what = getattr(fn, "__name__", type(fn).__name__)
        for name, value, old in given:
            base = name.split("[")[0]
            if self.may_write is True or base in self.may_write:
                continue
            where = changed(value, old, name)
            if where:
                self.fail(f"{what} changed its input {where}, and the caller still needs it: " +
                          self.write_hints.get(base, GRADIENT if is_gradient(base) else NEW_ARRAY))
        if self.may_share or self.sharing:
            return
        outs = list(arrays_in(result, "the result"))
        for i, (label, out) in enumerate(outs):           # said once the values are right
            for name, value, _ in given:
                for inner, held_ in arrays_in(value, name):
                    if out.size and shares(out, held_) and not self.sharing:
                        self.sharing = (f"{label} shares memory with the input {inner}: writing "
                                        f"into one changes the other; return a new array (.copy())")
            for other_label, other in outs[:i]:
                if out.size and shares(out, other) and not self.sharing:
                    self.sharing = (f"{label} and {other_label} share memory (one array object, "
                                    f"or views of one): each must be an array of its own")

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
        if self.pending is not None:             # a wrong answer: its gradcheck tells nothing new
            return
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
        if self.pending is not None:             # a second case: does yours match that mistake?
            again = [(wrong, "") for wrong, hint in known if (what, hint) == self.pending[1]]
            telling = [w for w in evaluated(again) if matching(ref, [w]) is None]
            if any(matching(y, [w]) is not None for w in telling):
                line = self.pending[2]
                self.pending = None
                raise Fail(line)
            if telling:                                  # it does not: name nothing
                self.fail("")
            return                                       # (this case cannot tell)
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
        named = matching(y, known)
        hint = diagnose(y, ref, (), otherwise)
        line = (f"{what} is {y.item():.6g}, expected {ref.item():.6g}" if ref.size == 1 else
                f"{what}: max diff {d:.2g}")
        if named is None or self.pending is not None:
            self.fail(line + (f"; {hint}" if hint else ""))
        case = f"{self.case}: " if self.case else ""   # the first match: confirm it on another case
        self.pending = (f"{case}{line}" + (f"; {hint}" if hint else ""), (what, named),
                        f"{case}{line}; {named}")

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


# ------------------------------------------ the guards of every call: inputs unchanged, outputs new
NEW_ARRAY = "compute into a new array (a * b makes one; a *= b, a[...] = and out= write into a)"
GRADIENT = ("the incoming gradient belongs to the engine, which may hand that same array to other "
            "nodes (add passes g to both parents): writing into it corrupts other tensors' "
            "gradients; compute into a new array (g * b makes one, g *= b does not)")


def is_gradient(name):
    """Whether an argument's name says it is the incoming gradient: g, grad, gr,
    dy, dout, dxhat..."""
    return name in ("g", "gr", "grad", "G") or (name.startswith("d") and name != "dtype" and
                                                 len(name) > 1 and name.isidentifier())


def argument_names(fn, args, kwargs):
    """The parameter name of each argument, positional then keyword ('argument 2' if unknown)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i, _ in enumerate(args):
        plain = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        rest = [p.name for p in params if p.kind == p.VAR_POSITIONAL]
        names.append(plain[i].name if i < len(plain) else
                     f"{rest[0]}[{i - len(plain)}]" if rest else f"argument {i + 1}")
    return names + list(kwargs)


def snapshot(value):
    """A deep copy of what a call may change: arrays, Tensors' data, lists, tuples, dicts, sets;
    other objects (functions, modules, numbers) are kept as they are, not compared."""
    if isinstance(value, Tensor):
        return ("tensor", np.array(value.data, copy=True))
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, (list, tuple)):
        return [snapshot(v) for v in value]
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, (set, bytearray)):
        return copy.copy(value)
    return value


def changed(value, old, name):
    """Where `value` differs from its snapshot `old` ('x', 'x at index (0, 2)', "counts['ab']"),
    or ''."""
    if isinstance(old, tuple):                                    # ("tensor", its data)
        return changed(value.data, old[1], f"{name}.data") if isinstance(value, Tensor) else ""
    if isinstance(old, np.ndarray):
        now = np.asarray(value)
        if now.shape != old.shape or now.dtype != old.dtype:
            return f"{name} in place (now of shape {now.shape}, {now.dtype})"
        same = (now == old) | ((now != now) & (old != old))      # NaN where NaN was is unchanged
        if same.all():
            return ""
        i = tuple(int(k) for k in np.argwhere(~same)[0])
        return f"{name} in place (first at index {i})" if now.ndim else f"{name} in place"
    if isinstance(old, list):
        if len(value) != len(old):
            return f"{name} in place (its length went from {len(old)} to {len(value)})"
        for i, (v, o) in enumerate(zip(value, old)):
            where = changed(v, o, f"{name}[{i}]")
            if where:
                return where
        return ""
    if isinstance(old, dict):
        if set(value) != set(old):
            return f"{name} in place (its keys changed)"
        for k, o in old.items():
            where = changed(value[k], o, f"{name}[{k!r}]")
            if where:
                return where
        return ""
    if isinstance(old, (set, bytearray)):
        return "" if value == old else f"{name} in place"
    if isinstance(old, (int, float, complex, str, bytes, np.generic)) and value is not old:
        same = type(value) is type(old) and (value == old or value != value and old != old)
        return "" if same else f"{name} in place (it was {old!r}, now {value!r})"
    return ""


def arrays_in(value, name):
    """(label, array) of every array in a result or argument: an ndarray, a Tensor's data, inside
    tuples, lists and dicts."""
    if isinstance(value, Tensor):
        value = value.data
    if isinstance(value, np.ndarray):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from arrays_in(v, f"{name}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from arrays_in(v, f"{name}[{k!r}]")


def shares(a, b):
    """Whether two arrays share memory (views of one buffer that overlap)."""
    try:
        return bool(np.shares_memory(a, b, max_work=10 ** 5))
    except getattr(np, "exceptions", np).TooHardError:
        return True
