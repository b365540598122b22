"""The scripts in examples/ and benchmarks/: each shows --help, and refuses a bad option before any work
with one line naming it (exit 2, no traceback, nothing written). They are run as a user runs them, in a
subprocess from the repository's root."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from minitransformer.run import distributed

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(str(p.relative_to(ROOT)) for d in ("examples", "benchmarks") for p in (ROOT / d).glob("*.py")
                 if p.name not in ("torch_reference.py", "cublas_capture.py"))  # modules the benchmarks import

# (script, arguments, a pattern of the one error line)
BAD = [
    ("examples/copy_task.py", ["--steps", "0"], r"--steps must be an integer of at least 1, got 0"),
    ("examples/copy_task.py", ["--vocab-size", "3"], r"--vocab-size must be between 4 .*got 3"),
    ("examples/copy_task.py", ["--max-len", "5000"], r"--max-len must be between 1 and 1023 .*got 5000"),
    ("examples/multi30k.py", ["--steps", "0"], r"--steps must be an integer of at least 1, got 0"),
    ("examples/multi30k.py", ["--beam", "0"], r"--beam must be an integer of at least 1, got 0"),
    ("examples/multi30k.py", ["--minutes", "0"], r"--minutes must be a number above 0, got 0\.0"),
    ("examples/multi30k.py", ["--data-dir", "{tmp}", "--out", "{tmp}/run"], r"Multi30k files missing: .*train\.de\.gz"),
    ("examples/multi30k.py", ["--ranks", "0"], r"--ranks must be an integer of at least 1, got 0"),
    ("examples/multi30k.py", ["--cuda-graphs"], r"--cuda-graphs replays CUDA graphs: give --device gpu"),
    ("examples/multi30k.py", ["--ranks", "2", "--minutes", "3"], r"--minutes works in one process only: give --ranks 1"),
    ("examples/tune_decoding.py", ["{tmp}/run"], r"run is not a directory: give the --out directory of a training run"),
    ("examples/tune_decoding.py", ["{tmp}", "--beam", "0"], r"--beam \(or --base's BEAM\) must be an integer of at least 1, got 0"),
    ("examples/warmup_study.py", ["--max-tokens", "0", "--out", "{tmp}/ws"], r"--max-tokens must be at least 1, got 0"),
    ("benchmarks/bpe_speed.py", ["--vocab-size", "100"], r"--vocab-size must be between 259 .*got 100"),
    ("benchmarks/compare_versions.py", ["--repeats", "0"], r"--repeats must be at least 1, got 0"),
    ("benchmarks/data_parallel.py", ["--ranks", "1"], r"--ranks must be at least 2 .*got 1"),
    ("benchmarks/decode_speed.py", ["--n", "0"], r"--n must be at least 1, got 0"),
    ("benchmarks/engine_overhead.py", ["--depth", "-1"], r"--depth must be at least 1, got -1"),
    ("benchmarks/gpu_kernel_profile.py", ["--steps", "0"], r"--steps must be at least 1, got 0"),
    ("benchmarks/gpu_kernel_profile.py", ["--device", "cpu", "--cuda-graphs"], r"--cuda-graphs replays CUDA graphs: give --device gpu"),
    ("benchmarks/gpu_kernel_profile.py", ["--data-dir", "{tmp}"], r"--data-dir .* holds no train\.de\.gz or train\.en\.gz"),
    ("benchmarks/gpu_run.py", ["--minutes", "0", "--out", "{tmp}/r"], r"--minutes must be a number above 0, got 0\.0"),
    ("benchmarks/gpu_run.py", ["--data-dir", "{tmp}", "--out", "{tmp}/r"], r"--data-dir .* lacks train\.de\.gz"),
    ("benchmarks/train_step.py", ["--steps", "0"], r"--steps must be at least 1, got 0"),
    ("benchmarks/train_step.py", ["--rounds", "0"], r"--rounds must be at least 1, got 0"),
    ("benchmarks/train_step.py", ["--ranks", "1", "0"], r"--ranks must be at least 1, got 0"),
    ("benchmarks/train_step.py", ["--ranks", "2", "--device", "gpu"], r"--ranks is for the CPU"),
    ("benchmarks/train_step.py", ["--cuda-graphs"], r"--cuda-graphs replays CUDA graphs: give --device gpu"),
    ("benchmarks/train_step.py", ["--torch-keep-freed"], r"--torch-keep-freed sets PyTorch.s heap: it needs --torch"),
    ("benchmarks/train_step.py", ["--data-dir", "{tmp}"], r"--data-dir .* holds no train\.de\.gz or train\.en\.gz"),
]


def run(script, args):
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_help_with_its_defaults(script):
    done = run(script, ["--help"])
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "--" in done.stdout


def test_every_script_has_a_bad_input_case():
    assert {script for script, _, _ in BAD} == set(SCRIPTS)


@pytest.mark.parametrize("script, args, message", BAD, ids=[f"{s}{' '.join(a)}" for s, a, _ in BAD])
def test_a_bad_option_is_one_line_before_any_work(script, args, message, tmp_path):
    done = run(script, [a.replace("{tmp}", str(tmp_path)) for a in args])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith(f"{Path(script).name}: error: "), done.stderr
    assert all(line.startswith(("usage:", " ")) for line in lines[:-1]), done.stderr  # argparse's usage first
    assert re.search(message, lines[-1]), lines[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing is written"


def test_the_bpe_benchmark_loads_the_package_bpe_without_the_engine():
    """bpe_speed.py times minitransformer.text.bpe alone (a package import would load the engine too); once
    bpe.py used relative imports, loading it by its path failed and every run said 'failed'."""
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import bpe_speed; bpe = bpe_speed.load_bpe(); "
            "assert bpe.BPE.train(['low lower lowest'], 260, min_frequency=1).merges == [(111, 114)]; "
            "assert 'minitransformer.tensor' not in sys.modules; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


def test_train_step_rounds_alternate_and_pair(tmp_path):
    """--rounds R runs each framework R times; the JSON holds every round; PyTorch missing is said once."""
    out = run("benchmarks/train_step.py", ["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "64",
                                           "--rounds", "2", "--torch", "--ranks", "1", "--json", str(tmp_path / "r.json")])
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [(r["framework"], r["preset"]) for r in rows if r["framework"] == "ours"] == [("ours", "tiny")] * 2
    assert out.stdout.count("PyTorch is not installed") == (0 if any(r["framework"] == "torch" for r in rows) else 1)
    assert sum(line.startswith("ours   tiny") for line in out.stdout.splitlines()) == 2


def test_the_kernel_profile_tables_each_framework_or_says_it_needs_pytorch(tmp_path):
    """gpu_kernel_profile.py's dry run on the CPU (PyTorch's CPU ops, ours none); without PyTorch, one line."""
    out = run("benchmarks/gpu_kernel_profile.py", ["--device", "cpu", "--preset", "tiny", "--steps", "1",
                                                   "--max-tokens", "64", "--top", "3", "--json", str(tmp_path / "p.json")])
    if importlib.util.find_spec("torch") is None:
        assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].endswith("install torch beside it")
        assert not (tmp_path / "p.json").exists()
        return
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "p.json").read_text())
    assert set(result) == {"ours", "PyTorch eager"} and not result["ours"]["by_name"]
    assert result["PyTorch eager"]["busy_ms"] > 0 and "aten::mm" in result["PyTorch eager"]["by_name"]
    assert out.stdout.count("| kernel | calls a step | ms a step | share |") == 2


def test_train_step_says_why_a_worker_failed_above_open_mpis_banner():
    bench = load_train_step()
    why = "SystemExit: a batch of 1 sentence(s) cannot give each of 2 ranks one: raise --max-tokens"
    banner = "-" * 74 + "\nPrimary job  terminated normally, but 1 process returned\na non-zero exit code.\n" + "-" * 74
    assert bench.error_line(f"WARNING: generated lengths\n{why}\n{banner}\n") == why            # Open MPI
    assert bench.error_line(f"Traceback (most recent call last):\n  ...\n{why}\n\n") == why    # MPICH, one process
    assert bench.error_line("") == "(no output)" and bench.error_line(banner) == "-" * 74


def load_train_step():
    spec = importlib.util.spec_from_file_location("train_step_bench", ROOT / "benchmarks" / "train_step.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_train_step_gives_the_kept_heap_to_pytorch_alone_with_or_without_ranks():
    """--torch-keep-freed: glibc's variables for PyTorch's workers only, kept beside the ranks' thread count
    (PyTorch's ranks are processes of cores / N threads each; ours are threads of one process: no count)."""
    bench = load_train_step()
    for ranks in (1, 2):
        torch_env, ours_env = (bench.worker_env({"A": "1"}, fw, ranks, True) for fw in ("torch", "ours"))
        assert torch_env["MALLOC_MMAP_MAX_"] == "0" and torch_env["MALLOC_TOP_PAD_"] == str(1 << 30)
        assert "MALLOC_MMAP_MAX_" not in ours_env and "MALLOC_TOP_PAD_" not in ours_env
        assert torch_env["A"] == ours_env["A"] == "1"
        assert torch_env["MINITRANSFORMER_DEVICE"] == ours_env["MINITRANSFORMER_DEVICE"] == "cpu"
        assert ("OMP_NUM_THREADS" in torch_env) == (ranks > 1) and "OMP_NUM_THREADS" not in ours_env
    assert "MALLOC_MMAP_MAX_" not in bench.worker_env({}, "torch", 2, False)


def test_train_step_pairs_like_with_like_then_each_as_it_trains_by_default():
    """The summary's ratios: one process each, N ranks each, and ours' default ranks against PyTorch's one
    process only where both ran (a PyTorch training loop is one process unless torchrun starts it)."""
    bench = load_train_step()
    assert [p[:2] for p in bench.ratio_pairs([1, 2], 2)] == [(1, 1), (2, 2), (2, 1)]
    assert "ours as 2 thread ranks (examples/multi30k.py's default)" in bench.ratio_pairs([1, 2], 2)[-1][2]
    assert [p[:2] for p in bench.ratio_pairs([1], 2)] == [(1, 1)]          # --ranks 1: no cross pair
    assert [p[:2] for p in bench.ratio_pairs([2], 2)] == [(2, 2)]          # PyTorch's one process not run
    assert [p[:2] for p in bench.ratio_pairs([1], 1)] == [(1, 1)]          # one core: ours trains in one rank


def test_train_step_runs_one_rank_and_the_default_ranks_unless_told(tmp_path):
    """No --ranks runs ours in one rank and in distributed.default_ranks() (2 thread ranks on 2 cores)."""
    out = run("benchmarks/train_step.py", ["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "256",
                                           "--json", str(tmp_path / "r.json")])
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = [r["ranks"] for r in json.loads((tmp_path / "r.json").read_text())["results"]]
    assert ranks == sorted({1, distributed.default_ranks()})


def test_train_step_ranks_share_each_batch(tmp_path):
    """--ranks 1 2: the same batches in one process and in 2 ranks (rows r, r + 2, ... each, mean losses
    weighted by their share of the tokens): the update's loss is the whole batch's, not the sum of two means."""
    out = run("benchmarks/train_step.py", ["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "256",
                                           "--ranks", "1", "2", "--json", str(tmp_path / "r.json")])
    assert out.returncode == 0 and "failed" not in out.stdout, out.stdout + out.stderr
    one, two = json.loads((tmp_path / "r.json").read_text())["results"]
    assert (one["ranks"], two["ranks"]) == (1, 2) and one["avg_tgt_tokens"] == two["avg_tgt_tokens"]
    assert abs(two["loss"] - one["loss"]) < 0.02 * one["loss"]      # dropout differs, the scale does not
    # a batch too small to share: every rank says so and stops (none waits for the others in the Allreduce)
    out = run("benchmarks/train_step.py", ["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "8",
                                           "--ranks", "2"])
    assert out.returncode == 1 and "cannot give each of 2 ranks one: raise --max-tokens" in out.stdout


def _multi30k():
    """examples/multi30k.py as a module (its main() and ranks_to_start())."""
    spec = importlib.util.spec_from_file_location("multi30k_example", ROOT / "examples" / "multi30k.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("options, cores, launched, ranks", [
    ({}, 2, 1, 2),                             # the recipe on a 2-core CPU: 2 ranks (threads; no mpiexec needed)
    ({}, 1, 1, 1),                             # one core: nothing to split
    ({"quick": True}, 2, 1, 2),                # --quick too: 7.4 min as 2 ranks against about 11 as one (session 27)
    ({"minutes": 5.0}, 2, 1, 1),               # ranks could stop at different updates
    ({"device": "gpu"}, 2, 1, 1),
    ({}, 2, 2, 1),                             # already one of mpiexec's ranks: train here
    ({"ranks": 3}, 2, 1, 3),
    ({"ranks": 1}, 8, 1, 1)])
