"""mt.profile(): where a step's time goes, op by op, forward and backward.

    with mt.profile() as prof:
        loss = model.loss(src, tgt_in, tgt_out); loss.backward()
    print(prof.table())

Forward time is measured around each op traced with `tensor.traced` (the outermost one only, so a fused
op that uses elementary ops inside counts once, under its own name); backward time around each node's
closure in the engine. On the GPU, kernels run asynchronously: `profile(sync=True)` waits for the device
after every op, so the times are real (and the whole step slower). Left out: memory per op, call stacks.
"""
import time
from collections import defaultdict

from . import backend
from .tensor import set_profiler


class profile:
    """Context manager recording time per op name; `table()` formats it, sorted by total time."""

    def __init__(self, sync=False):
        self.sync = sync
        self.depth = 0                                   # > 0 while inside a traced op
        self.stats = defaultdict(lambda: [0, 0.0, 0, 0.0])  # name -> [fwd calls, fwd s, bwd calls, bwd s]
        self.wall = 0.0

    def __enter__(self):
        previous = set_profiler(self)
        if previous is not None:
            set_profiler(previous)                       # the active profile goes on recording
            raise RuntimeError("mt.profile() is already active; profiles do not nest")
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.sync:
            backend.synchronize()
        self.wall += time.perf_counter() - self._start
        set_profiler(None)

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
        """A text table: op, calls, forward ms, backward ms, total ms, share of the profiled wall time."""
        rows = sorted(self.stats.items(), key=lambda kv: -(kv[1][1] + kv[1][3]))[:top]
        lines = [f"{'op':24s} {'calls':>7s} {'forward ms':>11s} {'backward ms':>12s} {'total ms':>10s} {'share':>6s}"]
        for name, (fc, fs, bc, bs) in rows:
            share = (fs + bs) / self.wall if self.wall else 0.0
            lines.append(f"{name:24s} {max(fc, bc):7d} {fs * 1e3:11.2f} {bs * 1e3:12.2f} {(fs + bs) * 1e3:10.2f} {share:6.1%}")
        traced = sum(r[1] + r[3] for r in self.stats.values())
        lines.append(f"{'(all ops)':24s} {'':7s} {'':11s} {'':12s} {traced * 1e3:10.2f} "
                     f"{traced / self.wall if self.wall else 0:6.1%}  of {self.wall * 1e3:.2f} ms wall")
        return "\n".join(lines)
