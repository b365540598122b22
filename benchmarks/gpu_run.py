"""The first GPU run as one command: versions; the fused-kernel tests, then the whole suite on CuPy; each
fused op against its plain form; training-step speed against PyTorch eager (FP32 and TF32); Multi30k
trained on the GPU recipe and scored on test_2016_flickr. One results folder, small enough to commit.

    python benchmarks/gpu_run.py --data-dir data/multi30k --out results/gpu-run-h100 --minutes 25
    python benchmarks/gpu_run.py --data-dir data/multi30k --out results/gpu-run-h100 --stages multi30k  # again
    python benchmarks/gpu_run.py --dry-run --out /tmp/gpu-dry      # the CPU, tiny sizes, in seconds

Stages, in order, each within its share of --minutes (what one leaves goes to the next; multi30k takes what
is left, 2.5 minutes of it kept for translating and scoring): env 2%, at least 30 s (GPU, driver, CUDA, CuPy, NumPy,
PyTorch, the package; run every time, named in --stages or not), kernels 6% (tests/test_kernels.py -m gpu),
suite 22% (every test file in its own pytest on CuPy; a test past --test-timeout seconds ends its file with
a traceback), fused 4%, profile 4% (the small step op by op, mt.profile(sync=True), and the host's Python by
cProfile: profile.txt), graph 4% (the small step replayed as CUDA graphs, graphs.StepGraphs, against eager
steps: time and bits), train_step 24% (tiny, small, base in FP32 and TF32, small and base with
--cuda-graphs in both; --torch if PyTorch imports), multi30k the rest (examples/multi30k.py --device gpu on the GPU
recipe, stopped by --minutes with a checkpoint; a checkpoint in --run-dir is resumed).
A stage that fails or runs out of time is recorded and the next one runs; without a usable GPU the GPU
stages are skipped with that reason. Data comes from --data-dir alone (Multi30k's train, val and
test_2016_flickr .de.gz/.en.gz), never from ../shared or the network. After every stage --out holds
results.json and summary.md (every stage: ran, failed or skipped, the reason, seconds, figures) and the
logs: under 1 MB. Checkpoints stay in --run-dir (default runs/gpu-run), not in --out.
--dry-run: the CPU, a generated 60-line corpus unless --data-dir is given, tests/test_checks.py for the
suite, tiny shapes and steps: it tests the plumbing, not the GPU.
"""
import argparse
import cProfile
import gzip
import io
import json
import os
import pstats
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STAGES = {"env": 0.02, "kernels": 0.06, "suite": 0.22, "fused": 0.04, "profile": 0.04, "graph": 0.04,
          "train_step": 0.24, "multi30k": None}
FILES = [f"{s}.{l}.gz" for s in ("train", "val", "test_2016_flickr") for l in ("de", "en")]
SCORE_RESERVE_S = 150          # of the multi30k stage's time: averaging, translating and scoring the test set
DRY_RECIPE = ["--config", "tiny", "--vocab-size", "300", "--max-tokens", "256", "--steps", "6",
              "--eval-every", "3", "--save-every", "2", "--average", "2", "--beam", "1", "--minutes", "0.001"]
LOG_TAIL = 100_000             # characters of a command's output kept in its log


class Skip(Exception):
    """A stage that cannot run here: recorded as skipped, with this reason."""


def run_command(cmd, seconds, env=None):
    """Run cmd from the repository's root for at most `seconds` (then SIGTERM, and SIGKILL 30 s later);
    (its exit code, or "timeout", and the last LOG_TAIL characters of its output)."""
    proc = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env={**os.environ, **(env or {})}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, code = proc.communicate(timeout=max(seconds, 1))[0], proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out = proc.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out = proc.communicate()[0]
        code = "timeout"
    return code, out[-LOG_TAIL:]


def last_json(out):
    """The last line of a worker's output that is a JSON object."""
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


