"""The GPU check: one command for one call on a lent GPU, 6 minutes, what matters most first.

    python benchmarks/gpu_check.py --pack ../shared/data/multi30k    # here: the data, the commit
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --out "$OUT"  # there (docs/gpu_check.md)
    python3 benchmarks/gpu_check.py --out "$OUT" --stages c d --graphs on   # a second try of two
    python benchmarks/gpu_check.py --out /tmp/dry --stub overrun --scale 0.02   # the CPU: budgets

Stages, in order: (a) the versions, then the fused-kernel parity tests (tests/test_kernels.py,
tests/test_graphs.py, tests/test_cublas.py with `-m gpu`), whose replay tests say whether replayed
CUDA-graph steps give the eager steps' bits; (b) the whole suite on CuPy, pytest-xdist over the
cores; (c) Multi30k on the GPU recipe to its test_2016_flickr score, `--cuda-graphs` where (a)
found the replay equal; (d) the small and the base training step against PyTorch eager in
alternating rounds, synced and pipelined (the same graphs rule); (e) with the time left: two ranks
through NCCL where there are two GPUs, the small step's kernels on the GPU's clock.

Budgets: every command has a reserve, which no earlier command can take, and a cap. It gets the
time left after the later commands' reserves, at least its reserve and at most its cap; at the end
of it its process group is interrupted (SIGINT: pytest prints its summary, a training saves a
checkpoint) and killed GRACE_S later. The reserves add up to 350 of TOTAL_S = 360 s, so a stage
that overruns takes nothing from the next; stage e reserves nothing. A command that fails or runs
out is recorded with its reason, and the next one runs.

After every command --out holds at most 8 files (gpu_check_results.py writes them): summary.md,
results.json, one log per stage (a pytest run's failures with their tracebacks as they happened),
Multi30k's hypotheses. --stub replaces every command by a sleep past its budget (`overrun`) or by
the scripts of a folder (NAME.sh, given the real command line): the CPU's dry run
(tests/test_gpu_check_budgets.py, benchmarks/tests/test_gpu_check.py).
"""
import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpu_check_results import LOGS, OUT_FILES, PYTESTS, STAGES, figures, outcome  # noqa: E402
from gpu_check_results import replay_verdict, trim_log, write_results  # noqa: E402

DATA_FILES = tuple(f"{s}.{lang}.gz" for s in ("train", "val", "test_2016_flickr")
                   for lang in ("de", "en"))
ARCHIVE = ROOT / "gpu-check-data" / "multi30k.tar"      # ignored; carried into the call
TOTAL_S = 360        # the whole check: with the machine's start a second try fits in 15 minutes
GRACE_S = 5          # from the interrupt to the kill
SCORE_S = 25         # of Multi30k's time: its start, averaging, translating and scoring
EXTRA_MIN_S = 15     # stage e's commands start only with this much left
# (stage, command, reserve s, cap s), in the order they run
PLAN = (("a", "env", 10, 20), ("a", "parity", 35, 70), ("b", "suite", 90, 150),
        ("c", "multi30k", 115, 180), ("d", "small", 50, 75), ("d", "base", 50, 75),
        ("e", "nccl2", 0, 60), ("e", "profile", 0, 60))
PACKAGES = ("numpy", "cupy-cuda13x", "cupy-cuda12x", "torch", "pytest", "pytest-xdist",
            "pytest-timeout", "mpi4py")       # their versions, in the summary
OVERRUN = ('trap "" INT TERM; sleep 3600 & echo $! > "$GPU_CHECK_WORK/$GPU_CHECK_COMMAND.pid"; '
           'wait')


# -------------------------------------------------------------------- budgets
def grant(plan, i, left, scale=1.0):
    """Seconds for plan[i] with `left` seconds to the end: what the later reserves leave, no less
    than its reserve, no more than its cap."""
    later = sum(p[2] for p in plan[i + 1:]) * scale
    return max(plan[i][2] * scale, min(plan[i][3] * scale, left - later))


def schedule(plan=PLAN, total=TOTAL_S):
    """[(command, seconds)] when every command runs to the end of its grant (stage e's under
    EXTRA_MIN_S: 0, skipped)."""
    granted = []
    for i, p in enumerate(plan):
        seconds = grant(plan, i, total - sum(s for _, s in granted))
        granted.append((p[1], seconds if p[2] or seconds >= EXTRA_MIN_S else 0))
    return granted


