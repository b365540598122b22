"""Cost of one autograd node (forward + backward) on tiny tensors, where the engine's bookkeeping,
not the arithmetic, is the cost: minitransformer vs the same arithmetic in raw NumPy (forward and
the hand-written backward), and vs PyTorch's eager autograd when PyTorch is installed (optional).

    python benchmarks/engine_overhead.py [--size 16] [--depth 100] [--repeats 30]

The graph: h = x; `depth` times h = relu(h * w + b); loss = sum(h): 3 * depth + 1 nodes.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import minitransformer as mt  # noqa: E402


def time_per_node(fn, n_nodes, repeats):
    """Median over `repeats` runs of fn(), divided by the node count, in microseconds."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / n_nodes * 1e6


def autograd_step(x, w, b, depth):
    """The graph for an autograd library whose tensors x, w, b require gradients
    (ours or PyTorch)."""
    def step():
        h = x
        for _ in range(depth):
            h = (h * w + b).relu()
        h.sum().backward()
        x.grad = w.grad = b.grad = None
    return step


def ours(x0, w0, b0, depth):
    return autograd_step(*(mt.tensor(a, requires_grad=True) for a in (x0, w0, b0)), depth)


def raw_numpy(x0, w0, b0, depth):
    def step():
        hs, h = [], x0
        for _ in range(depth):
            pre = h * w0 + b0
            hs.append((h, pre))
            h = np.maximum(pre, 0)
        g = np.ones_like(h)
        gw, gb = np.zeros_like(w0), np.zeros_like(b0)
        for h_in, pre in reversed(hs):
            g = g * (pre > 0)
            gw += g * h_in
            gb += g
            g = g * w0
    return step


def torch_eager(x0, w0, b0, depth):
    import torch
    torch.set_num_threads(1)
    return autograd_step(*(torch.tensor(a, requires_grad=True) for a in (x0, w0, b0)), depth)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=16,
                   help="tensors are (size, size) float32 (default: 16)")
    p.add_argument("--depth", type=int, default=100,
                   help="blocks of (mul, add, relu) (default: 100)")
    p.add_argument("--repeats", type=int, default=30, help="the median is reported (default: 30)")
    args = p.parse_args()
    for option, value in (("--size", args.size), ("--depth", args.depth),
                          ("--repeats", args.repeats)):
        if value < 1:
            p.error(f"{option} must be at least 1, got {value}")
    # every node's (size, size) float32 output and its gradient
    need = 2 * 3 * args.depth * args.size ** 2 * 4
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > memory / 2:
        p.error(f"--size {args.size} with --depth {args.depth} needs about {need / 2 ** 30:,.1f} "
                f"GiB, more than half of this machine's {memory / 2 ** 30:.0f} GiB: use a smaller "
                f"--size or --depth")
    rng = np.random.default_rng(0)
    x0, b0 = (rng.standard_normal((args.size, args.size)).astype(np.float32) for _ in range(2))
    # |w| < 1: no overflow at depth
    w0 = rng.uniform(0.5, 1.0, (args.size, args.size)).astype(np.float32)
    n = 3 * args.depth + 1
    rows = [("minitransformer", time_per_node(ours(x0, w0, b0, args.depth), n, args.repeats)),
            ("raw NumPy (same arithmetic)",
             time_per_node(raw_numpy(x0, w0, b0, args.depth), n, args.repeats))]
    try:
        import torch
        rows.append((f"PyTorch {torch.__version__} eager",
                     time_per_node(torch_eager(x0, w0, b0, args.depth), n, args.repeats)))
    except ImportError:
        rows.append(("PyTorch eager", None))
    print(f"per node, forward + backward, ({args.size}, {args.size}) float32, {n} nodes, median of "
          f"{args.repeats}")
    ref = rows[0][1]
    for name, us in rows:
        print(f"  {name:32s} " + (f"{us:7.2f} us   (minitransformer / this = {ref / us:.2f})" if us
                                  else "not installed"))


if __name__ == "__main__":
    main()
