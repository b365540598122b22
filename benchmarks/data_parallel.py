"""Data-parallel training speed: one process with T BLAS threads against T ranks with one thread
each (mpiexec), the same updates of the same tokens, on the Trainer's real training step.

    python benchmarks/data_parallel.py                       # small preset, 2 ranks, 3 rounds
    python benchmarks/data_parallel.py --preset tiny --rounds 1 --steps 4   # a quick check

Three configurations, each in its own process(es), run one after the other in every round (so that a
change in the machine's load touches them alike), medians over the rounds:
  1 process, 1 thread, accum N     (the baseline of the scaling efficiency)
  1 process, N threads, accum N    (what one would run without MPI)
  N ranks, 1 thread each, accum 1  (mpiexec -n N): the same N x --max-tokens tokens per update
Batches: lengths of Multi30k's training pairs (benchmarks/train_step.py's sentence_lengths), random
ids, token-count batches of --max-tokens. Each run does --warmup untimed updates, then --steps
timed. Reported: target tokens per second, scaling efficiency (N ranks against N x one thread), the
time per update spent in the Allreduce calls (sum_over_ranks: gradients, loss, stop flags; it
includes waiting for the slower rank) and, measured apart after a barrier, the pure Allreduce of the
gradient buffer, and the bytes each rank hands to Allreduce per update.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


class TimedWorld:
    """A World that times its sums and counts their bytes (everything else passes through)."""

    def __init__(self, world):
        self.world, self.seconds, self.bytes = world, 0.0, 0

    def __getattr__(self, name):
        return getattr(self.world, name)

    def sum_(self, array, *args):
        start = time.perf_counter()
        out = self.world.sum_(array, *args)
        self.seconds += time.perf_counter() - start
        self.bytes += array.nbytes
        return out


def worker(args):
    """One configuration's run; rank 0 prints one JSON line."""
    from minitransformer import backend
    from minitransformer.run import distributed
    from minitransformer.run.training import Trainer, TrainingConfig
    from minitransformer.transformer import Transformer, TransformerConfig
    from train_step import sentence_lengths

    world = TimedWorld(distributed.world())
    lens, _ = sentence_lengths()
    rng = np.random.default_rng(0)
    vocab = 8000 if args.preset != "base" else 37000
    pairs = [(rng.integers(3, vocab, a).tolist(), rng.integers(3, vocab, b).tolist())
             for a, b in lens]
    backend.seed(0)
    model = Transformer(getattr(TransformerConfig, args.preset)(vocab_size=vocab))
    total = args.warmup + args.steps
    trainer = Trainer(model, None, pairs, None,
                      TrainingConfig(steps=total, max_tokens=args.max_tokens, accum=args.accum,
                                     warmup_steps=4000, progress=False), world=world)
    for _ in range(args.warmup):
        trainer.train_step()
    world.seconds, world.bytes, tokens = 0.0, 0, 0
    if world.size > 1:
        world.comm.Barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss, n = trainer.train_step()
        tokens += n
    float(loss)
    seconds = time.perf_counter() - start
    result = {"ranks": world.size, "threads": os.environ.get("OMP_NUM_THREADS"),
              "accum": args.accum,
              "tokens_per_s": tokens / seconds, "seconds_per_update": seconds / args.steps,
              "allreduce_s_per_update": world.seconds / args.steps,
              "bytes_per_update": world.bytes // args.steps,
              "parameters": model.num_parameters()}
    if world.size > 1:  # the gradient buffer's Allreduce alone, every rank ready (after a barrier)
        (flat,) = [f["grad"] for f in trainer.optimizer.flat.values()]
        times = []
        for _ in range(5):
            world.comm.Barrier()
            t0 = time.perf_counter()
            world.world.sum_(flat)
            times.append(time.perf_counter() - t0)
        result["pure_allreduce_s"] = statistics.median(times)
    if world.is_main:
        print("RESULT " + json.dumps(result), flush=True)


def run(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(next(line for line in out.stdout.splitlines()
                           if line.startswith("RESULT "))[7:])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small", choices=("tiny", "small", "base"),
                   help="default: small")
    p.add_argument("--ranks", type=int, default=2, help="N, at least 2 (default: 2)")
    p.add_argument("--max-tokens", type=int, default=2048,
                   help="tokens per batch and side (default: 2048)")
    p.add_argument("--steps", type=int, default=10, help="timed updates per run (default: 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed updates first (default: 2)")
    p.add_argument("--rounds", type=int, default=3, help="medians over this many (default: 3)")
    p.add_argument("--accum", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    for option, value, low in (("--ranks", args.ranks, 2), ("--max-tokens", args.max_tokens, 1),
                               ("--steps", args.steps, 1), ("--warmup", args.warmup, 0),
                               ("--rounds", args.rounds, 1)):
        if value < low:
            why = " (1 rank is the baseline itself)" if option == "--ranks" else ""
            p.error(f"{option} must be at least {low}{why}, got {value}")
    mpiexec = shutil.which("mpiexec",
                           path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if mpiexec is None:
        raise SystemExit('mpiexec not found: pip install -e ".[mpi]"')
    n = args.ranks
    common = [str(Path(__file__).resolve()), "--worker", "--preset", args.preset, "--max-tokens",
              str(args.max_tokens), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    configs = {f"1 process, 1 thread, accum {n}": ([sys.executable, *common, "--accum", str(n)], 1),
               f"1 process, {n} threads, accum {n}":
                   ([sys.executable, *common, "--accum", str(n)], n),
               f"{n} ranks x 1 thread, accum 1":
                   ([mpiexec, "-n", str(n), sys.executable, *common], 1)}
    results = {name: [] for name in configs}
    for r in range(args.rounds):
        for name, (cmd, threads) in configs.items():
            results[name].append(run(cmd, threads))
            print(f"round {r + 1}: {name}: {results[name][-1]['tokens_per_s']:.0f} tokens/s",
                  file=sys.stderr)
    med = {name: {k: statistics.median(x[k] for x in runs) for k in runs[0]
                  if isinstance(runs[0][k], (int, float))}
           for name, runs in results.items()}
    names = list(configs)
    base, threads, ranks = (med[k] for k in names)
    print(f"\n{args.preset} preset ({int(base['parameters']):,} parameters), {n} x "
          f"{args.max_tokens} tokens per update, medians of {args.rounds} rounds of {args.steps} "
          f"updates\n")
    print("| configuration | target tokens/s | s per update | vs 1 thread | Allreduce s per update "
          "| MiB per update |")
    print("|---|---|---|---|---|---|")
    for name in names:
        m = med[name]
        comm = (f"{m['allreduce_s_per_update']:.3f} (pure: {m['pure_allreduce_s']:.3f})"
                if "pure_allreduce_s" in m else "-")
        mib = f"{m['bytes_per_update'] / 2**20:.1f}" if m["bytes_per_update"] else "-"
        print(f"| {name} | {m['tokens_per_s']:.0f} | {m['seconds_per_update']:.3f} | "
              f"{m['tokens_per_s'] / base['tokens_per_s']:.2f}x | {comm} | {mib} |")
    print(f"\nscaling efficiency of {n} ranks: "
          f"{ranks['tokens_per_s'] / (n * base['tokens_per_s']):.2f} (tokens/s against {n} x one "
          f"thread); against one process with {n} threads: "
          f"{ranks['tokens_per_s'] / threads['tokens_per_s']:.2f}x")
    print(json.dumps({"preset": args.preset, "ranks": n, "results": results}))


if __name__ == "__main__":
    main()