def interruptible():
    """In a command's process before it starts: Ctrl-C's default again, where the check was started
    with it ignored (a background job), so that the SIGINT at the end of a grant reaches it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_command(cmd, seconds, grace, log, env):
    """cmd, its output appended to log, interrupted after seconds - grace and killed at seconds
    (its process group, children too; also once it ends): (exit code or "timeout", seconds)."""
    start = time.monotonic()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        proc = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=interruptible)
        try:
            code = proc.wait(timeout=max(seconds - grace, 0.01))
        except subprocess.TimeoutExpired:
            code = "timeout"
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)      # what is left of the group, once it ended too
        proc.wait()
        ended = "stopped at its budget" if code == "timeout" else f"exit {code}"
        f.write(f"# {ended}, {time.monotonic() - start:.1f} s of {seconds:.1f}\n")
    return code, time.monotonic() - start


# -------------------------------------------------------------------- the commands
def command(name, ctx):
    """The real command line of `name`."""
    py = sys.executable
    cores = min(os.cpu_count() or 1, 16)
    xdist = (lambda n: ["-n", str(n)]) if find_spec("xdist") else (lambda n: [])
    pytest = [py, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "gpu_check_results",
              *(["--timeout", "120"] if find_spec("pytest_timeout") else [])]
    graphs = ["--cuda-graphs"] * ctx["graphs"]
    data = ["--data-dir", ctx["data"]]
    step = [py, "benchmarks/train_step.py", "--torch", "--device", "gpu", *data, "--max-tokens",
            "8192", "--json", ctx["work"] / f"{name}.json"]
    minutes = max((ctx["granted"] - (GRACE_S + SCORE_S) * ctx["scale"]) / 60, 0.01)
    return {"env": [py, __file__, "--versions"],
            "parity": pytest + ["-m", "gpu", "tests/test_kernels.py", "tests/test_graphs.py",
                                "tests/test_cublas.py"] + xdist(4),
            "suite": pytest + ["tests"] + xdist(cores),
            "multi30k": [py, "examples/multi30k.py", *data, "--out", ctx["work"] / "m30k",
                         "--device", "gpu", "--minutes", f"{minutes:.2f}", "--no-progress",
                         *graphs],
            "small": step + ["--preset", "small", "--rounds", "3", "--steps", "20", *graphs],
            "base": step + ["--preset", "base", "--rounds", "2", "--steps", "10", *graphs],
            "nccl2": pytest + ["tests/test_distributed.py", "-k", "gpu or nccl"],
            "profile": [py, "benchmarks/gpu_kernel_profile.py", *data, "--preset", "small", "--top",
                        "30", *graphs]}[name]


def skip_reason(name, seconds, ctx):
    """Why `name` does not run, or None."""
    gpus = ctx["versions"].get("gpus")
    if name != "env" and gpus == 0:
        return f"no usable GPU ({ctx['versions'].get('cupy error', 'the versions found none')})"
    if name == "nccl2" and (gpus or 0) < 2:
        return ("one GPU: two ranks need two (the one-rank communicator test is in the suite)"
                if gpus else "the GPU count is unknown: the versions did not finish")
    if name in ("nccl2", "profile") and seconds < EXTRA_MIN_S * ctx["scale"]:
        return f"out of time ({max(seconds, 0):.0f} s left)"
    return None


def run_one(rec, cmd, args, ctx, log):
    """One command (or its stub) within its grant: its outcome and figures into rec."""
    name = rec["command"]
    reports = ctx["work"] / f"{name}.jsonl"
    reports.unlink(missing_ok=True)
    (ctx["work"] / f"{name}.json").unlink(missing_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPU_CHECK_REPORTS": str(reports),
           "GPU_CHECK_WORK": str(ctx["work"]), "GPU_CHECK_COMMAND": name,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "benchmarks"),
                                                       os.environ.get("PYTHONPATH")]))}
    if name in PYTESTS:  # on the GPU; one BLAS thread a worker, as xdist runs one a core: the
        # lessons' NumPy code would otherwise start a thread a core in every worker
        env.update(MINITRANSFORMER_DEVICE="gpu", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
    if args.stub == "overrun":
        cmd = ["sh", "-c", OVERRUN]
    elif args.stub:
        cmd = ["bash", Path(args.stub).resolve() / f"{name}.sh", *cmd]
    start = log.stat().st_size if log.exists() else 0
    try:
        code, seconds = run_command(cmd, ctx["granted"], GRACE_S * args.scale, log, env)
        with open(log, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            text = f.read()
        ended = "done" if code == 0 else "timeout" if code == "timeout" else "failed"
        rec.update(seconds=seconds, exit=code, outcome=ended, reason=f"exit {code}")
        rec["figures"] = figures(name, text, ctx["work"])
        if name == "env":
            ctx["versions"] = rec["figures"]
        failures = [r for r in rec["figures"].get("reports", []) if r.get("traceback")]
        with open(log, "a", encoding="utf-8") as f:
            f.writelines(f"\n# FAILED {r['test']} ({r['when']})\n{r['traceback']}\n"
                         for r in failures)
        trim_log(log)
    except Exception as e:  # the driver's own error: recorded, the next command runs
        rec.update(outcome="failed", reason=f"{type(e).__name__}: {e}")
        with open(log, "a", encoding="utf-8") as f:
            f.write(traceback.format_exc())


# -------------------------------------------------------------------- the data and the commit
def git_commit():
    """The commit checked out, and how many tracked files differ from it ({} without git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 cwd=ROOT, capture_output=True, text=True).stdout.splitlines()
    except OSError:          # no git on the machine
        return {}
    if head.returncode != 0:
        return {}
    return {"commit": head.stdout.strip(), "tracked files changed": len(changed)}


