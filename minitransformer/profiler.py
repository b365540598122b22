"""mt.profile(): where a step's time goes, op by op, forward and backward.

    with mt.profile() as prof:
        loss = model.loss(src, tgt_in, tgt_out)
        loss.backward()
    print(prof.table())

`@traced` only registers an op, so outside a profile an op is a plain function and costs nothing
extra. While a profile is active, every name in a loaded `minitransformer` module that holds a
registered op (`ops.add`, which Tensor's operators call, `F.softmax`, `mt.concat`, a name imported
with `from .ops import where`) is bound to a timing wrapper instead; on exit, also when an exception
escapes, each name is bound back to its op. The wrapper times the forward of the outermost traced
call only (so a fused op that uses elementary ops inside counts once, under its own name), and wraps
the backward closure of the node it returns, so that the engine's call of that closure is timed too,
under the same name. On the GPU, kernels run asynchronously: `profile(sync=True)` waits for the
device after every op, so the times are real (and the whole step slower). Left out: memory per op,
call stacks, and ops called through a name bound outside the package (`from minitransformer.ops
import add` in your own module is not timed; `mt.ops.add` is).
"""
import functools
import sys
import time
from collections import defaultdict

from . import backend

_traced = []    # every op registered with @traced
_active = None  # the profile recording now, if any


def traced(fn):
    """Register the op `fn` with the profiler and return it unchanged: mt.profile() times it."""
    _traced.append(fn)
    return fn


class profile:
    """Context manager recording time per op name; `table()` formats it, sorted by total time."""

    def __init__(self, sync=False):
        self.sync = sync
        self.depth = 0                                   # > 0 while inside a traced op
        # name -> [forward calls, forward seconds, backward calls, backward seconds]
        self.stats = defaultdict(lambda: [0, 0.0, 0, 0.0])
        self.wall = 0.0

    def __enter__(self):
        global _active
        if _active is not None:                          # the active profile goes on recording
            raise RuntimeError("mt.profile() is already active; profiles do not nest")
        _active = self
        self._ops = [(fn, _timing(self, fn)) for fn in _traced]
        _rebind({id(fn): timed for fn, timed in self._ops})
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        global _active
        try:
            if self.sync:
                backend.synchronize()
            self.wall += time.perf_counter() - self._start
        finally:
            _rebind({id(timed): fn for fn, timed in self._ops})
            _active = None

    def now(self):
        if self.sync:
            backend.synchronize()
        return time.perf_counter()

    def record(self, name, phase, seconds):
        row = self.stats[name]
        k = 0 if phase == "forward" else 2
        row[k] += 1
        row[k + 1] += seconds

    def totals(self):
        """{op name: (forward seconds, backward seconds)}."""
        return {name: (r[1], r[3]) for name, r in self.stats.items()}

    def table(self, top=20):
        """A text table: op, calls, forward ms, backward ms, total ms, share of the wall time."""
        rows = sorted(self.stats.items(), key=lambda kv: -(kv[1][1] + kv[1][3]))[:top]
        lines = [f"{'op':24s} {'calls':>7s} {'forward ms':>11s} {'backward ms':>12s} "
                 f"{'total ms':>10s} {'share':>6s}"]
        for name, (fc, fs, bc, bs) in rows:
            share = (fs + bs) / self.wall if self.wall else 0.0
            lines.append(f"{name:24s} {max(fc, bc):7d} {fs * 1e3:11.2f} {bs * 1e3:12.2f} "
                         f"{(fs + bs) * 1e3:10.2f} {share:6.1%}")
        traced = sum(r[1] + r[3] for r in self.stats.values())
        share = traced / self.wall if self.wall else 0
        lines.append(f"{'(all ops)':24s} {'':7s} {'':11s} {'':12s} {traced * 1e3:10.2f} "
                     f"{share:6.1%}  of {self.wall * 1e3:.2f} ms wall")
        return "\n".join(lines)


def _rebind(replacement):
    """Bind every name of a loaded minitransformer module that holds an object whose id is a key of
    `replacement` to that key's value (every key's object is kept alive, so no id is reused)."""
    for module_name, module in list(sys.modules.items()):
        ours = module_name == "minitransformer" or module_name.startswith("minitransformer.")
        if module is not None and ours:
            space = vars(module)
            for name, value in list(space.items()):
                if id(value) in replacement:
                    space[name] = replacement[id(value)]


def _timing(prof, fn):
    """The op `fn`, timed in `prof`: its forward when it is the outermost traced call, and the
    backward of the node it returns whenever that runs (multi_head_attention returns
    (node, weights): the first item)."""
    @functools.wraps(fn)
    def op(*args, **kwargs):
        outer = prof.depth == 0
        start = prof.now() if outer else 0.0
        prof.depth += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            prof.depth -= 1
        node = out[0] if isinstance(out, tuple) and out else out
        # a node this call made (dropout with p=0 hands back its input): rows under the node's name,
        # so that forward and backward rows match
        made = bool(getattr(node, "_op", "")) and not any(node is a for a in args)
        name = node._op if made else fn.__name__
        if outer:
            prof.record(name, "forward", prof.now() - start)
        # wrapped once: masked_fill returns where's node
        if made and node._backward is not None and type(node._backward) is not _TimedBackward:
            node._backward = _TimedBackward(prof, name, node._backward)
        return out
    return op


class _TimedBackward:
    """A node's backward closure, timed while the profile that wrapped it is active."""
    __slots__ = ("prof", "name", "backward")

    def __init__(self, prof, name, backward):
        self.prof = prof
        self.name = name
        self.backward = backward

    def __call__(self, g):
        if _active is not self.prof:  # backward() after the profile ended: not recorded
            return self.backward(g)
        start = self.prof.now()
        grads = self.backward(g)
        self.prof.record(self.name, "backward", self.prof.now() - start)
        return grads
