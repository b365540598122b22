"""The scripts in benchmarks/: each shows --help, and refuses a bad option before any work with one
line naming it (exit 2, no traceback, nothing written); the BPE benchmark loads the package's BPE
alone, and the kernel profile's dry run tables each framework. They are run as a user runs them, in
a subprocess from the repository's root."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from script_checks import check_bad_option, check_help, run  # noqa: E402

SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").glob("*.py")
                 if p.name not in ("torch_reference.py", "cublas_capture.py",
                                   "gpu_check_results.py"))  # imported modules

# (script, arguments, a pattern of the one error line)
BAD = [
    ("benchmarks/bpe_speed.py", ["--vocab-size", "100"],
     r"--vocab-size must be between 259 .*got 100"),
    ("benchmarks/check_figures.py", ["--readme", "{tmp}/none.md"],
     r"--readme .*none\.md is not a file"),
    ("benchmarks/code_size.py", ["--rev", "no-such-revision"],
     r"--rev no-such-revision is not a commit of this repository"),
    ("benchmarks/compare_versions.py", ["--repeats", "0"], r"--repeats must be at least 1, got 0"),
    ("benchmarks/cpu_pieces.py", ["--repeats", "0"], r"--repeats must be at least 1, got 0"),
    ("benchmarks/cpu_pieces.py", ["--rev", "HEAD"], r"--rev HEAD has no minitransformer/cores\.py"),
    ("benchmarks/data_parallel.py", ["--ranks", "1"], r"--ranks must be at least 2 .*got 1"),
    ("benchmarks/decode_speed.py", ["--n", "0"], r"--n must be at least 1, got 0"),
    ("benchmarks/engine_overhead.py", ["--depth", "-1"], r"--depth must be at least 1, got -1"),
    ("benchmarks/gpu_kernel_profile.py", ["--steps", "0"], r"--steps must be at least 1, got 0"),
    ("benchmarks/gpu_kernel_profile.py", ["--device", "cpu", "--cuda-graphs"],
     r"--cuda-graphs replays CUDA graphs: give --device gpu"),
    ("benchmarks/gpu_kernel_profile.py", ["--data-dir", "{tmp}"],
     r"--data-dir .* holds no train\.de\.gz or train\.en\.gz"),
    ("benchmarks/gpu_check.py", ["--out", "{tmp}/r", "--seconds", "100"],
     r"--seconds 100 is less than the 350 s the stages reserve"),
    ("benchmarks/gpu_check.py", ["--out", "{tmp}/r", "--data", "{tmp}"],
     r"--data .* lacks train\.de\.gz"),
    ("benchmarks/train_step.py", ["--steps", "0"], r"--steps must be at least 1, got 0"),
    ("benchmarks/train_step.py", ["--rounds", "0"], r"--rounds must be at least 1, got 0"),
    ("benchmarks/train_step.py", ["--ranks", "1", "0"], r"--ranks must be at least 1, got 0"),
    ("benchmarks/train_step.py", ["--ranks", "2", "--device", "gpu"], r"--ranks is for the CPU"),
    ("benchmarks/train_step.py", ["--cuda-graphs"],
     r"--cuda-graphs replays CUDA graphs: give --device gpu"),
    ("benchmarks/train_step.py", ["--torch-keep-freed"],
     r"--torch-keep-freed sets PyTorch.s heap: it needs --torch"),
    ("benchmarks/train_step.py", ["--data-dir", "{tmp}"],
     r"--data-dir .* holds no train\.de\.gz or train\.en\.gz"),
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


def test_the_bpe_benchmark_loads_the_package_bpe_without_the_engine():
    """bpe_speed.py times minitransformer.text.bpe alone (a package import would load the engine
    too); once bpe.py used relative imports, loading it by its path failed and every run said
    'failed'."""
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import bpe_speed; "
            "bpe = bpe_speed.load_bpe(); "
            "merges = bpe.BPE.train(['low lower lowest'], 260, min_frequency=1).merges; "
            "assert merges == [(111, 114)]; "
            "assert 'minitransformer.tensor' not in sys.modules; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_kernel_profile_tables_each_framework_or_says_it_needs_pytorch(tmp_path):
    """gpu_kernel_profile.py's dry run on the CPU (PyTorch's CPU ops, ours none); without PyTorch,
    one line."""
    out = run("benchmarks/gpu_kernel_profile.py",
              ["--device", "cpu", "--preset", "tiny", "--steps", "1", "--max-tokens", "64",
               "--top", "3", "--json", str(tmp_path / "p.json")])
    if importlib.util.find_spec("torch") is None:
        assert out.returncode == 2
        assert out.stderr.strip().splitlines()[-1].endswith("install torch beside it")
        assert not (tmp_path / "p.json").exists()
        return
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "p.json").read_text())
    assert set(result) == {"ours", "PyTorch eager"} and not result["ours"]["by_name"]
    eager = result["PyTorch eager"]
    assert eager["busy_ms"] > 0 and "aten::mm" in eager["by_name"]
    assert out.stdout.count("| kernel | calls a step | ms a step | share |") == 2
