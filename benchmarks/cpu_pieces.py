"""What each CPU speed piece of an earlier version saved on one rank thread's update, as a share of
it.

    python benchmarks/cpu_pieces.py --rev 9f55391          # the version that still had them
                                                           # (cores.py)

The recipe trains on a CPU as rank threads (distributed.run_threads), each on one core with the BLAS
on one thread. A speed piece is kept behind the fast/ seam only where it pays more than 3% of that
update. This script imports the package as of --rev (which must still hold
minitransformer/cores.py), runs it as a rank thread does (cores.one_thread, the BLAS on one thread)
and times, interleaved in one process, each piece against the plain NumPy it replaced, on the
recipe's shapes (small preset, 1,024 tokens a rank, vocabulary 8,000, dropout 0.2, pre-LN):
  - cross-entropy over cache-sized chunks of rows (cores.cache_rows) against the whole (N, V) pass;
  - dropout's mask from PCG64's bits compared as integers (cores.keep) against rng.random(...) >= p,
    counted over the elements one update draws;
  - the weight gradients' GEMM as (b^T a)^T where a^T b is wider than tall (cores.transpose_matmul)
    against a.T @ b, over the model's (d_in, d_out) shapes;
  - Adam in pieces of 2^18 elements (the cache) against each run updated whole.
It prints each piece's median saving in milliseconds and as a share of the median update.
"""
import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # a rank thread's BLAS: one thread (before NumPy loads)
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def import_revision(rev, where, parser):
    """The package as of git revision `rev`, imported under its own name from a temporary directory;
    a revision that is not one, or has no cores.py, refused by parser.error."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "minitransformer"],
                         capture_output=True)
    if rev.startswith("-") or tar.returncode != 0:
        parser.error(f"--rev {rev} is not a commit of this repository")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(where, filter="data")
    if not (Path(where) / "minitransformer" / "cores.py").exists():
        parser.error(f"--rev {rev} has no minitransformer/cores.py: give a revision that has it")
    sys.path.insert(0, where)
    import minitransformer
    return minitransformer


def median_ms(fn, repeats):
    """The median time of fn() in milliseconds, after two calls to warm it."""
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def pair(a, b, repeats):
    """(median ms of a, median ms of b), timed alternately."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(median_ms(a, 1))
        tb.append(median_ms(b, 1))
    return statistics.median(ta), statistics.median(tb)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rev", default="9f55391",
                   help="a revision holding cores.py (default: 9f55391)")
    p.add_argument("--repeats", type=int, default=15, help="timed rounds per piece (default: 15)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        mt = import_revision(args.rev, tmp, p)
        cores = mt.cores
        rng = np.random.default_rng(0)
        with cores.one_thread():
            config = mt.TransformerConfig.small(vocab_size=8000, norm_first=True, dropout=0.2,
                                                label_smoothing=0.2)
            model = mt.Transformer(config)
            adam = mt.optim.Adam(model.parameters(), lr=1e-4)
            pairs = [(rng.integers(3, 8000, 16).tolist(), rng.integers(3, 8000, 16).tolist())
                     for _ in range(64)]
            batch = mt.data.Batch(pairs, 0, 1, 2)             # 64 x 16: 1,024 target tokens

            def update():
                loss = model.loss(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask,
                                  batch.tgt_mask)
                loss.backward()
                adam.step()
                adam.zero_grad()
            drawn = []
            keep = cores.keep
            cores.keep = lambda g, shape, q: drawn.append(int(np.prod(shape))) or keep(g, shape, q)
            update()
            cores.keep = keep
            step = median_ms(update, args.repeats)
            print(f"{args.rev}: one rank thread's update (small, 1,024 tokens): {step:.1f} ms; "
                  f"each piece's saving, median over {args.repeats} alternating rounds:")
            rows = []
            z = rng.standard_normal((1024, 8000)).astype(np.float32)
            t = rng.integers(3, 8000, 1024)

            def ce(chunked):
                def run():
                    before = cores.cache_rows
                    if not chunked:
                        cores.cache_rows = lambda a: None
                    x = mt.tensor(z, requires_grad=True)
                    mt.functional.cross_entropy(x, t, ignore_index=0,
                                                label_smoothing=0.2).backward()
                    cores.cache_rows = before
                return run
            rows.append(("cross-entropy in cache-sized chunks",
                         *pair(ce(False), ce(True), args.repeats)))
            g = np.random.default_rng(1)
            n = sum(drawn)
            plain_draw = lambda: g.random(n, dtype=np.float32) >= 0.2
            rows.append((f"dropout masks as integer bits ({n:,} a step)",
                         *pair(plain_draw, lambda: keep(g, (n,), 0.2), args.repeats)))
            shapes = [(512, 1536), (512, 512), (512, 1024), (512, 2048), (2048, 512)]
            counts = [6, 12, 6, 12, 12]                     # per update: encoder and decoder layers
            xs = {d: rng.standard_normal((1024, d)).astype(np.float32)
                  for d in (512, 1024, 1536, 2048)}
            plain_gemm = lambda: [xs[a].T @ xs[b] for (a, b), c in zip(shapes, counts)
                                  for _ in range(c)]
            trick = lambda: [cores.transpose_matmul(xs[a], xs[b])
                             for (a, b), c in zip(shapes, counts) for _ in range(c)]
            rows.append(("weight gradients as (b^T a)^T", *pair(plain_gemm, trick, args.repeats)))
            flat = adam.flat[np.dtype(np.float32)]
            names = ("data", "grad", "m", "v", "scratch")
            size = flat["data"].size

            def adam_update(piece):
                return lambda: [adam._update(*(flat[k][lo:lo + piece] for k in names), 1)
                                for lo in range(0, size, piece)]
            rows.append(("Adam in pieces of 2^18", *pair(adam_update(size), adam_update(1 << 18),
                                                         args.repeats)))
        for name, plain, piece in rows:
            print(f"  {name:44s} plain {plain:8.2f} ms  piece {piece:8.2f} ms  saves "
                  f"{plain - piece:6.2f} ms = {100 * (plain - piece) / step:5.2f}% of the update")


if __name__ == "__main__":
    main()