def pack(src, dest):
    """The six Multi30k files and the commit (a COMMIT member), one tar for `carry`."""
    meta = {**git_commit(), "packed": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        for name in DATA_FILES:
            tar.add(src / name, arcname=name)
        text = json.dumps(meta).encode()
        info = tarfile.TarInfo("COMMIT")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    os.replace(tmp, dest)
    print(f"{dest}: {dest.stat().st_size / 2 ** 20:.1f} MiB at {meta.get('commit')} "
          f"({meta.get('tracked files changed')} tracked files changed); carry {dest.parent.name}")


def unpack(archive, folder):
    """The archive's six files into folder; its COMMIT record."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        for name in DATA_FILES:
            (folder / name).write_bytes(tar.extractfile(name).read())
        return json.loads(tar.extractfile("COMMIT").read()) if "COMMIT" in tar.getnames() else {}


def versions():
    """The versions and the GPUs, one JSON line (the env command)."""
    from importlib import metadata
    info = {"python": sys.version.split()[0], "cores": os.cpu_count()}
    found = {d.metadata["Name"].lower().replace("_", "-"): d.version
             for d in metadata.distributions()}
    info.update({name: found[name] for name in PACKAGES if name in found})
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        info["nvidia-smi"] = smi.stdout.strip().replace("\n", "; ")
    try:
        import cupy
        rt = cupy.cuda.runtime
        info["gpus"] = rt.getDeviceCount()
        info["cuda runtime"] = rt.runtimeGetVersion()
        info["cuda driver"] = rt.driverGetVersion()
        info["gpu"] = [rt.getDeviceProperties(i)["name"].decode() for i in range(info["gpus"])]
    except Exception as e:  # no CuPy, or no GPU: said, not fatal
        info["gpus"] = 0
        info["cupy error"] = f"{type(e).__name__}: {e}"[:200]
    print(json.dumps(info))


# -------------------------------------------------------------------- the check
def check_args(p, args):
    """Refuse bad input before any work, in one sentence naming it."""
    from minitransformer.text.fileio import check_writable_dir
    if args.pack is not None:
        missing = [n for n in DATA_FILES if not (args.pack / n).is_file()]
        if missing:
            p.error(f"--pack {args.pack} lacks {', '.join(missing)}: give Multi30k's folder")
        return
    if args.out is None:
        p.error("--out is required: the folder that comes back from the call ($OUT)")
    try:
        check_writable_dir(args.out, "--out")
        if args.work is not None:
            check_writable_dir(args.work, "--work")
    except ValueError as e:
        p.error(str(e))
    if not args.scale > 0:
        p.error(f"--scale must be a number above 0, got {args.scale}")
    reserved = sum(r for s, _, r, _ in PLAN if s in args.stages)
    if args.seconds < reserved:
        p.error(f"--seconds {args.seconds:g} is less than the {reserved} s the stages reserve")
    if args.stub not in (None, "overrun"):
        lacking = [c for s, c, _, _ in PLAN
                   if s in args.stages and not (Path(args.stub) / f"{c}.sh").is_file()]
        if lacking:
            p.error(f"--stub {args.stub} lacks {lacking[0]}.sh: give a script for every command")
    elif args.stub is None and args.data.is_dir():
        missing = [n for n in DATA_FILES if not (args.data / n).is_file()]
        if missing:
            p.error(f"--data {args.data} lacks {', '.join(missing)}: give Multi30k's folder")
    elif args.stub is None:
        try:
            with tarfile.open(args.data) as tar:
                missing = sorted(set(DATA_FILES) - set(tar.getnames()))
        except (OSError, tarfile.TarError):
            p.error(f"--data {args.data} is no archive: make it with --pack, and carry its folder")
        if missing:
            p.error(f"--data {args.data} lacks {', '.join(missing)}: make it again with --pack")


def run_check(args):
    """Every command of the chosen stages in turn, the results rewritten after each: 0 when every
    command is done (stage e's may be skipped), else 1."""
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in OUT_FILES:
        (out / name).unlink(missing_ok=True)
    work = (args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "m30k", ignore_errors=True)
    archive = args.stub is None and not args.data.is_dir()
    data = work / "data" if archive or args.stub else args.data.resolve()
    meta = unpack(args.data, data) if archive else {}
    git = git_commit()
    why = {"on": "--graphs on", "off": "--graphs off"}.get(args.graphs, "stage a did not run")
    ctx = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "work": work,
           "command": " ".join(["python3", *map(str, sys.argv)]), "scale": args.scale,
           "commit": {**git, "from": "git"} if git else {**meta, "from": "the data archive"},
           "data": data, "versions": {}, "records": [], "stages": args.stages,
           "graphs": args.graphs == "on", "graphs_why": why, "replay": (False, "not run")}
    plan = [p for p in PLAN if p[0] in args.stages]
    deadline = time.monotonic() + args.seconds * args.scale
    for i, (stage, name, _, _) in enumerate(plan):
        ctx["granted"] = grant(plan, i, deadline - time.monotonic(), args.scale)
        cmd = command(name, ctx)
        rec = {"stage": stage, "command": name, "granted": max(ctx["granted"], 0), "seconds": 0.0,
               "cmd": " ".join(map(str, cmd)) + (f" (stubbed: {args.stub})" if args.stub else "")}
        print(f"== {stage} {name}: at most {ctx['granted']:.0f} s", flush=True)
        reason = skip_reason(name, ctx["granted"], ctx)
        if reason:
            rec.update(outcome="skipped", reason=reason)
        else:
            run_one(rec, cmd, args, ctx, out / LOGS[stage])
        ctx["records"].append(rec)
        if name == "parity" and "reports" in rec.get("figures", {}):
            ctx["replay"] = replay_verdict(rec["figures"]["reports"])
            if args.graphs == "auto":
                ctx["graphs"] = ctx["replay"][0]
                ctx["graphs_why"] = ctx["replay"][1]
        hyp = work / "m30k" / "test_2016_flickr.hyp.en"
        if name == "multi30k" and hyp.exists():
            shutil.copy(hyp, out / hyp.name)
        print(f"   {outcome(rec)}", flush=True)
        write_results(ctx, out)
    print(f"summary: {out / 'summary.md'}")
    return 0 if all(r["outcome"] == "done" or r["outcome"] == "skipped" and r["stage"] == "e"
                    for r in ctx["records"]) else 1        # stage e alone may be skipped


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="the results folder ($OUT on the GPU machine)")
    p.add_argument("--data", type=Path, default=ARCHIVE, help="the archive --pack made, or "
                   f"Multi30k's folder (default: {ARCHIVE.relative_to(ROOT)})")
    p.add_argument("--stages", nargs="+", choices=list(STAGES), default=list(STAGES),
                   help="run only these (default: all, a to e)")
    p.add_argument("--seconds", type=float, default=TOTAL_S,
                   help=f"the whole check's budget (default: {TOTAL_S})")
    p.add_argument("--graphs", choices=("auto", "on", "off"), default="auto",
                   help="--cuda-graphs in stages c to e: auto (default) where stage a found the "
                   "replay equal to eager")
    p.add_argument("--work", type=Path, help="scratch: the data, runs, reports (default: a new "
                   "temporary folder)")
    p.add_argument("--stub", help="the dry run: 'overrun' (every command a sleep past its budget) "
                   "or a folder of NAME.sh scripts, one a command")
    p.add_argument("--scale", type=float, default=1.0, help="times every budget (default: 1)")
    p.add_argument("--pack", type=Path, metavar="FOLDER", help="write "
                   f"{ARCHIVE.relative_to(ROOT)} from Multi30k's FOLDER, with the commit, and stop")
    p.add_argument("--versions", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.versions:
        versions()
        return 0
    check_args(p, args)
    if args.pack is not None:
        pack(args.pack, ARCHIVE)
        return 0
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
