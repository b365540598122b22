"""Training steps replayed as CUDA graphs: each batch shape's step recorded once, then one launch a
step (lesson 11; TrainingConfig(cuda_graphs=True), `--cuda-graphs`; the GPU only).

Eager CuPy launches every kernel from Python: the small preset's step spent more of the host's time
in it than PyTorch eager's whole step takes (benchmarks/README.md, 'The GPU run'). A CUDA graph
holds the kernels of one step as the GPU runs them; a replay launches them all at once, with no
Python between them. What a replay needs, and gets here:
- the same shapes: one graph per batch shape (a token-batched epoch repeats its shapes every epoch);
- the same memory: each batch is copied into the input buffers its graph was recorded on; the
  gradients, Adam's moments, the parameters and the loss live in arrays made before the recording.
  Memory allocated while recording belongs to the graph (CuPy's MemoryAsyncPool: stream-ordered
  allocations become graph nodes) and must be freed inside it (a garbage collection closes the
  recording: no cycle keeps any);
- the numbers that change from step to step in device memory: Adam's seven (lr and the bias
  corrections, kernels.adam_from) written before each replay, and the dropout generator's states
  re-seeded in place before it, as the eager step does (backend.rng);
- nothing that waits for the GPU, and no cuBLAS through CuPy, while recording: CuPy refuses cuBLAS
  inside a capture, so every GEMM goes through cublas.py (backend.gemm) while graphs are on.
The same kernels in the same order on the same numbers: a replayed step gives the eager step's bits
(tests/test_graphs.py holds them equal on a GPU).
"""
import gc

import numpy as np

from .. import backend
from ..fast import cublas, kernels
from ..tensor import _topological_order

# a Batch's arrays, in model.loss's order
INPUTS = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask")


def memory_mb(graphs=None):
    """The GPU memory pools' bytes in use, in MB: CuPy's default pool, and the pool of `graphs` (a
    StepGraphs) where given."""
    used = backend.xp.get_default_memory_pool().used_bytes()
    return (used + (graphs.pool.used_bytes() if graphs else 0)) / 2**20


