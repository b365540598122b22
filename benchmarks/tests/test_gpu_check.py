"""benchmarks/gpu_check.py end to end on the CPU, each command replaced by a script of
benchmarks/tests (--stub FOLDER: the script gets the real command line): what the commands print is
read into the summary (pytest's counts and failures, Multi30k's score, the step ratios against
PyTorch, from train_step.py's JSON where it finished, else from its lines); --cuda-graphs follows the parity stage's replay tests; a command that fails is recorded
and the next one runs; the pytest plugin keeps a failure's traceback when the run is killed; the
data archive carries the six files and the commit; bad input is refused in one sentence. The
budgets themselves: tests/test_gpu_check_budgets.py."""
import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import gpu_check_results  # noqa: E402

REPLAYED = gpu_check_results.REPLAY_TESTS
# what the real commands print, in their words (lines of examples/multi30k.py's and
# benchmarks/train_step.py's output on a GPU)
MULTI30K = """\
step 1000: valid loss 1.824 (ppl 6.20), BLEU 35.92 (nrefs:1|case:mixed)
trained 3000 steps in 89 s, 19,262,147 target tokens, 215341 target tokens/s (evaluations included)
test_2016_flickr: BLEU = 41.12  (nrefs:1|case:mixed); beam 4, alpha 1.0; decoding 5 s; total 98 s
  lowercased BLEU = 41.37  (nrefs:1|case:lc); chrF = 60.52  (nrefs:1|case:mixed)"""
BASE_JSON = json.dumps({"results": [{"framework": fw, "ms_per_step": ms} for fw, ms in
                                    (("ours", 90), ("torch", 90), ("ours", 90), ("torch", 100))]})
STEP = "{fw:6s} {preset:6s} x1 {ms:9.1f} ms/step 468903 tgt tok/s 22333.5 GFLOP/s loss 9.293{pipe}"


def step_lines(preset, rounds):
    """train_step.py's lines of `rounds`: (ours ms, PyTorch's, ours pipelined, PyTorch's)."""
    lines = []
    for ours, torch, ours_p, torch_p in rounds:
        for fw, ms, pipe in (("ours", ours, ours_p), ("torch", torch, torch_p)):
            tail = f"  pipelined {pipe:.1f} ms/step" if pipe else ""
            lines.append(STEP.format(fw=fw, preset=preset, ms=ms, pipe=tail))
    return "\n".join(lines)


def heredoc(text):
    """A shell line that prints text as it is."""
    return f"cat <<'EOF'\n{text}\nEOF"


def report(test, outcome, when="call", traceback=None):
    record = {"test": test, "when": when, "outcome": outcome}
    if traceback:
        record["traceback"] = traceback
    return f"echo '{json.dumps(record)}' >> \"$GPU_CHECK_REPORTS\""


def stubs(folder, **scripts):
    """A script for every command of the check: `scripts[name]`, else one that exits 0; each
    keeps its command line in $GPU_CHECK_WORK/NAME.args, its device and BLAS threads in
    NAME.env."""
    folder.mkdir()
    for _, name, _, _ in gpu_check.PLAN:
        body = scripts.get(name, "exit 0")
        keep = (f'echo "$@" > "$GPU_CHECK_WORK/{name}.args"\n'
                f'echo "$MINITRANSFORMER_DEVICE $OPENBLAS_NUM_THREADS"'
                f' > "$GPU_CHECK_WORK/{name}.env"')
        (folder / f"{name}.sh").write_text(f"{keep}\n{body}\n")
    return folder


def check(tmp_path, folder, *extra):
    """The check run with the stubs of `folder`: (exit code, summary.md, results.json, work)."""
    out = tmp_path / "out"
    work = tmp_path / "work"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(out), "--work",
                           str(work), "--stub", str(folder), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    results = json.loads((out / "results.json").read_text())
    return done.returncode, (out / "summary.md").read_text(), results, work


def row(summary, stage):
    return next(line for line in summary.splitlines() if line.startswith(f"| {stage}: "))


