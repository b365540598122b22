"""Where the GPU's time goes in one training step, kernel by kernel: ours (eager, or replayed with
--cuda-graphs) and PyTorch eager's, the same batches, on the same GPU. mt.profile times our ops from
the host; this reads the GPU's own clock: PyTorch's profiler (CUPTI) records every kernel the
process runs, CuPy's and cuBLAS's included. Needs PyTorch (a benchmark tool, never a dependency
of the package).

    python benchmarks/gpu_kernel_profile.py --preset small --data-dir data/multi30k
    python benchmarks/gpu_kernel_profile.py --preset base --cuda-graphs --top 30 --json prof.json

Per framework: the GPU's busy time a step (kernels, copies, fills), the wall time a step, and the
kernels by name with their calls and time a step. On the CPU (--device cpu, the suite's dry run) the
table lists PyTorch's CPU ops instead, and ours has none. The GPU check (benchmarks/gpu_check.py)
runs it for the small preset with the time it has left.
"""
import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import VOCAB, lengths_folder, make_batches, run_ours, run_torch  # noqa: E402

GPU_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")


def profile(runner, preset, batches, device, steps):
    """Run `steps` profiled steps after the batches 3 times round unprofiled (compiles, warms,
    records the graphs, replays them once); the events of the GPU (or, on the CPU, the ops) summed
    by name, per step."""
    import torch
    from torch.profiler import ProfilerActivity
    cfg, step, data, sync, *_ = runner(preset, batches, steps, device)
    for b in data * 3:                 # 3 times round: a graph is recorded on a shape's second step
        step(b)                        # and uploaded at its first replay (once)
    sync()
    gpu = device == "gpu"
    activities = [ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        for i in range(steps):
            step(data[i % len(data)])
        sync()
        wall = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
        events = json.loads(Path(tmp, "trace.json").read_text())["traceEvents"]
    by_name = collections.defaultdict(lambda: [0, 0.0])      # name -> [calls, microseconds]
    timed = []                                              # (start, end, name) of the GPU's events
    for e in events:
        if e.get("ph") == "X" and (e.get("cat") in GPU_EVENTS if gpu else e.get("cat") == "cpu_op"):
            by_name[e["name"]][0] += 1
            by_name[e["name"]][1] += e.get("dur", 0)
            timed.append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    busy = sum(us for _, us in by_name.values())
    result = {"wall_ms": wall * 1e3 / steps, "busy_ms": busy / 1e3 / steps, "device": device,
              "by_name": {name: (calls / steps, us / 1e3 / steps)
                          for name, (calls, us) in by_name.items()}}
    if gpu:                                       # the idle time between events, and where it falls
        timed.sort()
        gaps = sorted(((b[0] - a[1], a[2]) for a, b in zip(timed, timed[1:])), reverse=True)
        idle = sum(max(g, 0.0) for g, _ in gaps)
        result["gaps"] = {"events a step": len(timed) / steps, "idle ms a step": idle / 1e3 / steps,
                          "median gap us": gaps[len(gaps) // 2][0] if gaps else 0.0,
                          "largest (us, after)": [(round(g, 1), n[:60]) for g, n in gaps[:8]]}
    return result


def table(label, result, top):
    lines = [f"## {label}: {result['wall_ms']:.2f} ms a step wall, {result['busy_ms']:.2f} ms "
             f"{'of the GPU busy' if result['device'] == 'gpu' else 'in CPU ops'}", "",
             "| kernel | calls a step | ms a step | share |", "|---|---|---|---|"]
    ranked = sorted(result["by_name"].items(), key=lambda kv: -kv[1][1])
    for name, (calls, ms) in ranked[:top]:
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append(f"| `{short}` | {calls:g} | {ms:.3f} | "
                     f"{ms / max(result['busy_ms'], 1e-9):.1%} |")
    rest = ranked[top:]
    if rest:
        lines.append(f"| ({len(rest)} more) | {sum(c for _, (c, _) in rest):g} | "
                     f"{sum(m for _, (_, m) in rest):.3f} | |")
    if "gaps" in result:
        lines += ["", "Idle GPU between events: " + json.dumps(result["gaps"])]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__)
    p.add_argument("--preset", choices=sorted(VOCAB), default="small")
    p.add_argument("--steps", type=int, default=4, help="profiled steps (default 4)")
    p.add_argument("--max-tokens", type=int, default=8192,
                   help="target tokens a batch (default 8192)")
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--data-dir", type=Path,
                   help="Multi30k's folder (train.de.gz, train.en.gz) for its sentence lengths "
                        "(default: ../shared/data/multi30k where present, else generated lengths)")
    p.add_argument("--cuda-graphs", action="store_true", help="ours replayed as CUDA graphs")
    p.add_argument("--no-torch", action="store_true", help="ours only")
    p.add_argument("--top", type=int, default=25, help="kernels listed per framework (default 25)")
    p.add_argument("--json", help="write the whole result here")
    args = p.parse_args(argv)
    for name in ("steps", "max_tokens", "top"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.cuda_graphs and args.device != "gpu":
        p.error("--cuda-graphs replays CUDA graphs: give --device gpu")
    args.data_dir = lengths_folder(p, args.data_dir)
    try:
        import torch  # noqa: F401
    except ImportError:
        p.error("this profile reads the GPU's clock through PyTorch's profiler: install torch "
                "beside it")
    os.environ.setdefault("CUPY_TF32", "0")
    batches, source = make_batches(VOCAB[args.preset], args.max_tokens, args.steps, args.data_dir)
    ours = lambda *a: run_ours(*a, cuda_graphs=args.cuda_graphs)     # noqa: E731
    results = {"ours" + (" (CUDA graphs)" if args.cuda_graphs else ""):
               profile(ours, args.preset, batches, args.device, args.steps)}
    if not args.no_torch:
        results["PyTorch eager"] = profile(run_torch, args.preset, batches, args.device, args.steps)
    print(f"# {args.preset}, {args.steps} steps, lengths: {source}, device {args.device}\n")
    for label, result in results.items():
        print(table(label, result, args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
