"""An experiment of 2026-11-26: is the replayed step's idle GPU time the graph's memory nodes? The replayed
small step with CuPy's MemoryAsyncPool (allocations inside a recording become graph nodes: graphs.py's
way) or with a private MemoryPool (the recording reuses the blocks the eager steps before it left cached:
no memory nodes, but freed blocks of a recording could be lent to arrays outside it: a timing only):
pipelined (one sync at the end) and one by one (the host's part, and synced), and a replay's launch call.
    python3 results/gpu-run-h200/2026-11-26-pools.py async|private     # one process per mode
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
times, synced, host, launch = [], [], [], []
for _ in range(3):
    start = time.perf_counter()
    for b in data:
        step(b)
    sync()
    times.append(round((time.perf_counter() - start) / len(data) * 1e3, 2))
for b in data:                    # one by one: the host's part (until step returns) and the whole (synced)
    start = time.perf_counter()
    step(b)
    host.append(time.perf_counter() - start)
    sync()
    synced.append(time.perf_counter() - start)
graph, *_ = next(iter(step.graphs.graphs.values()))
for _ in range(10):               # a replay's launch call alone, on the host
    sync()
    start = time.perf_counter()
    graph.launch(step.graphs.stream)
    launch.append(time.perf_counter() - start)
sync()
ms = lambda xs: round(sorted(xs)[len(xs) // 2] * 1e3, 3)  # noqa: E731
print(json.dumps({"mode": mode, "pipelined ms a step": times, "synced ms a step": ms(synced),
                  "host ms a step": ms(host), "launch ms": ms(launch), "counts": step.graphs.counts,
                  "failed": step.graphs.failed}))