# -------------------------------------------------------------------- workers (run in a subprocess)
def worker_env(device):
    """The versions and the GPU, as one JSON object."""
    import numpy as np
    import minitransformer as mt
    from minitransformer import backend
    info = {"python": sys.version.split()[0], "numpy": np.__version__, "minitransformer": mt.__version__,
            "gpu usable": backend.gpu_available()}
    git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    info["commit"] = git.stdout.strip() or "unknown"
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True)
        info["nvidia-smi"] = smi.stdout.strip() or smi.stderr.strip()
    try:
        import cupy
        rt = cupy.cuda.runtime
        props = rt.getDeviceProperties(0)
        info.update({"cupy": cupy.__version__, "cuda runtime": rt.runtimeGetVersion(),
                     "cuda driver": rt.driverGetVersion(), "gpu": props["name"].decode(),
                     "gpu memory GiB": round(props["totalGlobalMem"] / 2 ** 30, 1),
                     "multiprocessors": props["multiProcessorCount"]})
    except Exception as e:  # not installed, or no GPU: recorded, not fatal
        info["cupy"] = f"not usable: {type(e).__name__}: {e}"
    try:
        import torch
        info.update({"torch": torch.__version__, "torch cuda": torch.version.cuda,
                     "torch sees a GPU": torch.cuda.is_available()})
    except ImportError:
        info["torch"] = "not installed"
    return info


def worker_fused(device, dry):
    """Each fused op, forward + backward (Adam: one update), with backend.fused off (the plain code) and on
    (the CUDA kernels; on the CPU both time the plain code): median milliseconds of `reps` runs."""
    import numpy as np
    import minitransformer as mt
    from minitransformer import backend
    from minitransformer.fast import kernels
    import minitransformer.functional as F
    mt.use(device)
    rows, vocab, d, heads = (64, 50, 32, (4, 8, 8)) if dry else (8192, 8000, 512, (512, 32, 32))
    reps = 2 if dry else 20
    rng = np.random.default_rng(0)

    def tensor(*shape):
        return mt.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    x_att, x_rows, x_d, x_ff = tensor(*heads), tensor(rows, vocab), tensor(rows, d), tensor(rows, 4 * d)
    gamma, beta = tensor(d), tensor(d)
    target = backend.asarray(rng.integers(0, vocab, rows))
    params = [tensor(n) for n in ([1000, 200] if dry else [8000 * 256, 4 * 256 * 256 * 6, 1024 * 256 * 12])]
    adam = mt.optim.Adam(params)
    for p in params:
        p.grad = backend.xp.ones_like(p.data)
    cases = [("softmax (attention weights)", heads, lambda: F.softmax(x_att).sum().backward()),
             ("log_softmax", (rows, vocab), lambda: F.log_softmax(x_rows).sum().backward()),
             ("cross_entropy, smoothing 0.1", (rows, vocab),
              lambda: F.cross_entropy(x_rows, target, ignore_index=0, label_smoothing=0.1).backward()),
             ("layer_norm", (rows, d), lambda: F.layer_norm(x_d, gamma, beta).sum().backward()),
             ("dropout 0.1", (rows, 4 * d), lambda: F.dropout(x_ff, 0.1).sum().backward()),
             ("Adam update", (sum(p.data.size for p in params),), lambda: adam.step(1e-4))]
    table = []
    for name, shape, run in cases:
        ms = {}
        for fused in (False, True):
            backend.fused = fused
            times = []
            for i in range(reps + 2):     # two untimed runs first: compilation, the memory pool
                backend.synchronize()
                start = time.perf_counter()
                run()
                backend.synchronize()
                times.append(time.perf_counter() - start)
            ms[fused] = statistics.median(times[2:]) * 1e3
        table.append({"op": name, "shape": list(shape), "plain_ms": ms[False], "fused_ms": ms[True],
                      "speedup": ms[False] / ms[True], "kernels used": kernels.active(x_rows)})
    return {"ops": table, "reps": reps, "device": device}


