"""The scripts in examples/: each shows --help, and refuses a bad option before any work with one
line naming it (exit 2, no traceback, nothing written). They are run as a user runs them, in a
subprocess from the repository's root. (benchmarks/tests/ tests the benchmark drivers the same
way, outside the default suite.)"""
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from script_checks import check_bad_option, check_help

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py"))

# (script, arguments, a pattern of the one error line)
BAD = [
    ("examples/copy_task.py", ["--steps", "0"], r"--steps must be an integer of at least 1, got 0"),
    ("examples/copy_task.py", ["--vocab-size", "3"], r"--vocab-size must be between 4 .*got 3"),
    ("examples/copy_task.py", ["--max-len", "5000"],
     r"--max-len must be between 1 and 1023 .*got 5000"),
    ("examples/multi30k.py", ["--steps", "0"], r"--steps must be an integer of at least 1, got 0"),
    ("examples/multi30k.py", ["--beam", "0"], r"--beam must be an integer of at least 1, got 0"),
    ("examples/multi30k.py", ["--minutes", "0"], r"--minutes must be a number above 0, got 0\.0"),
    ("examples/multi30k.py", ["--data-dir", "{tmp}", "--out", "{tmp}/run"],
     r"Multi30k files missing: .*train\.de\.gz"),
    ("examples/multi30k.py", ["--ranks", "0"], r"--ranks must be an integer of at least 1, got 0"),
    ("examples/multi30k.py", ["--cuda-graphs"],
     r"--cuda-graphs replays CUDA graphs: give --device gpu"),
    ("examples/multi30k.py", ["--ranks", "2", "--minutes", "3"],
     r"--minutes works in one process only: give --ranks 1"),
    ("examples/tune_decoding.py", ["{tmp}/run"],
     r"run is not a directory: give the --out directory of a training run"),
    ("examples/tune_decoding.py", ["{tmp}", "--beam", "0"],
     r"--beam \(or --base's BEAM\) must be an integer of at least 1, got 0"),
    ("examples/warmup_study.py", ["--max-tokens", "0", "--out", "{tmp}/ws"],
     r"--max-tokens must be at least 1, got 0"),
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_help_with_its_defaults(script):
    check_help(script)


def test_every_script_has_a_bad_input_case():
    assert {script for script, _, _ in BAD} == set(SCRIPTS)


@pytest.mark.parametrize("script, args, message", BAD,
                         ids=[f"{s}{' '.join(a)}" for s, a, _ in BAD])
def test_a_bad_option_is_one_line_before_any_work(script, args, message, tmp_path):
    check_bad_option(script, args, message, tmp_path)


def _multi30k():
    """examples/multi30k.py as a module (its main() and ranks_to_start())."""
    spec = importlib.util.spec_from_file_location("multi30k_example",
                                                  ROOT / "examples" / "multi30k.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("options, cores, launched, ranks", [
    ({}, 2, 1, 2),                  # the recipe on a 2-core CPU: 2 ranks (threads, no mpiexec)
    ({}, 1, 1, 1),                  # one core: nothing to split
    ({"quick": True}, 2, 1, 2),     # --quick too: 7.4 min as 2 ranks against about 11 as one
    ({"minutes": 5.0}, 2, 1, 1),    # ranks could stop at different updates
    ({"device": "gpu"}, 2, 1, 1),
    ({}, 2, 2, 1),                  # already one of mpiexec's ranks: train here
    ({"ranks": 3}, 2, 1, 3),
    ({"ranks": 1}, 8, 1, 1)])
def test_the_recipe_starts_two_ranks_where_it_can(monkeypatch, options, cores, launched, ranks):
    m = _multi30k()
    monkeypatch.setattr(m.distributed, "launched_size", lambda: launched)
    monkeypatch.setattr(m.os, "cpu_count", lambda: cores)
    args = SimpleNamespace(**{"ranks": None, "quick": False, "minutes": None, "device": "cpu",
                              "max_tokens": 2048, **options})
    assert m.ranks_to_start(args) == ranks


@pytest.mark.parametrize("given, expected", [
    ({}, {"steps": 3200, "dropout": 0.2, "max_tokens": 2048, "eval_every": 1200,
          "config": "small"}),
    ({"device": "gpu"}, {"steps": 3000, "dropout": 0.3, "max_tokens": 8192, "eval_every": 1000,
                         "config": "small"}),
    ({"quick": True, "device": "gpu"}, {"steps": 1800, "dropout": 0.1, "max_tokens": 2048,
                                        "config": "tiny"}),
    ({"device": "gpu", "steps": 50, "max_tokens": 100},
     {"steps": 50, "max_tokens": 100, "dropout": 0.3})])
def test_each_device_gets_the_recipe_measured_on_it_and_options_win(given, expected):
    m = _multi30k()
    args = SimpleNamespace(**{"quick": False, "device": "cpu", **{k: None for k in m.RECIPE},
                              **given})
    m.fill_defaults(args)
    assert {k: getattr(args, k) for k in expected} == expected


def test_ranks_that_cannot_start_are_refused_naming_why(monkeypatch):
    m = _multi30k()
    args = SimpleNamespace(ranks=2, quick=False, minutes=None, device="cpu", max_tokens=2048)
    monkeypatch.setattr(m.distributed, "launched_size", lambda: 1)
    shared = r"--ranks 2 starts threads that share the CPU's cores: for several GPUs"
    with pytest.raises(m.UsageError, match=shared):
        m.ranks_to_start(SimpleNamespace(**{**vars(args), "device": "gpu"}))
    monkeypatch.setattr(m.distributed, "launched_size", lambda: 2)
    with pytest.raises(m.UsageError,
                       match=r"--ranks 2 starts ranks itself \(threads\): run without mpiexec"):
        m.ranks_to_start(args)


def test_the_recipe_hands_each_rank_its_share_of_the_update(monkeypatch, tmp_path):
    """With 2 ranks to start, main() checks every option, then starts them with --ranks 1 and half
    the tokens per update (the later option wins in argparse), and returns their exit code."""
    m = _multi30k()
    for split in m.SPLITS:
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}.gz").write_bytes(b"")
    started = []
    monkeypatch.setattr(m.distributed, "launched_size", lambda: 1)
    monkeypatch.setattr(m.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(m.distributed, "run_threads",
                        lambda main, args, ranks: started.append((main, args, ranks)) or 7)
    argv = ["--data-dir", str(tmp_path), "--out", str(tmp_path / "run"), "--max-tokens", "3000"]
    assert m.main(argv) == 7
    (main, (child_argv,), ranks), = started
    assert main is m.main and ranks == 2
    assert child_argv == argv + ["--ranks", "1", "--max-tokens", "1500"]
    assert not (tmp_path / "run").exists()     # nothing written before the ranks start
