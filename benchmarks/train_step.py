"""Training-step speed and memory: forward + loss + backward + Adam + schedule, on batches shaped
like Multi30k's, for the tiny, small and base presets; side by side with an equivalent PyTorch eager
model.

    python benchmarks/train_step.py --preset small            # ours only
    python benchmarks/train_step.py --preset small --torch    # ours and PyTorch (if installed), one
                                                              # run
    python benchmarks/train_step.py --preset tiny small base --torch --steps 10
    python benchmarks/train_step.py --preset tiny --torch --rounds 5
                                                              # alternating: a ratio
                                                              # a noisy machine keeps
    python benchmarks/train_step.py --preset tiny small --torch --ranks 1  # one rank each
    python benchmarks/train_step.py --device gpu --data-dir data/multi30k        # on CuPy
    python benchmarks/train_step.py --device gpu --torch --tf32 --json tf32.json
                                                              # TF32 matmuls, both sides

Batches: sentence lengths from train.{de,en}.gz in --data-dir (default: ../shared/data/multi30k
where it exists; word counts x 1.25 for BPE; without it, a generated length distribution, with a
warning), random token ids, pairs sorted by length and cut into batches of at most --max-tokens
padded target tokens; the same batches for both frameworks. --tf32 lets float32 matmuls use TF32
tensor cores on both sides (CUPY_TF32=1; torch.backends.cuda.matmul.allow_tf32); without it both
compute in full FP32.

Model FLOPs count 3 x the forward pass's matmul FLOPs (2mnk each) on padded shapes: per encoder
layer 2BS(3D^2 + D^2 + 2DF) + 4BS^2 D; per decoder layer 2BT(3D^2 + 2D^2 + 2DF) + 4BT^2 D + 4BSD^2 +
4BTSD; the output projection 2BTDV. The ceiling is a large float32 matmul measured by this script.
The step time is the median of steps timed one by one (a sync after each); on a GPU the same steps
are then run again queued back to back, one sync at the end, as the Trainer runs them (it reads the
losses a few steps at a time): "pipelined", where the host's launching of step i + 1 hides under the
GPU's step i. Each framework runs in its own subprocess (with --rounds R, R of each, alternating),
so peak memory (the growth of RSS from before the first step to its peak, the warm-up included, so
Adam's moments and the memory an allocator keeps for the next step count; on a GPU the most bytes
lent to live arrays at once, by CuPy's pool or PyTorch's allocator) belongs to one framework alone.
--ranks N runs each framework as N data-parallel ranks: ours as N threads of one process, a core
each (distributed.run_threads, as `examples/multi30k.py` trains by default on a CPU), PyTorch as N
processes of cores / N threads each (mpiexec, DistributedDataParallel on gloo; skipped where mpiexec
and mpi4py are not installed). Each rank takes rows r, r + N, ... of every batch, the gradients are
summed over the ranks, and the step's time is rank 0's (the sum makes every rank wait
for the slowest); memory is the process's, or the sum over PyTorch's processes. Its rounds alternate
with the one-rank runs of the same preset when --ranks is 1 N. By default on a CPU both frameworks
run one rank and the ranks ours trains with by default (distributed.default_ranks(): 2 on 2
cores or more), and the summary gives three ratios a preset: one rank each, 2 ranks each, and one
process each as it trains by default (ours as 2 thread ranks, as examples/multi30k.py starts them;
PyTorch eager in one process, as a training loop runs unless torchrun starts it).
Ours runs as the Trainer does, with host.keep_freed_memory() (glibc keeps freed arrays in its heap:
no page faults after the first step); --torch-keep-freed gives PyTorch the same glibc settings
through its environment variables, for a comparison at equal allocators.
"""
import argparse
import functools
import gzip
import itertools
import json
import math
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minitransformer.run import distributed  # noqa: E402
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
GENERATED = "generated (no Multi30k train.de.gz/train.en.gz given)"
VOCAB = {"tiny": 8000, "small": 8000, "base": 37000, "big": 37000}