def small_step(device, dry, data_dir):
    """train_step.py's training step of the small preset and one batch of 8,192 target tokens (--dry-run:
    tiny, 256): (step, the batch on the device, sync)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from train_step import make_batches, run_ours
    batches, _ = make_batches(8000, 256 if dry else 8192, 1, data_dir)
    _, step, dev, sync, _, _, _ = run_ours("tiny" if dry else "small", batches, 1, device)
    return step, dev[0], sync


def worker_profile(device, dry, data_dir):
    """Where the small preset's training step spends its time, op by op: the step's median wall time
    unsynchronised (as training runs it), then mt.profile(sync=True) over 3 steps (each op waited for:
    its real time; what is outside the ops is the engine's Python and the launches between them), then
    cProfile over 3 steps unsynchronised (the host's Python: by own time, the top 30)."""
    import minitransformer as mt
    from minitransformer import backend
    step, batch, sync = small_step(device, dry, data_dir)
    reps = 2 if dry else 10
    for _ in range(3):                  # compilation, the memory pool
        step(batch)
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        step(batch)
        sync()
        times.append(time.perf_counter() - start)
    with mt.profile(sync=device == "gpu") as prof:
        for _ in range(3):
            step(batch)
    ops = {name: {"forward_ms": f * 1e3 / 3, "backward_ms": b * 1e3 / 3} for name, (f, b) in prof.totals().items()}
    host = cProfile.Profile()             # the host's side: where Python spends 3 steps, nothing waited for
    host.runcall(lambda: [step(batch) for _ in range(3)])
    sync()
    text = io.StringIO()
    pstats.Stats(host, stream=text).sort_stats("tottime").print_stats(30)
    return {"preset": "tiny" if dry else "small", "tokens": int(batch[2].size),
            "step_ms": statistics.median(times) * 1e3, "profiled_step_ms": prof.wall * 1e3 / 3, "ops": ops, "table": prof.table(top=25),
            "host_profile": text.getvalue()[-12000:], "fused": backend.fused, "device": device}


def worker_graph(device, dry, data_dir):
    """TrainingConfig(cuda_graphs=True)'s steps (graphs.StepGraphs) against eager steps from the same weights
    and seeds (train_step.py's run_ours, with and without --cuda-graphs): the small preset on 4 batches of
    8,192 target tokens taken 3 times round (each shape run eagerly, recorded on its second sight, replayed
    from its third). ms per step of the last round each, and whether the two runs' losses and weights agree
    to the last bit (both with cublas.py's GEMMs). On the CPU (the dry run) graphs cannot run: the eager
    steps alone, tiny sizes. On the GPU the eager steps also run with CuPy's own matmul
    (eager_cupy_matmul_ms): which GEMM call costs the host less."""
    import traceback

    import numpy as np
    from minitransformer import Tensor, backend
    from minitransformer.fast import cublas
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from train_step import make_batches, run_ours
    gpu = device == "gpu"
    host, _ = make_batches(8000, 256 if dry else 8192, 2 if dry else 4, data_dir)

    def train(graphs):
        _, step, data, sync, _, _, _ = run_ours("tiny" if dry else "small", host, len(host), device, graphs)
        losses, times = [], []
        try:
            for b in data * 3:
                sync()
                start = time.perf_counter()
                loss = step(b)
                sync()
                times.append(time.perf_counter() - start)
                losses.append(float(loss.data if isinstance(loss, Tensor) else loss))   # graphs: an array
        finally:
            counts = step.graphs and dict(step.graphs.counts, failed=step.graphs.failed)
            step.graphs and step.graphs.close()
        return losses, [backend.to_numpy(p.data) for p in step.parameters], \
            statistics.median(times[-len(data):]) * 1e3, counts

    backend.gemm = cublas.matmul if gpu else None          # the eager run's GEMMs: the graphs' cuBLAS calls
    eager_losses, eager_weights, eager_ms, _ = train(False)
    backend.gemm = None
    result = {"preset": "tiny" if dry else "small", "batches": len(host), "steps": 3 * len(host),
              "eager_ms": eager_ms, "device": device}
    if not gpu:
        return {**result, "captured": None, "reason": "CUDA graphs need a GPU"}
    result["eager_cupy_matmul_ms"] = train(False)[2]        # eager with CuPy's own matmul: its host cost
    try:
        losses, weights, graph_ms, counts = train(True)
    except Exception as e:                # the first thing to mend: the error and where it came from
        return {**result, "captured": False, "error": f"{type(e).__name__}: {e}"[:300],
                "traceback": "".join(traceback.format_exception(e))[-1500:]}
    return {**result, "captured": counts["recorded"] > 0, "counts": counts, "graph_ms": graph_ms,
            "speedup": eager_ms / graph_ms, "losses equal": losses == eager_losses,
            "weights equal": all(np.array_equal(a, b) for a, b in zip(weights, eager_weights)),
            "largest loss difference": max(abs(a - b) for a, b in zip(losses, eager_losses))}


# -------------------------------------------------------------------- stages
def pytest_counts(xml_path):
    """(counts, the failed tests with the first line of their message) from a JUnit XML file."""
    suite = ET.parse(xml_path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}: {(bad.get('message') or '').splitlines()[:1]}"
              for case in suite.iter("testcase") for bad in case if bad.tag in ("failure", "error")]
    return counts, failed


def run_pytest(files, seconds, args, out, name, extra=()):
    """One pytest over `files` on the run's device; its counts, failures and output (appended to name.log)."""
    xml = args.run_dir / f"{name}.xml"
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *files, *extra,
           f"--junitxml={xml}", "-o", f"faulthandler_timeout={args.test_timeout}",
           "-o", "faulthandler_exit_on_timeout=true"]
    code, output = run_command(cmd, seconds, {"MINITRANSFORMER_DEVICE": args.device})
    counts, failed = pytest_counts(xml) if xml.exists() else ({}, [])
    with open(out / f"{name}.log", "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(map(str, cmd))}\n# exit {code}\n{output}\n")
    if code == 5 and counts.get("tests") == 0:   # nothing collected: every test deselected
        code = 0
    return {"exit": code, **counts, "failed tests": failed}