def test_what_the_commands_print_reaches_the_summary(tmp_path):
    folder = stubs(
        tmp_path / "stubs",
        env="""echo '{"python": "3.12.3", "gpus": 2, "gpu": ["NVIDIA H200", "NVIDIA H200"]}'""",
        parity="\n".join([report(REPLAYED[0], "passed"), report(REPLAYED[1], "passed"),
                          report("tests/test_kernels.py::test_adam[gpu]", "passed"),
                          report("tests/test_kernels.py::test_x[gpu]", "skipped", "setup"),
                          "echo '3 passed, 1 skipped in 1.00s'"]),
        suite="\n".join([report(f"tests/test_a.py::test_{i}", "passed") for i in range(5)] + [
            report("tests/test_b.py::test_bad", "failed", traceback="E   AssertionError: boom"),
            report("tests/test_b.py::test_fixture", "failed", "setup", "E   fixture broke"),
            report("tests/test_c.py::test_gone", "skipped", "setup"),
            "echo '1 failed, 5 passed, 1 skipped, 1 error in 2.00s'", "exit 1"]),
        multi30k="\n".join(['while [ "$1" != --out ]; do shift; done',
                            'mkdir -p "$2"',
                            'echo "A man in an orange hat." > "$2/test_2016_flickr.hyp.en"',
                            heredoc(MULTI30K)]),
        small=heredoc(step_lines("small", [(20, 25, 18, 24), (21, 25, 18, 20), (19, 25, 18, 24)])),
        base="\n".join(['while [ "$1" != --json ]; do shift; done',     # finished: its JSON
                         f"echo '{BASE_JSON}' > \"$2\"",
                         heredoc(step_lines("base", [(80, 90, None, None), (80, 100, None, None)]))]),
        nccl2="\n".join([report("tests/test_distributed.py::test_n_ranks[2-2-gpu]", "passed"),
                         "echo '1 passed in 3.00s'"]),
        profile="echo '## ours (CUDA graphs): 20.47 ms a step wall, 17.68 ms of the GPU busy'")
    code, summary, results, work = check(tmp_path, folder)
    assert code == 1                                       # the suite failed
    assert "| done |" in row(summary, "a") and "parity: 3 passed, 0 failed, 0 errors, 1 skipped" \
        in row(summary, "a") and "replayed steps equal to eager: yes" in row(summary, "a")
    assert "| failed: exit 1 |" in row(summary, "b")
    assert "suite: 5 passed, 1 failed, 1 errors, 1 skipped |" in row(summary, "b")
    assert "- tests/test_b.py::test_bad\n- tests/test_b.py::test_fixture (setup)" in summary
    assert "test_2016_flickr BLEU 41.12 (lowercased 41.37, chrF 60.52); 3000 updates in 89 s, " \
           "98 s from start to score" in row(summary, "c")
    assert "small: ours / PyTorch 0.80x synced (0.76-0.84, 3 rounds), 0.75x pipelined" \
        in row(summary, "d")
    assert "base: ours / PyTorch 0.95x synced (0.90-1.00, 2 rounds); --cuda-graphs" \
        in row(summary, "d")
    assert "nccl2: 1 passed" in row(summary, "e")
    assert "17.68 ms of the GPU busy" in row(summary, "e")
    for name in ("multi30k", "small", "base", "profile"):   # the replay tests passed
        assert "--cuda-graphs" in (work / f"{name}.args").read_text(), name
    for name in ("parity", "suite", "nccl2"):                 # on the GPU, a BLAS thread a worker
        assert (work / f"{name}.env").read_text().split() == ["gpu", "1"], name
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(gpu_check_results.OUT_FILES)
    assert "AssertionError: boom" in (out / "b-suite.log").read_text()
    assert results["versions"]["gpus"] == 2
    assert (out / "test_2016_flickr.hyp.en").read_text() == "A man in an orange hat.\n"


def test_a_failing_command_is_recorded_and_the_next_runs_eager_without_the_replay(tmp_path):
    fail = 'echo "Traceback (most recent call last):"; echo "RuntimeError: {name} broke"; exit 3'
    scripts = {name: fail.format(name=name) for _, name, _, _ in gpu_check.PLAN}
    scripts["env"] = """echo '{"gpus": 1}'"""
    scripts["parity"] = "\n".join([report(REPLAYED[0], "failed", traceback="E   assert False"),
                                   report(REPLAYED[1], "passed"), "exit 1"])
    code, summary, results, work = check(tmp_path, stubs(tmp_path / "stubs", **scripts))
    assert code == 1
    outcomes = {r["command"]: (r["outcome"], r.get("reason")) for r in results["records"]}
    assert outcomes["nccl2"] == ("skipped", "one GPU: two ranks need two (the one-rank "
                                            "communicator test is in the suite)")
    for name in ("suite", "multi30k", "small", "base", "profile"):
        assert outcomes[name] == ("failed", "exit 3"), name
        assert "--cuda-graphs" not in (work / f"{name}.args").read_text()
    assert "replayed steps equal to eager: no (test_replayed_steps_give_the_eager_steps_bits: " \
           "failed)" in row(summary, "a")
    assert "RuntimeError: base broke" in (tmp_path / "out" / "d-train-step.log").read_text()