def sentence_lengths(data_dir, n_max=29000, seed=0):
    """(source, target) token lengths: the word counts x 1.25 of data_dir's Multi30k train files, or
    a generated distribution when data_dir is None."""
    if data_dir is not None:
        src, tgt = Path(data_dir) / "train.de.gz", Path(data_dir) / "train.en.gz"
        with gzip.open(src, "rt", encoding="utf-8") as f, gzip.open(tgt, "rt",
                                                                    encoding="utf-8") as g:
            lens = [(len(a.split()), len(b.split())) for a, b in zip(f, g)]
        source = "multi30k train"
    else:
        rng = np.random.default_rng(seed)
        w = np.clip(rng.gamma(6.0, 2.1, n_max).round(), 3, 40).astype(int)
        lens = list(zip((w * rng.uniform(0.85, 1.15, n_max)).round().astype(int), w))
        source = GENERATED
    lens = [(max(1, round(a * 1.25)), max(1, round(b * 1.25))) for a, b in lens[:n_max]]
    return lens, source


def lengths_folder(parser, data_dir):
    """The folder of the Multi30k train files whose lengths the batches take: --data-dir (refused
    through `parser`, before any work, where it lacks them), else ../shared's where present, else
    None (generated lengths, said on stderr)."""
    if data_dir is None and (SHARED / "train.de.gz").exists() and (SHARED / "train.en.gz").exists():
        return SHARED
    if data_dir is not None:
        missing = [n for n in ("train.de.gz", "train.en.gz") if not (data_dir / n).is_file()]
        if missing:
            parser.error(f"--data-dir {data_dir} holds no {' or '.join(missing)}: give the "
                         f"Multi30k folder")
        return data_dir.resolve()
    print(f"WARNING: no Multi30k train files (no --data-dir, and {SHARED} is absent): the batches "
          f"take GENERATED sentence lengths, not Multi30k's; give --data-dir for comparable "
          f"figures",
          file=sys.stderr)
    return None


def make_batches(vocab, max_tokens, n_batches, data_dir, seed=0):
    """Length-sorted batches of at most `max_tokens` padded target tokens
    (<s> y), random ids >= 3."""
    lens, source = sentence_lengths(data_dir)
    order = sorted(range(len(lens)), key=lambda i: (lens[i][1], lens[i][0]))
    plans, cur = [], []
    for i in order:
        t = max([lens[j][1] for j in cur] + [lens[i][1]]) + 1
        if cur and (len(cur) + 1) * t > max_tokens:
            plans.append(cur)
            cur = []
        cur.append(i)
    plans.append(cur)
    rng = np.random.default_rng(seed)
    chosen = [plans[k]
              for k in rng.choice(len(plans), size=min(n_batches, len(plans)), replace=False)]
    batches = []
    for plan in chosen:
        s_len = max(lens[i][0] for i in plan) + 1           # x </s>
        t_len = max(lens[i][1] for i in plan) + 1           # <s> y
        src = np.zeros((len(plan), s_len), np.int64)
        tgt = np.zeros((len(plan), t_len + 1), np.int64)
        for r, i in enumerate(plan):
            src[r, : lens[i][0] + 1] = rng.integers(3, vocab, lens[i][0] + 1)
            tgt[r, 0] = 1
            tgt[r, 1: lens[i][1] + 2] = rng.integers(3, vocab, lens[i][1] + 1)
        batches.append((src, tgt[:, :-1], tgt[:, 1:]))
    return batches, source


def forward_flops(cfg, B, S, T):
    D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    enc = 2 * B * S * (3 * D * D + D * D + 2 * D * F) + 4 * B * S * S * D
    dec = 2 * B * T * (3 * D * D + 2 * D * D
                       + 2 * D * F) + 4 * B * T * T * D + 4 * B * S * D * D + 4 * B * T * S * D
    return cfg.n_encoder_layers * enc + cfg.n_decoder_layers * dec + 2 * B * T * D * V


