"""benchmarks/gpu_run.py, the first GPU run as one command: its CPU dry run (tiny sizes, a generated
corpus) writes the results folder, runs every stage or says why not, resumes the Multi30k run, and
goes on past a stage that fails."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_run  # noqa: E402


def dry_run(out, run_dir, *extra):
    return subprocess.run([sys.executable, "benchmarks/gpu_run.py", "--dry-run", "--out", str(out),
                           "--run-dir", str(run_dir), *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """One dry run: (its results folder, results.json, the finished process)."""
    tmp = tmp_path_factory.mktemp("gpu_run")
    done = dry_run(tmp / "results", tmp / "run")
    return tmp, json.loads((tmp / "results" / "results.json").read_text()), done


def test_the_dry_run_writes_a_small_results_folder(dry):
    tmp, results, done = dry
    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name for p in (tmp / "results").iterdir())
    assert names == sorted(["results.json", "summary.md", "kernels.log", "suite.log", "profile.txt",
                            "train_step.log", "multi30k.log", "multi30k-log.jsonl",
                            "test_2016_flickr.hyp.en"])
    assert sum(p.stat().st_size for p in (tmp / "results").iterdir()) < 1_000_000
    assert len((tmp / "results" / "test_2016_flickr.hyp.en").read_text().splitlines()) == 60
    summary = (tmp / "results" / "summary.md").read_text()
    for name in gpu_run.STAGES:
        assert f"| {name} | ran |" in summary


def test_every_stage_ran_on_the_cpu_with_its_figures(dry):
    _, results, _ = dry
    stages = results["stages"]
    assert list(stages) == list(gpu_run.STAGES)
    assert all(r["status"] == "ran" and r["seconds"] <= r["budget_s"] + 60
               for r in stages.values()), stages
    assert stages["env"]["result"]["numpy"] and stages["env"]["result"]["gpu usable"] is False
    assert stages["kernels"]["result"]["tests"] > 0
    suite = stages["suite"]["result"]
    assert suite["tests"] > 0 and suite["failures"] == suite["errors"] == 0
    assert suite["files not passing"] == []
    assert [o["op"].split()[0] for o in stages["fused"]["result"]["ops"]] == [
        "softmax", "log_softmax", "cross_entropy,", "layer_norm", "dropout", "Adam"]
    assert all(o["plain_ms"] > 0 and o["fused_ms"] > 0 for o in stages["fused"]["result"]["ops"])
    prof = stages["profile"]["result"]
    assert prof["preset"] == "tiny" and prof["step_ms"] > 0 and prof["tokens"] > 0
    assert {"linear", "cross_entropy", "layer_norm"} <= set(prof["ops"])
    assert "(all ops)" in prof["table"]
    graph = stages["graph"]["result"]                       # on the CPU: the eager steps alone
    assert (graph["captured"], graph["reason"], graph["device"]) == (None, "CUDA graphs need a GPU",
                                                                     "cpu")
    assert graph["eager_ms"] > 0 and graph["steps"] == 3 * graph["batches"]
    assert "graph_ms" not in graph
    steps = stages["train_step"]["result"]
    assert list(steps) == ["fp32"]                                   # TF32 is a GPU mode
    (ours,) = steps["fp32"]["results"]
    assert ours["framework"] == "ours" and ours["preset"] == "tiny"
    assert ours["lengths"] == "multi30k train"
    m30k = stages["multi30k"]["result"]
    assert m30k["stopped at update"] == 1 and m30k["training"]["step"] == 1
    assert not m30k["resumed"]
    assert 0 <= m30k["test BLEU"] <= 100 and "chrF" in m30k


def test_a_second_run_resumes_multi30k_and_keeps_the_other_stages(dry):
    tmp, first, _ = dry
    done = dry_run(tmp / "results", tmp / "run", "--stages", "multi30k")
    assert done.returncode == 0, done.stdout + done.stderr
    stages = json.loads((tmp / "results" / "results.json").read_text())["stages"]
    assert stages["multi30k"]["result"]["resumed"]
    assert stages["multi30k"]["result"]["stopped at update"] == 2
    assert stages["fused"] == first["stages"]["fused"]        # an earlier stage's results are kept


def fake_stages(monkeypatch, gpu_usable, broken):
    """Stages that return at once; `broken` raises."""
    for name in gpu_run.STAGES:
        def stage(args, out, seconds, name=name):
            if name == broken:
                raise RuntimeError("the kernel crashed")
            results = {"env": {"gpu usable": gpu_usable}, "fused": {"ops": []}, "train_step": {}}
            return results.get(name, {"exit": 0})
        monkeypatch.setattr(gpu_run, f"stage_{name}", stage)


def test_a_stage_that_fails_is_recorded_and_the_next_runs(monkeypatch, tmp_path):
    fake_stages(monkeypatch, gpu_usable=True, broken="kernels")
    assert gpu_run.main(["--dry-run", "--out", str(tmp_path / "r"),
                         "--run-dir", str(tmp_path / "run")]) == 1
    stages = json.loads((tmp_path / "r" / "results.json").read_text())["stages"]
    assert stages["kernels"]["status"] == "failed"
    assert "the kernel crashed" in stages["kernels"]["reason"]
    assert [r["status"] for r in stages.values()] == (["ran", "failed"] +
                                                      ["ran"] * (len(gpu_run.STAGES) - 2))


def test_one_stage_alone_in_a_new_folder_finds_the_gpu_first(monkeypatch, tmp_path):
    """--stages multi30k into an empty --out: env runs too (without it, the GPU stages would find no
    GPU and skip)."""
    fake_stages(monkeypatch, gpu_usable=True, broken=None)
    data = gpu_run.dry_corpus(tmp_path / "data", n=3)
    assert gpu_run.main(["--data-dir", str(data), "--out", str(tmp_path / "r"),
                         "--run-dir", str(tmp_path / "run"), "--stages", "multi30k"]) == 0
    stages = json.loads((tmp_path / "r" / "results.json").read_text())["stages"]
    assert stages["env"]["status"] == stages["multi30k"]["status"] == "ran"
    others = {stages[n]["reason"] for n in gpu_run.STAGES if n not in ("env", "multi30k")}
    assert others == {"not in --stages"}


def test_env_gets_half_a_minute_however_short_the_run(monkeypatch, tmp_path):
    """--minutes 2.5 gives env 3 s by its share: too little, env would be skipped for want of time,
    and multi30k with it; env's budget has a floor of 30 s."""
    fake_stages(monkeypatch, gpu_usable=True, broken=None)
    data = gpu_run.dry_corpus(tmp_path / "data", n=3)
    assert gpu_run.main(["--data-dir", str(data), "--out", str(tmp_path / "r"),
                         "--run-dir", str(tmp_path / "run"),
                         "--stages", "multi30k", "--minutes", "2.5"]) == 0
    stages = json.loads((tmp_path / "r" / "results.json").read_text())["stages"]
    assert stages["env"]["status"] == stages["multi30k"]["status"] == "ran"
    assert stages["env"]["budget_s"] == 30


def test_without_a_gpu_the_gpu_stages_are_skipped_with_the_reason(monkeypatch, tmp_path):
    fake_stages(monkeypatch, gpu_usable=False, broken=None)
    data = gpu_run.dry_corpus(tmp_path / "data", n=3)
    assert gpu_run.main(["--data-dir", str(data), "--out", str(tmp_path / "r"),
                         "--run-dir", str(tmp_path / "run")]) == 0
    stages = json.loads((tmp_path / "r" / "results.json").read_text())["stages"]
    assert stages["env"]["status"] == "ran"
    assert all(r["status"] == "skipped" and "no usable GPU" in r["reason"]
               for n, r in stages.items() if n != "env")


def test_a_command_past_its_budget_is_stopped():
    sleeper = "import time; print('up', flush=True); time.sleep(60)"
    code, output = gpu_run.run_command([sys.executable, "-c", sleeper], 1)
    assert code == "timeout" and "up" in output