def test_the_recipe_starts_two_ranks_where_it_can(monkeypatch, options, cores, launched, ranks):
    m = _multi30k()
    monkeypatch.setattr(m.distributed, "launched_size", lambda: launched)
    monkeypatch.setattr(m.os, "cpu_count", lambda: cores)
    args = SimpleNamespace(**{"ranks": None, "quick": False, "minutes": None, "device": "cpu", "max_tokens": 2048,
                              **options})
    assert m.ranks_to_start(args) == ranks


@pytest.mark.parametrize("given, expected", [
    ({}, {"steps": 3200, "dropout": 0.2, "max_tokens": 2048, "eval_every": 1200, "config": "small"}),
    ({"device": "gpu"}, {"steps": 3000, "dropout": 0.3, "max_tokens": 8192, "eval_every": 1000, "config": "small"}),
    ({"quick": True, "device": "gpu"}, {"steps": 1800, "dropout": 0.1, "max_tokens": 2048, "config": "tiny"}),
    ({"device": "gpu", "steps": 50, "max_tokens": 100}, {"steps": 50, "max_tokens": 100, "dropout": 0.3})])
def test_each_device_gets_the_recipe_measured_on_it_and_options_win(given, expected):
    m = _multi30k()
    args = SimpleNamespace(**{"quick": False, "device": "cpu", **{k: None for k in m.RECIPE}, **given})
    m.fill_defaults(args)
    assert {k: getattr(args, k) for k in expected} == expected