def matmul_ceiling(xp, sync, n=2048, reps=5):
    """FLOP/s of an n^3 float32 matmul, as ours runs one (the BLAS on the threads it has here)."""
    a = xp.ones((n, n), dtype=np.float32)
    a @ a
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        a @ a
    sync()
    return 2 * n ** 3 * reps / (time.perf_counter() - start)


def free_port():
    """A TCP port free on this machine now (for the PyTorch ranks' rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def shard(batch, rank, size):
    """Rank `rank`'s part of a length-sorted batch (rows rank, rank + size, ...) and its share of
    the batch's target tokens (the weight of its mean loss in the mean over all ranks' tokens)."""
    if len(batch[0]) < size:                    # decided alike on every rank: none is left waiting
        raise SystemExit(f"a batch of {len(batch[0])} sentence(s) cannot give each of {size} ranks "
                         f"one: raise --max-tokens")
    part = tuple(a[rank::size] for a in batch)
    return part, float((part[2] != 0).sum() / (batch[2] != 0).sum())


def run_ours(preset, batches, steps, device, cuda_graphs=False):
    import minitransformer as mt
    import minitransformer.functional as F
    from minitransformer import backend
    from minitransformer.run import host
    world = distributed.world()
    mt.use(device)
    host.keep_freed_memory()  # as the Trainer does: freed arrays stay in the heap for the next step
    mt.seed(0)
    cfg = getattr(mt.TransformerConfig, preset)(vocab_size=VOCAB[preset])
    model = mt.Transformer(cfg)
    opt = mt.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    sched = mt.optim.WarmupSchedule(cfg.d_model, warmup_steps=4000)
    # as the Trainer does: rank threads hold one copy, each updating its part
    shared = world.share_(opt)
    xp = backend.xp
    dev = []
    for batch in batches:
        (src, tgt_in, tgt_out), share = shard(batch, world.rank, world.size)
        causal = np.tril(np.ones((tgt_in.shape[1],) * 2, bool))
        dev.append(tuple(backend.asarray(a)
                         for a in (src, tgt_in, tgt_out, (src != 0)[:, None, None, :],
                                   (tgt_in != 0)[:, None, None, :] & causal))
                   + (share,))
    step_no = [0]

    def loss_of(b):
        """The forward pass and the loss: this rank's part of the mean over every rank's tokens."""
        src, tgt_in, tgt_out, src_mask, tgt_mask, share = b
        logits = model(src, tgt_in, src_mask, tgt_mask)
        loss = F.cross_entropy(logits, tgt_out, ignore_index=cfg.pad_id,
                               label_smoothing=cfg.label_smoothing)
        return loss * share if world.size > 1 else loss

    from minitransformer.run.replay import StepGraphs
    stepper = cuda_graphs and StepGraphs(model, opt)

    def step(b):
        if stepper:
            # one update replayed as a CUDA graph (graphs.py; TrainingConfig(cuda_graphs=True))
            step_no[0] += 1
            names = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask")
            return stepper.step(types.SimpleNamespace(**dict(zip(names, b))), sched(step_no[0]))
        loss = loss_of(b)
        opt.zero_grad()
        loss.backward()
        if world.size > 1:
            loss = distributed.sum_over_ranks(world, opt, loss.data, [0, 0], own_part=shared)[0]
        step_no[0] += 1
        opt.step(lr=sched(step_no[0]))
        if shared:
            world.barrier()     # every part updated before any rank's next forward
        return loss
    # for a caller comparing replayed and eager steps
    step.parameters, step.graphs = opt.params, stepper or None
    # graphs: the async pool's
    peak = (lambda: None) if stepper else (lambda: _gpu_peak_used(xp, step, dev))
    return cfg, step, dev, backend.synchronize, xp, peak, world


def _gpu_peak_used(xp, step, batches):
    """The most bytes CuPy's memory pool lent out at once over one more pass of the batches: live
    arrays, as PyTorch's max_memory_allocated counts (the pool's total_bytes also holds freed blocks
    it keeps for reuse, which PyTorch's figure leaves out). Read by a memory hook after every
    allocation; None on the CPU."""
    if xp.__name__ != "cupy":
        return None
    pool = xp.get_default_memory_pool()

    class Peak(xp.cuda.MemoryHook):
        name, top = "train_step_peak", 0

        def malloc_postprocess(self, **kwargs):
            self.top = max(self.top, pool.used_bytes())
    hook = Peak()
    with hook:
        for b in batches:
            step(b)
    xp.cuda.Device().synchronize()
    return hook.top


def run_torch(preset, batches, steps, device):
    import torch
    from torch_reference import TorchTransformer
    import minitransformer as mt
    world = distributed.world()   # its ranks and its sums of a few numbers: the package's, over MPI
    ranks = world.size
    torch.set_num_threads(distributed.threads_per_rank(ranks))
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = (
        os.environ["CUPY_TF32"] == "1")
    torch.manual_seed(0)
    cfg = getattr(mt.TransformerConfig, preset)(vocab_size=VOCAB[preset])
    dev = "cuda" if device == "gpu" else "cpu"
    model = TorchTransformer(cfg).to(dev)
    if ranks > 1:                       # DDP's own process group, on gloo, at the port main() chose
        torch.distributed.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['TRAIN_STEP_PORT']}",
            rank=world.rank, world_size=ranks)
        # averages the gradients of the ranks
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: cfg.d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * 4000 ** -1.5))
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=cfg.pad_id,
                                        label_smoothing=cfg.label_smoothing)
    data = []
    for batch in batches:
        part, share = shard(batch, world.rank, ranks)
        # DDP divides by N
        data.append(tuple(torch.as_tensor(a, device=dev) for a in part) + (share * ranks,))

    def step(b):
        src, tgt_in, tgt_out, weight = b
        logits = model(src, tgt_in)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1)) * weight
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        return loss
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    peak = (lambda: torch.cuda.max_memory_allocated()) if dev == "cuda" else (lambda: None)
    return cfg, step, data, sync, None, peak, world


def worker(args):
    """Time one framework on one preset; print one JSON line."""
    batches, source = make_batches(VOCAB[args.preset], args.max_tokens, args.steps + args.warmup,
                                   args.data_dir)
    if args.cuda_graphs:
        # the timed steps replay, as a run's do after its first epochs: --steps batches
        # 3 times round untimed (eager, recorded,
        batches, args.warmup = batches[:args.steps] * 4, 3 * args.steps
        # replayed once: a graph's first launch uploads it,
        # 2-3 ms of host time on an H200, once), then timed
    runner = (run_torch if args.worker == "torch"
              else functools.partial(run_ours, cuda_graphs=args.cuda_graphs))
    cfg, step, data, sync, xp, peak, world = runner(args.preset, batches, args.steps, args.device)
    rss0 = rss_bytes()          # the model and the batches are made; no step yet
    for b in data[: args.warmup]:
        step(b)
    sync()
    times, flops, tokens = [], [], []
    for (src, tgt_in, _), b in zip(batches[args.warmup:], data[args.warmup:]):
        start = time.perf_counter()
        loss = step(b)
        sync()
        times.append(time.perf_counter() - start)
        flops.append(3 * forward_flops(cfg, src.shape[0], src.shape[1], tgt_in.shape[1]))
        tokens.append(int((tgt_in != 0).sum()))
    pipelined = None  # the GPU: the same steps again, one sync at the end, as the Trainer runs them
    if args.device == "gpu":    # (the host queues step i + 1 while the GPU runs step i)
        start = time.perf_counter()
        for b in data[args.warmup:]:
            loss = step(b)
        sync()
        pipelined = (time.perf_counter() - start) / len(times)
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    grown = np.array([max(maxrss - rss0, 0), maxrss], dtype=np.float64)
    if not isinstance(world, distributed.ThreadWorld):
        # processes: every rank's memory (threads: the process's)
        grown = world.sum_(grown)
    loss = float(loss.item())
    if args.worker == "torch":
        # each rank's loss is its part x N (DDP averages): their mean is the batch's
        loss = world.sum_(np.array([loss]))[0] / world.size
    if world.rank != 0:
        return
    if xp is None:
        import torch
        xp = torch
        ceiling = _torch_ceiling(torch, args.device)
    else:
        ceiling = matmul_ceiling(xp, sync)
    ceiling *= world.size   # one rank's threads measured it, alone: the machine's, as one process's
    med = statistics.median(times)
    gpu_peak = peak()       # on a GPU: one rank's (--ranks is for the CPU)
    print(json.dumps({
        "framework": args.worker, "preset": args.preset, "ms_per_step": med * 1e3,
        "ms_per_step_pipelined": pipelined and pipelined * 1e3,
        "tokens_per_s": sum(tokens) / sum(times), "flops_per_s": sum(flops) / sum(times),
        "ceiling": ceiling, "peak_mem_mb": None if args.cuda_graphs and args.worker == "ours" else
        # graphs: MemoryAsyncPool, not counted
        (gpu_peak if gpu_peak is not None else grown[0]) / 2 ** 20,
        "rss_mb": grown[1] / 2 ** 20, "ranks": world.size,
        "avg_tgt_tokens": statistics.mean(tokens),
        "avg_padded_tgt": statistics.mean(b[1].size for b in batches[args.warmup:]),
        "lengths": source, "loss": loss, "steps": len(times), "device": args.device,
        "tf32": os.environ["CUPY_TF32"] == "1"}))


def _torch_ceiling(torch, device, n=2048, reps=5):
    dev = "cuda" if device == "gpu" else "cpu"
    a = torch.ones((n, n), device=dev)
    a @ a
    if dev == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        a @ a
    if dev == "cuda":
        torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - start)


def error_line(stderr):
    """The line that says why a worker failed: its stderr's last, above the banner Open MPI's
    mpiexec prints after a rank's non-zero exit (a block that opens with a line of dashes)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    banner = next((i for i, line in enumerate(lines) if set(line.strip()) == {"-"}), len(lines))
    return (lines[:banner] or lines or ["(no output)"])[-1]