class StepGraphs:
    """Training steps of `model` with Adam `optimizer` (every parameter updated at every step, a
    batch per update, one process), each batch shape's recorded as a CUDA graph on its second sight
    and replayed from its third; up to `max_graphs` shapes (others run eagerly). step(batch, lr) ->
    the loss (device scalar). A recording or a replay that fails is kept in `failed` (the Trainer
    logs it): no shape is recorded after it; a failed recording keeps the graphs recorded before it,
    a failed replay drops them all."""

    @staticmethod
    def check(ranks):
        """Refuse, before any work, what cannot replay: the CPU, several processes."""
        if backend.device != "gpu" or ranks > 1:
            raise ValueError("cuda_graphs needs the GPU (mt.use('gpu')) and one process: "
                             + ("this run is on the CPU" if backend.device != "gpu"
                                else f"{ranks} ranks here"))

    def __init__(self, model, optimizer, max_graphs=256, on_failure=None):
        StepGraphs.check(1)
        if len(set(optimizer.t)) > 1:
            raise ValueError("cuda_graphs: every parameter must have had the same number of Adam "
                             f"updates (got {sorted(set(optimizer.t))}): a replay updates them all "
                             "together")
        xp = backend.xp
        # stream-ordered: allocations a recording can hold (arrays made before stay put)
        self.pool = xp.cuda.MemoryAsyncPool()
        xp.cuda.set_allocator(self.pool.malloc)
        backend.gemm = cublas.matmul                         # GEMMs a recording can hold
        self.model = model
        self.opt = optimizer
        self.max_graphs = int(max_graphs)
        self.stream = xp.cuda.Stream(non_blocking=True)     # a capture needs a stream of its own
        self.numbers = {dtype: xp.zeros(7, dtype) for dtype in optimizer.flat}   # Adam's, per dtype
        self.graphs = {}    # (src shape, tgt shape) -> (graph, input buffers, loss buffer)
        self.seen = set()   # shapes stepped eagerly once (compiled, warmed): recorded the next time
        self.counts = {"eager": 0, "recorded": 0, "replayed": 0}
        self.failed = None  # why a recording or a replay failed, if one did
        self.on_failure = on_failure  # called once with that sentence (the Trainer logs it)

    def close(self):
        """Give the GEMMs back to CuPy and drop the graphs (their memory with them)."""
        backend.gemm = None
        self.graphs.clear()

    def step(self, batch, lr):
        """One update on `batch` (a data.Batch, its arrays on the device) at learning rate lr."""
        xp = backend.xp
        arrays = [getattr(batch, name) for name in INPUTS]
        key = (batch.src.shape, batch.tgt_in.shape)
        outer = xp.cuda.get_current_stream()
        # re-seeded in place (as the eager step, at its first draw) on the caller's stream, which
        # ours waits for, with what it queued
        backend.rng()
        self.stream.wait_event(outer.record())
        with self.stream:
            self._adam_numbers(lr)
            entry = self.graphs.get(key)
            if entry is not None:
                graph, buffers, loss = entry
                for buffer, a in zip(buffers, arrays):
                    xp.copyto(buffer, a)                # into the arrays it was recorded on
                try:
                    graph.launch(self.stream)
                except Exception as e:              # refused before it ran: eager from now on
                    self._fail(f"a replay: {type(e).__name__}: {e}", keep=False)
                    entry = None
            if entry is not None:
                self.counts["replayed"] += 1
                loss = loss.copy()                  # the buffer is the next replay's
            else:
                loss = xp.zeros((), xp.float32)
                self._body(arrays, loss, check=not self.counts["eager"])
                self.counts["eager"] += 1
                if key in self.seen and self.failed is None and len(self.graphs) < self.max_graphs:
                    self._record(key, arrays)
                self.seen.add(key)
        outer.wait_event(self.stream.record())      # the caller's later work after it
        return loss

    def _adam_numbers(self, lr):
        """Adam's host bookkeeping of one step (Adam.count_step, after gradient_buffers(): every
        parameter holds its view of the flat gradient buffer, so every t advances alike) and its
        seven numbers on the device."""
        self.opt.gradient_buffers()
        runs = self.opt.count_step(lr)
        numbers = self.opt.update_numbers(runs[0][3])
        xp = backend.xp
        # a host-to-device copy on our stream (CuPy's setitem takes no host array)
        for dtype, device_numbers in self.numbers.items():
            xp.copyto(device_numbers, xp.asarray(np.array(numbers, dtype)))

    def _body(self, inputs, loss_out, check=False):
        """The step's device work, run eagerly or recorded: gradients zeroed in their buffers, the
        loss and its backward pass (leaf gradients added into the buffers), the loss kept, Adam on
        every parameter. check (the first step): refuse a parameter that the loss does not reach
        (Adam would move it)."""
        opt = self.opt
        for p, grad in zip(opt.params, opt._grads):          # .grad: views into the flat buffers
            p.grad = grad
        for flat in opt.flat.values():
            flat["grad"].fill(0)
        loss = self.model.loss(*inputs)
        if check:
            reached = set(map(id, _topological_order(loss)))       # every node needing a gradient
            unused = [i for i, p in enumerate(opt.params) if id(p) not in reached]
            if unused:
                raise ValueError(f"cuda_graphs: parameters {unused[:5]} take no part in the loss: "
                                 f"a replay updates every parameter at every step, so train "
                                 f"without cuda_graphs")
        loss.backward()
        loss_out[...] = loss.data
        for dtype, flat in opt.flat.items():
            kernels.adam_from(flat["data"], flat["grad"], flat["m"], flat["v"], self.numbers[dtype])

    def _record(self, key, inputs):
        """Record _body on buffers of this shape (this batch copied in; recording runs nothing)."""
        xp = backend.xp
        buffers = [a.copy() for a in inputs]
        loss = xp.zeros((), xp.float32)
        # older garbage freed now, not as free nodes of this recording
        gc.collect()
        self.stream.begin_capture()
        error = None
        try:
            self._body(buffers, loss)
            # arrays the recording made and a cycle holds: freed inside it
            gc.collect()
        except Exception as e:               # what cannot be recorded
            error = e
        try:
            graph = self.stream.end_capture()
        except Exception as e:               # an invalidated recording
            error = error or e
        # (out of memory for one more graph, say): the recorded replay
        if error is not None:
            return self._fail(f"recording: {type(error).__name__}: {error}", keep=True)
        self.graphs[key] = (graph, buffers, loss)
        self.counts["recorded"] += 1

    def _fail(self, what, keep):
        """No more recordings; the graphs recorded kept (keep) or dropped. Says why, once."""
        self.failed = what
        if not keep:
            self.graphs.clear()
        if self.on_failure is not None:
            n = len(self.graphs)
            rest = (f"the graphs of the {n} batch shape{'s' * (n != 1)} recorded go on replaying, "
                    f"every other step runs eagerly from here"
                    if n else "every step runs eagerly from here")
            self.on_failure(f"cuda_graphs: {what}; {rest}")