def test_two_stages_alone_and_no_gpu(tmp_path):
    """--stages c d runs those alone, eager (no parity stage); without a GPU they are skipped."""
    code, summary, results, work = check(tmp_path, stubs(tmp_path / "stubs"), "--stages", "c", "d")
    assert code == 0 and [r["command"] for r in results["records"]] == ["multi30k", "small", "base"]
    assert "eager steps (stage a did not run)" in row(summary, "c")
    folder = stubs(tmp_path / "stubs2", env="""echo '{"gpus": 0, "cupy error": "no CUDA"}'""")
    (tmp_path / "again").mkdir()
    code, summary, results, work = check(tmp_path / "again", folder)
    assert code == 1 and [r["outcome"] for r in results["records"]] == ["done"] + ["skipped"] * 7
    assert "skipped: no usable GPU (no CUDA)" in row(summary, "b")


def test_the_plugin_keeps_the_failures_of_a_run_killed_mid_way(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""\
        import os, signal

        def test_passes():
            pass

        def test_fails():
            assert 1 == 2

        def test_killed():
            os.kill(os.getpid(), signal.SIGKILL)     # as at the end of a budget: no summary
        """))
    reports = tmp_path / "reports.jsonl"
    env = {"PATH": "/usr/bin:/bin", "GPU_CHECK_REPORTS": str(reports),
           "PYTHONPATH": str(ROOT / "benchmarks")}
    code, _ = gpu_check.run_command([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                     "-p", "gpu_check_results", str(tmp_path / "test_sample.py")],
                                    120, 5, tmp_path / "log", env)
    assert code != 0
    found = gpu_check_results.suite_figures(reports, (tmp_path / "log").read_text())
    assert (found["passed"], found["failed"], found["finished"]) == (1, 1, False)
    assert [t.split("::")[-1] for t in found["failed tests"]] == ["test_fails"]
    assert "assert 1 == 2" in found["reports"][-1]["traceback"]


def test_the_archive_carries_the_six_files_and_the_commit(tmp_path):
    src = tmp_path / "m30k"
    src.mkdir()
    for name in gpu_check.DATA_FILES:
        with gzip.open(src / name, "wt") as f:
            f.write(f"{name}\n")
    gpu_check.pack(src, tmp_path / "pack" / "multi30k.tar")
    meta = gpu_check.unpack(tmp_path / "pack" / "multi30k.tar", tmp_path / "data")
    for name in gpu_check.DATA_FILES:
        assert (tmp_path / "data" / name).read_bytes() == (src / name).read_bytes()
    assert meta["commit"] == gpu_check.git_commit()["commit"] and "packed" in meta
    assert sorted(p.name for p in (tmp_path / "pack").iterdir()) == ["multi30k.tar"]


def bad(args, tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
    return done.stderr.strip().splitlines()[-1]


def test_bad_input_is_one_sentence_before_any_work(tmp_path):
    (tmp_path / "in").mkdir()
    out = str(tmp_path / "out")
    assert bad(["--pack", str(tmp_path / "in")], tmp_path).endswith(
        f"--pack {tmp_path / 'in'} lacks train.de.gz, train.en.gz, val.de.gz, val.en.gz, "
        "test_2016_flickr.de.gz, test_2016_flickr.en.gz: give Multi30k's folder")
    assert "--stub" in bad(["--out", out, "--stub", str(tmp_path / "in")], tmp_path)
    assert "--scale must be a number above 0, got 0.0" in bad(["--out", out, "--scale", "0"],
                                                             tmp_path)
    assert "--data" in bad(["--out", out, "--data", str(tmp_path / "in" / "none.tar")], tmp_path)
    assert "--out is required" in bad([], tmp_path)


def test_a_log_past_its_limit_keeps_its_head_and_tail(tmp_path):
    log = tmp_path / "b-suite.log"
    log.write_bytes(bytes(range(100)))
    gpu_check_results.trim_log(log, limit=40)
    data = log.read_bytes()
    assert data.startswith(bytes(range(20))) and data.endswith(bytes(range(80, 100)))
    assert b"cut here" in data and len(data) < 100