def worker_env(env, framework, ranks, torch_keep_freed=False, device="cpu"):
    """The environment of one worker run: `env` with MINITRANSFORMER_DEVICE set to the worker's
    device (a GPU suite's "gpu" would start CUDA in every CPU rank), plus glibc's settings of
    host.keep_freed_memory for PyTorch with --torch-keep-freed, plus one BLAS thread per core across
    the ranks and a free port for gloo when ranks > 1."""
    env = dict(env, MINITRANSFORMER_DEVICE=device)
    if framework == "torch" and torch_keep_freed:
        env.update(MALLOC_MMAP_MAX_="0", MALLOC_TOP_PAD_=str(1 << 30))
    if ranks > 1 and framework == "torch":
        env.update(OMP_NUM_THREADS=str(distributed.threads_per_rank(ranks)),
                   TRAIN_STEP_PORT=str(free_port()))
    return env


def ratio_pairs(ranks, default):
    """(ours' ranks, PyTorch's ranks, label) of each ratio the summary gives: like for like at every
    value of --ranks, then each as it trains by default (ours in `default` ranks, PyTorch
    eager in one process)."""
    pairs = [(n, n, f"{n} rank{'s' * (n > 1)} each") for n in ranks]
    if default > 1 and {1, default} <= set(ranks):
        pairs.append((default, 1,
                      f"one process each as it trains by default: ours as {default} thread ranks "
                      f"(examples/multi30k.py's default) against PyTorch eager"))
    return pairs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", nargs="+", default=["small"],
                   choices=["tiny", "small", "base", "big"])
    p.add_argument("--torch", action="store_true",
                   help="also run the PyTorch eager reference, if installed")
    p.add_argument("--steps", type=int, default=10,
                   help="timed steps, median reported (default: 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default: 2)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run each framework this many times, alternating (ours, PyTorch, ours, "
                        "...): the ratio is the median of the rounds' ratios (default: 1)")
    p.add_argument("--max-tokens", type=int, default=4096,
                   help="padded target tokens per batch at most (default: 4096)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--data-dir", type=Path,
                   help=f"where Multi30k's train.de.gz and train.en.gz are, for the sentence "
                        f"lengths (default: {SHARED} where it exists, else generated lengths)")
    p.add_argument("--tf32", action="store_true",
                   help="float32 matmuls on TF32 tensor cores, both frameworks")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="ours: each batch shape's update replayed as a CUDA graph (--device gpu); "
                        "both frameworks take --steps batches four times round, timing the fourth")
    p.add_argument("--ranks", type=int, nargs="+",
                   help="data-parallel ranks per framework (ours: threads of one process; PyTorch: "
                        "processes under mpiexec, cores / N threads each); several values "
                        "alternate, e.g. 1 2 (default on a CPU: 1 and the ranks ours trains with "
                        "by default, distributed.default_ranks(): 2 where there are 2 cores or "
                        "more; on a GPU: 1)")
    p.add_argument("--torch-keep-freed", action="store_true",
                   help="give PyTorch the heap ours sets itself (host.keep_freed_memory), through "
                        "glibc's MALLOC_MMAP_MAX_=0 and MALLOC_TOP_PAD_=1 GiB")
    p.add_argument("--json", type=Path,
                   help="also write the results (a list of JSON objects) to this file")
    p.add_argument("--worker", choices=["ours", "torch"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        args.preset, ranks = args.preset[0], args.ranks[0] if args.ranks else 1
        return distributed.run_threads(worker, (args,), ranks) if ranks > 1 else worker(args)
    # how ours trains by default
    default = distributed.default_ranks() if args.device == "cpu" else 1
    args.ranks = args.ranks or sorted({1, default})
    for option, value, low in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0),
                               ("--max-tokens", args.max_tokens, 1), ("--rounds", args.rounds, 1),
                               ("--ranks", min(args.ranks), 1)):
        if value < low:
            p.error(f"{option} must be at least {low}, got {value}")
    if args.torch_keep_freed and not args.torch:
        p.error("--torch-keep-freed sets PyTorch's heap: it needs --torch")
    if max(args.ranks) > 1 and args.device == "gpu":
        p.error("--ranks is for the CPU (one GPU here: its ranks would share it)")
    if args.cuda_graphs and args.device != "gpu":
        p.error("--cuda-graphs replays CUDA graphs: give --device gpu")
    mpi = distributed.can_launch()
    if max(args.ranks) > 1 and args.torch and not mpi:
        print(f"PyTorch runs {max(args.ranks)} ranks as processes under mpiexec, not installed "
              f"here ({distributed.INSTALL_HINT}): PyTorch in one process only")
    args.data_dir = lengths_folder(p, args.data_dir)
    results, failed = [], []
    env = {**os.environ, "CUPY_TF32": "1" if args.tf32 else "0"}
    for preset, _, ranks, fw in itertools.product(args.preset, range(args.rounds), args.ranks,
                                                  ["ours"] + ["torch"] * args.torch):
        if fw == "torch" and (not args.torch or ranks > 1 and not mpi):   # missing (said once)
            continue
        cmd = [sys.executable, __file__, "--worker", fw, "--preset", preset, "--steps",
               str(args.steps),
               "--warmup", str(args.warmup), "--max-tokens", str(args.max_tokens), "--device",
               args.device]
        cmd += ["--cuda-graphs"] if args.cuda_graphs else []
        cmd += ["--data-dir", str(args.data_dir)] if args.data_dir else []
        if ranks > 1 and fw == "ours":           # as it trains: the ranks as threads of one process
            cmd += ["--ranks", str(ranks)]
        elif ranks > 1:                         # PyTorch: DistributedDataParallel, a process a rank
            cmd = distributed.mpiexec_command(ranks) + cmd
        run_env = worker_env(env, fw, ranks, args.torch_keep_freed, args.device)
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parent,
                             env=run_env)
        if out.returncode != 0:
            tail = [error_line(out.stderr)]
            if fw == "torch" and "No module named 'torch'" in out.stderr:
                print("PyTorch is not installed: skipping the side-by-side run")
                args.torch = False
                continue
            print(f"{fw} {preset} failed: {tail[0]}")
            failed.append({"framework": fw, "preset": preset, "error": tail[0]})
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(f"{r['framework']:6s} {r['preset']:6s} x{r['ranks']} {r['ms_per_step']:9.1f} ms/step "
              f"{r['tokens_per_s']:9.0f} tgt tok/s {r['flops_per_s'] / 1e9:7.1f} GFLOP/s "
              f"({r['flops_per_s'] / r['ceiling']:5.1%} of {r['ceiling'] / 1e9:.0f}) "
              f"peak step memory {r['peak_mem_mb'] or float('nan'):7.0f} MB  loss {r['loss']:.3f}"
              + (f"  pipelined {r['ms_per_step_pipelined']:.1f} ms/step"
                 if r.get("ms_per_step_pipelined") else ""))
    for preset, (ranks, torch_ranks, label) in itertools.product(args.preset,
                                                                 ratio_pairs(args.ranks, default)):
        ours, torch = ([r for r in results
                        if (r["framework"], r["preset"], r["ranks"]) == (fw, preset, n)]
                       for fw, n in (("ours", ranks), ("torch", torch_ranks)))
        if ours and len(ours) == len(torch):            # round i of ours against round i of PyTorch
            ratios = sorted(o["ms_per_step"] / t["ms_per_step"] for o, t in zip(ours, torch))
            memory = statistics.median(o["peak_mem_mb"] / max(t["peak_mem_mb"], 1e-9)
                                       if o["peak_mem_mb"] else math.nan
                                       for o, t in zip(ours, torch))
            spread = f" (rounds: {ratios[0]:.2f}-{ratios[-1]:.2f})" if len(ratios) > 1 else ""
            print(f"{preset}, {label}: step time ours / PyTorch = "
                  f"{statistics.median(ratios):.2f}x{spread}, memory ours / PyTorch = "
                  f"{memory:.2f}x")
            if all(r.get("ms_per_step_pipelined") for r in ours + torch):
                # the GPU: steps queued back to back
                ratios = sorted(o["ms_per_step_pipelined"] / t["ms_per_step_pipelined"]
                                for o, t in zip(ours, torch))
                spread = f" (rounds: {ratios[0]:.2f}-{ratios[-1]:.2f})" if len(ratios) > 1 else ""
                print(f"{preset}, pipelined (one sync at the end, as the Trainer runs): step time "
                      f"ours / PyTorch = {statistics.median(ratios):.2f}x{spread}")
    if results:
        print(f"lengths: {results[0]['lengths']}; {results[0]['avg_tgt_tokens']:.0f} real / "
              f"{results[0]['avg_padded_tgt']:.0f} padded target tokens per batch; device "
              f"{args.device}{', TF32' if args.tf32 else ''}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "failed": failed}, indent=1) + "\n")
    return 1 if failed else 0  # PyTorch not installed is skipped; a run that failed is an error


if __name__ == "__main__":
    sys.exit(main())
