"""Session 24's experiment: is the replayed step's idle GPU time the graph's memory nodes? The replayed
small step with CuPy's MemoryAsyncPool (allocations inside a recording become graph nodes: graphs.py's
way) or with a private MemoryPool (the recording reuses the blocks the eager steps before it left cached:
no memory nodes, but freed blocks of a recording could be lent to arrays outside it: a timing only).
    python3 results/gpu-run-h200/session24-pools.py async|private     # one process per mode
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, "benchmarks")
from train_step import VOCAB, make_batches, run_ours  # noqa: E402

from minitransformer import backend, graphs  # noqa: E402

mode = sys.argv[1]
if mode == "private":
    made = graphs.StepGraphs.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.pool = backend.xp.cuda.MemoryPool()
        backend.xp.cuda.set_allocator(self.pool.malloc)
    graphs.StepGraphs.__init__ = init
batches, _ = make_batches(VOCAB["small"], 8192, 20, Path("data/multi30k"))
cfg, step, data, sync, *_ = run_ours("small", batches, 20, "gpu", cuda_graphs=True)
for b in data * 2:
    step(b)
sync()
times = []
for _ in range(3):
    start = time.perf_counter()
    for b in data:
        step(b)
    sync()
    times.append(round((time.perf_counter() - start) / len(data) * 1e3, 2))
print(json.dumps({"mode": mode, "ms a step": times, "counts": step.graphs.counts, "failed": step.graphs.failed}))