def test_ranks_that_cannot_start_are_refused_naming_why(monkeypatch):
    m = _multi30k()
    args = SimpleNamespace(ranks=2, quick=False, minutes=None, device="cpu", max_tokens=2048)
    monkeypatch.setattr(m.distributed, "launched_size", lambda: 1)
    with pytest.raises(m.UsageError, match=r"--ranks 2 starts threads that share the CPU's cores: for several GPUs"):
        m.ranks_to_start(SimpleNamespace(**{**vars(args), "device": "gpu"}))
    monkeypatch.setattr(m.distributed, "launched_size", lambda: 2)
    with pytest.raises(m.UsageError, match=r"--ranks 2 starts ranks itself \(threads\): run without mpiexec"):
        m.ranks_to_start(args)


def test_the_recipe_hands_each_rank_its_share_of_the_update(monkeypatch, tmp_path):
    """With 2 ranks to start, main() checks every option, then starts them with --ranks 1 and half the
    tokens per update (the later option wins in argparse), and returns their exit code."""
    m = _multi30k()
    for split in m.SPLITS:
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}.gz").write_bytes(b"")
    started = []
    monkeypatch.setattr(m.distributed, "launched_size", lambda: 1)
    monkeypatch.setattr(m.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(m.distributed, "run_threads", lambda main, args, ranks: started.append((main, args, ranks)) or 7)
    argv = ["--data-dir", str(tmp_path), "--out", str(tmp_path / "run"), "--max-tokens", "3000"]
    assert m.main(argv) == 7
    (main, (child_argv,), ranks), = started
    assert main is m.main and ranks == 2
    assert child_argv == argv + ["--ranks", "1", "--max-tokens", "1500"]
    assert not (tmp_path / "run").exists()     # nothing written before the ranks start