def run_worker(name, args, seconds):
    """This script's `--worker name` in a subprocess: the JSON it prints."""
    cmd = [sys.executable, __file__, "--worker", name, "--device", args.device, "--data-dir", args.data_dir]
    code, output = run_command(cmd + ["--dry-run"] * args.dry_run, seconds)
    if code != 0:
        raise RuntimeError(f"the {name} worker ended with {code}: {output.strip().splitlines()[-1:]}")
    return last_json(output)


def stage_env(args, out, seconds):
    return run_worker("env", args, seconds)


def stage_kernels(args, out, seconds):
    return run_pytest(["tests/test_kernels.py"], seconds, args, out, "kernels", ["-m", "gpu"])


def stage_suite(args, out, seconds):
    files = (["tests/test_checks.py"] if args.dry_run else
             sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")))
    deadline, per_file, totals = time.monotonic() + seconds, {}, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for f in files:
        left = deadline - time.monotonic()
        if left < 5:
            per_file[f] = {"exit": "not run: out of time"}
            continue
        per_file[f] = r = run_pytest([f], left, args, out, "suite")
        for k in totals:
            totals[k] += r.get(k, 0)
    bad = [f for f, r in per_file.items() if r["exit"] != 0]
    return {**totals, "files": len(files), "files not passing": bad, "per file": per_file}


def stage_fused(args, out, seconds):
    return run_worker("fused", args, seconds)


def stage_profile(args, out, seconds):
    result = run_worker("profile", args, seconds)
    (out / "profile.txt").write_text(result["table"] + "\n\nThe host's Python over 3 steps, unsynchronised (cProfile):\n"
                                     + result["host_profile"], encoding="utf-8")
    return result


def stage_graph(args, out, seconds):
    return run_worker("graph", args, seconds)


def stage_train_step(args, out, seconds):
    sizes = (["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "256"] if args.dry_run else
             ["--preset", "tiny", "small", "base", "--steps", "10", "--warmup", "2", "--max-tokens", "8192"])
    modes = {"fp32": [], "tf32": ["--tf32"], "fp32, CUDA graphs": ["--cuda-graphs", "--preset", "small", "base"],
             "tf32, CUDA graphs": ["--tf32", "--cuda-graphs", "--preset", "small", "base"]}
    share = {"fp32": 0.3, "tf32": 0.3, "fp32, CUDA graphs": 0.2, "tf32, CUDA graphs": 0.2}  # eager: 3 presets
    result, log = {}, out / "train_step.log"
    for mode in list(modes)[:1 if args.device != "gpu" else None]:   # TF32 and graphs: the GPU alone
        json_file = args.run_dir / f"train_step_{mode.split(',')[0]}{'_graphs' * ('graphs' in mode)}.json"
        json_file.unlink(missing_ok=True)
        cmd = [sys.executable, "benchmarks/train_step.py", *sizes, "--torch", "--device", args.device,
               "--data-dir", args.data_dir, "--json", json_file, "--ranks", "1", *modes[mode]]
        code, output = run_command(cmd, seconds * share[mode])
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"$ {' '.join(map(str, cmd))}\n# exit {code}\n{output}\n")
        result[mode] = {"exit": code, **(json.loads(json_file.read_text()) if json_file.exists() else {})}
    failed = [f"{mode} (exit {r['exit']})" for mode, r in result.items() if r["exit"] != 0]
    if failed:
        raise RuntimeError(f"train_step.py failed: {', '.join(failed)}; see train_step.log")
    return result


def stage_multi30k(args, out, seconds):
    minutes = 0.001 if args.dry_run else (seconds - SCORE_RESERVE_S) / 60
    if minutes < 1 and not args.dry_run:
        raise Skip(f"only {seconds / 60:.1f} minutes left: at least {SCORE_RESERVE_S / 60 + 1:.1f} needed")
    run = args.run_dir / "multi30k"
    resume = any(run.glob("checkpoint_*.npz"))
    recipe = DRY_RECIPE if args.dry_run else ["--minutes", f"{minutes:.2f}"]   # multi30k.py's GPU defaults
    cmd = [sys.executable, "examples/multi30k.py", "--data-dir", args.data_dir, "--out", run, "--device",
           args.device, *recipe, "--no-progress"] + ["--resume"] * resume + ["--cuda-graphs"] * (args.cuda_graphs and not args.dry_run)
    code, output = run_command(cmd, seconds)
    (out / "multi30k.log").write_text(f"$ {' '.join(map(str, cmd))}\n# exit {code}\n{output}\n", encoding="utf-8")
    for name, copy in (("log.jsonl", "multi30k-log.jsonl"), ("test_2016_flickr.hyp.en", "test_2016_flickr.hyp.en")):
        if (run / name).exists():   # the hypotheses under their own name: tests/test_metrics.py rescores them
            shutil.copy(run / name, out / copy)
    result = {"exit": code, "resumed": resume, "command": " ".join(map(str, cmd[1:]))}
    for key, pattern in (("test BLEU", r"test_2016_flickr: BLEU = ([\d.]+)"), ("lowercased BLEU", r"lowercased BLEU = ([\d.]+)"),
                         ("chrF", r"chrF = ([\d.]+)"), ("stopped at update", r"training stopped at update (\d+)")):
        if m := re.search(pattern, output):
            result[key] = json.loads(m.group(1))
    ends = [json.loads(l) for l in (run / "log.jsonl").read_text().splitlines() if '"end"' in l] if (run / "log.jsonl").exists() else []
    if ends:
        result["training"] = {k: ends[-1].get(k) for k in ("step", "seconds", "tokens_per_s", "best_bleu", "stopped")}
    if code != 0:
        raise RuntimeError(f"examples/multi30k.py ended with {code}: {output.strip().splitlines()[-1:]}")
    return result


# -------------------------------------------------------------------- the run
def dry_corpus(folder, n=60):
    """A generated Multi30k-shaped corpus (the six .gz files) of n lines each, for --dry-run."""
    folder.mkdir(parents=True, exist_ok=True)
    words = {"de": "ein mann eine frau hund spielt läuft im park mit dem ball".split(),
             "en": "a man a woman dog plays runs in the park with the ball".split()}
    for name in FILES:
        lang = name.split(".")[1]
        lines = [" ".join(words[lang][(i * 7 + k * 3) % len(words[lang])] for k in range(3 + i % 5)) for i in range(n)]
        with gzip.open(folder / name, "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return folder


def summary_markdown(results):
    """summary.md: a table of the stages, then each stage's figures."""
    lines = [f"# GPU run, {results['started']}", "", f"`{results['command']}`", "",
             "| stage | status | seconds | budget s | note |", "|---|---|---|---|---|"]
    for name, r in results["stages"].items():
        lines.append(f"| {name} | {r['status']} | {r.get('seconds', 0):.0f} | {r.get('budget_s', 0):.0f} | "
                     f"{r.get('reason', '')} |")
    stages = results["stages"]
    if "result" in stages.get("env", {}):
        lines += ["", "## Versions", ""] + [f"- {k}: {v}" for k, v in stages["env"]["result"].items()]
    for name in ("kernels", "suite"):
        r = stages.get(name, {}).get("result")
        if r:
            lines += ["", f"## {name}: {r.get('tests', 0)} tests, {r.get('failures', 0)} failed, {r.get('errors', 0)} "
                      f"errors, {r.get('skipped', 0)} skipped", ""] + [f"- {t}" for t in r.get("failed tests", [])[:30]]
            lines += [f"- {f}: exit {v['exit']}" for f, v in r.get("per file", {}).items() if v["exit"] != 0]
    if "result" in stages.get("fused", {}):
        lines += ["", "## Fused ops, forward + backward (median ms)", "", "| op | shape | plain | fused | speed-up |",
                  "|---|---|---|---|---|"]
        lines += [f"| {o['op']} | {tuple(o['shape'])} | {o['plain_ms']:.3f} | {o['fused_ms']:.3f} | {o['speedup']:.2f}x |"
                  for o in stages["fused"]["result"]["ops"]]
    if "table" in stages.get("profile", {}).get("result", {}):
        r = stages["profile"]["result"]
        lines += ["", f"## Where the {r['preset']} step's time goes ({r['tokens']} target tokens)", "",
                  f"{r['step_ms']:.1f} ms per step unsynchronised; {r['profiled_step_ms']:.1f} ms with each op "
                  f"waited for (mt.profile(sync=True), 3 steps):", "", "```", r["table"], "```"]
    if "eager_ms" in stages.get("graph", {}).get("result", {}):
        r = stages["graph"]["result"]
        lines += ["", f"## The {r['preset']} step replayed as CUDA graphs (TrainingConfig(cuda_graphs=True))", "",
                  f"{r['batches']} batches taken {r['steps'] // r['batches']} times round: eager {r['eager_ms']:.2f} ms "
                  f"a step (CuPy's matmul: {r.get('eager_cupy_matmul_ms', float('nan')):.2f}); " + (f"replayed {r['graph_ms']:.2f} ms ({r['speedup']:.2f}x), losses equal: "
                                 f"{r['losses equal']}, weights equal: {r['weights equal']}, counts {r['counts']}"
                                 if "graph_ms" in r else r.get("error") or r.get("reason", ""))]
    if "result" in stages.get("train_step", {}):
        lines += ["", "## Training step", "", "| mode | framework | preset | ms/step | pipelined ms/step | "
                  "target tokens/s | peak MB |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {mode} | {r['framework']} | {r['preset']} | {r['ms_per_step']:.1f} | "
                  f"{r.get('ms_per_step_pipelined') or float('nan'):.1f} | {r['tokens_per_s']:.0f} | "
                  f"{r['peak_mem_mb'] or float('nan'):.0f} |" for mode, m in stages["train_step"]["result"].items()
                  for r in m.get("results", [])]
    if "result" in stages.get("multi30k", {}):
        lines += ["", "## Multi30k", ""] + [f"- {k}: {v}" for k, v in stages["multi30k"]["result"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, help="Multi30k's six .gz files (required but with --dry-run)")
    p.add_argument("--out", type=Path, help="the results folder: results.json, summary.md, logs (required)")
    p.add_argument("--minutes", type=float, default=25.0, help="the whole run's time budget (default: 25)")
    p.add_argument("--stages", nargs="+", choices=list(STAGES), default=list(STAGES),
                   help="run only these, and env (default: all); the others' earlier results in --out are kept")
    p.add_argument("--test-timeout", type=int, default=120, help="seconds a test may take (default: 120)")
    p.add_argument("--run-dir", type=Path, help="checkpoints and scratch files (default: runs/gpu-run, "
                   "--dry-run: runs/gpu-run-dry); a Multi30k checkpoint there is resumed")
    p.add_argument("--dry-run", action="store_true", help="the CPU, tiny sizes: checks the plumbing in seconds")
    p.add_argument("--cuda-graphs", action="store_true", help="Multi30k with --cuda-graphs (replayed steps)")
    p.add_argument("--worker", choices=["env", "fused", "profile", "graph"], help=argparse.SUPPRESS)
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        work = {"env": lambda: worker_env(args.device), "fused": lambda: worker_fused(args.device, args.dry_run),
                "profile": lambda: worker_profile(args.device, args.dry_run, args.data_dir),
                "graph": lambda: worker_graph(args.device, args.dry_run, args.data_dir)}[args.worker]
        print(json.dumps(work()))
        return 0
    from minitransformer.text.fileio import check_writable_dir
    if not args.minutes > 0:
        p.error(f"--minutes must be a number above 0, got {args.minutes}")
    if args.test_timeout < 1:
        p.error(f"--test-timeout must be at least 1 second, got {args.test_timeout}")
    if args.out is None:
        p.error("--out is required: the results folder to write")
    if args.data_dir is None and not args.dry_run:
        p.error("--data-dir is required: the folder with Multi30k's six .gz files (copy them into the working tree)")
    if args.data_dir is not None and (missing := [n for n in FILES if not (args.data_dir / n).is_file()]):
        p.error(f"--data-dir {args.data_dir} lacks {', '.join(missing)}: give the folder with Multi30k's .gz files")
    args.run_dir = (args.run_dir or ROOT / ("runs/gpu-run-dry" if args.dry_run else "runs/gpu-run")).resolve()
    try:
        check_writable_dir(args.out, "--out")
        check_writable_dir(args.run_dir, "--run-dir")
    except ValueError as e:
        p.error(str(e))
    args.out, args.device = args.out.resolve(), "cpu" if args.dry_run else "gpu"
    args.out.mkdir(parents=True, exist_ok=True)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    args.data_dir = args.data_dir.resolve() if args.data_dir else dry_corpus(args.run_dir / "data")

    deadline = time.monotonic() + 60 * args.minutes
    old = args.out / "results.json"
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(["python", *sys.argv]),
               "minutes": args.minutes, "dry_run": args.dry_run,
               "stages": json.loads(old.read_text())["stages"] if old.exists() else {}}
    for log in ("kernels.log", "suite.log", "train_step.log"):
        if log.split(".")[0] in args.stages:
            (args.out / log).unlink(missing_ok=True)
    for name, share in STAGES.items():
        if name not in args.stages and name != "env":        # env always: whether this run has a GPU
            results["stages"].setdefault(name, {"status": "skipped", "reason": "not in --stages"})
            continue
        budget = deadline - time.monotonic()
        floor = 30 if name == "env" else 0                    # every GPU stage waits on env's verdict
        budget = budget if share is None else min(budget, max(share * 60 * args.minutes, floor))
        no_gpu = name != "env" and args.device == "gpu" and not results["stages"].get("env", {}).get(
            "result", {}).get("gpu usable", False)
        print(f"== {name}: at most {budget:.0f} s", flush=True)
        start, record = time.monotonic(), {"budget_s": budget}
        if no_gpu:
            record.update(status="skipped", reason="no usable GPU (see the env stage)")
        elif budget < 5:
            record.update(status="skipped", reason="out of time")
        else:
            try:
                result = globals()[f"stage_{name}"](args, args.out, budget)
                ok = result.get("exit", 0) == 0
                record.update(status="ran" if ok else "failed", result=result,
                              reason="" if ok else f"exit {result['exit']}")
            except Skip as e:
                record.update(status="skipped", reason=str(e))
            except Exception as e:  # recorded; the next stage runs
                record.update(status="failed", reason=f"{type(e).__name__}: {e}")
        record["seconds"] = time.monotonic() - start
        results["stages"][name] = record
        print(f"   {record['status']} in {record['seconds']:.0f} s {record.get('reason', '')}", flush=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        (args.out / "summary.md").write_text(summary_markdown(results), encoding="utf-8")
    print(f"results: {args.out / 'summary.md'}")
    return 1 if any(r["status"] == "failed" for r in results["stages"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
