"""benchmarks/train_step.py, the training-step benchmark: its rounds, its ranks sharing each batch,
the default ranks, the pairs of its summary, the kept heap given to PyTorch's workers alone, and the
line that says why a worker failed. Run as a user runs it, in a subprocess from the repository's
root, or loaded as a module for its helpers."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from minitransformer.run import distributed

ROOT = Path(__file__).resolve().parents[2]


def run(script, args):
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def load_train_step():
    spec = importlib.util.spec_from_file_location("train_step_bench",
                                                  ROOT / "benchmarks" / "train_step.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_train_step_rounds_alternate_and_pair(tmp_path):
    """--rounds R runs each framework R times; the JSON holds every round; PyTorch missing is said
    once."""
    out = run("benchmarks/train_step.py",
              ["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "64",
               "--rounds", "2", "--torch", "--ranks", "1", "--json", str(tmp_path / "r.json")])
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    ours = [(r["framework"], r["preset"]) for r in rows if r["framework"] == "ours"]
    assert ours == [("ours", "tiny")] * 2
    torch_ran = any(r["framework"] == "torch" for r in rows)
    assert out.stdout.count("PyTorch is not installed") == (0 if torch_ran else 1)
    assert sum(line.startswith("ours   tiny") for line in out.stdout.splitlines()) == 2


def test_train_step_says_why_a_worker_failed_above_open_mpis_banner():
    bench = load_train_step()
    why = "SystemExit: a batch of 1 sentence(s) cannot give each of 2 ranks one: raise --max-tokens"
    banner = ("-" * 74 + "\nPrimary job  terminated normally, but 1 process returned\n"
              "a non-zero exit code.\n" + "-" * 74)
    assert bench.error_line(f"WARNING: generated lengths\n{why}\n{banner}\n") == why    # Open MPI
    # MPICH, one process
    assert bench.error_line(f"Traceback (most recent call last):\n  ...\n{why}\n\n") == why
    assert bench.error_line("") == "(no output)" and bench.error_line(banner) == "-" * 74


def test_train_step_gives_the_kept_heap_to_pytorch_alone_with_or_without_ranks():
    """--torch-keep-freed: glibc's variables for PyTorch's workers only, kept beside the ranks'
    thread count (PyTorch's ranks are processes of cores / N threads each; ours are threads of one
    process: no count)."""
    bench = load_train_step()
    for ranks in (1, 2):
        torch_env, ours_env = (bench.worker_env({"A": "1"}, fw, ranks, True)
                               for fw in ("torch", "ours"))
        assert torch_env["MALLOC_MMAP_MAX_"] == "0" and torch_env["MALLOC_TOP_PAD_"] == str(1 << 30)
        assert "MALLOC_MMAP_MAX_" not in ours_env and "MALLOC_TOP_PAD_" not in ours_env
        assert torch_env["A"] == ours_env["A"] == "1"
        assert torch_env["MINITRANSFORMER_DEVICE"] == ours_env["MINITRANSFORMER_DEVICE"] == "cpu"
        assert ("OMP_NUM_THREADS" in torch_env) == (ranks > 1) and "OMP_NUM_THREADS" not in ours_env
    assert "MALLOC_MMAP_MAX_" not in bench.worker_env({}, "torch", 2, False)


def test_train_step_pairs_like_with_like_then_each_as_it_trains_by_default():
    """The summary's ratios: one process each, N ranks each, and ours' default ranks against
    PyTorch's one process only where both ran (a PyTorch training loop is one process unless
    torchrun starts it)."""
    bench = load_train_step()
    assert [p[:2] for p in bench.ratio_pairs([1, 2], 2)] == [(1, 1), (2, 2), (2, 1)]
    default = "ours as 2 thread ranks (examples/multi30k.py's default)"
    assert default in bench.ratio_pairs([1, 2], 2)[-1][2]
    assert [p[:2] for p in bench.ratio_pairs([1], 2)] == [(1, 1)]      # --ranks 1: no cross pair
    assert [p[:2] for p in bench.ratio_pairs([2], 2)] == [(2, 2)]      # PyTorch's 1 process not run
    assert [p[:2] for p in bench.ratio_pairs([1], 1)] == [(1, 1)]      # one core: ours in one rank


def test_train_step_runs_one_rank_and_the_default_ranks_unless_told(tmp_path):
    """No --ranks runs ours in one rank and in distributed.default_ranks() (2 thread ranks on 2
    cores)."""
    out = run("benchmarks/train_step.py",
              ["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "256",
               "--json", str(tmp_path / "r.json")])
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = [r["ranks"] for r in json.loads((tmp_path / "r.json").read_text())["results"]]
    assert ranks == sorted({1, distributed.default_ranks()})


def test_train_step_ranks_share_each_batch(tmp_path):
    """--ranks 1 2: the same batches in one process and in 2 ranks (rows r, r + 2, ... each, mean
    losses weighted by their share of the tokens): the update's loss is the whole batch's, not the
    sum of two means."""
    out = run("benchmarks/train_step.py",
              ["--preset", "tiny", "--steps", "1", "--warmup", "0", "--max-tokens", "256",
               "--ranks", "1", "2", "--json", str(tmp_path / "r.json")])
    assert out.returncode == 0 and "failed" not in out.stdout, out.stdout + out.stderr
    one, two = json.loads((tmp_path / "r.json").read_text())["results"]
    assert (one["ranks"], two["ranks"]) == (1, 2) and one["avg_tgt_tokens"] == two["avg_tgt_tokens"]
    assert abs(two["loss"] - one["loss"]) < 0.02 * one["loss"]   # dropout differs, the scale not
    # a batch too small to share: every rank says so and stops (none waits for the others in the
    # Allreduce)
    out = run("benchmarks/train_step.py", ["--preset", "tiny", "--steps", "1", "--warmup", "0",
                                           "--max-tokens", "8", "--ranks", "2"])
    assert out.returncode == 1
    assert "cannot give each of 2 ranks one: raise --max-tokens" in out.stdout
