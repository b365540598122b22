"""benchmarks/gpu_check.py, the GPU check of one device call: its budgets hold on any machine. Every
command keeps its reserve when every earlier one runs to the end of its own, the whole check fits
the call with time for a second try, and the CPU's dry run (every command replaced by a sleep that
overruns, the budgets scaled down) runs every stage of a to d, stops each at its budget with its
children, and brings back at most 8 files whose summary names each stage's outcome."""
import json
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402

CALL_S = 10 * 60          # the device tool: one command at most 10 minutes
DEVICE_S = 15 * 60        # a session's device time, the machine's start included
START_S = 2 * 60          # a machine's start, as seen (a minute or more)
RUN_LIMIT_S = 7 * 60      # the check's own limit: at most 7 minutes of run


def problems(plan, total):
    """What is wrong with a plan of (stage, command, reserve, cap) and a total budget: a command
    granted less than its reserve, or a whole run longer than the total, when every command runs
    to the end of its grant."""
    granted = gpu_check.schedule(plan, total)
    found = [f"{name} gets {s:.0f} s of its {p[2]} s reserve"
             for p, (name, s) in zip(plan, granted) if s < p[2]]
    if sum(s for _, s in granted) > total:
        found.append(f"the commands take {sum(s for _, s in granted):.0f} s of {total} s")
    return found


def test_every_command_keeps_its_reserve_when_every_earlier_one_overruns():
    assert problems(gpu_check.PLAN, gpu_check.TOTAL_S) == []
    granted = dict(gpu_check.schedule())
    assert all(granted[name] >= gpu_check.EXTRA_MIN_S or granted[name] == 0
               for stage, name, _, _ in gpu_check.PLAN if stage == "e")


def test_a_reserve_past_the_total_is_caught():
    broken = [("a", "env", 10, 20), ("b", "suite", 300, 400), ("c", "multi30k", 115, 180)]
    assert problems(broken, gpu_check.TOTAL_S) == ["the commands take 425 s of 360 s"]
    greedy = [("a", "env", 10, 20), ("b", "suite", 90, 400)]
    assert problems(greedy, 60) != []


def test_the_check_fits_one_call_with_time_for_a_second_try():
    assert gpu_check.TOTAL_S <= RUN_LIMIT_S < CALL_S
    assert START_S + 2 * gpu_check.TOTAL_S <= DEVICE_S
    assert sum(reserve for _, _, reserve, _ in gpu_check.PLAN) <= gpu_check.TOTAL_S


def test_the_dry_run_with_every_command_overrunning_runs_every_stage(tmp_path):
    out = tmp_path / "out"
    work = tmp_path / "work"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(out), "--work",
                           str(work), "--stub", "overrun", "--scale", "0.01"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr        # every command timed out
    results = json.loads((out / "results.json").read_text())
    outcomes = {r["command"]: r["outcome"] for r in results["records"]}
    assert list(outcomes) == [name for _, name, _, _ in gpu_check.PLAN]
    for stage, name, reserve, _ in gpu_check.PLAN:
        assert outcomes[name] == ("timeout" if stage != "e" else "skipped"), (name, outcomes)
    for r in results["records"]:
        assert r["granted"] >= [p[2] for p in gpu_check.PLAN if p[1] == r["command"]][0] * 0.01
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and set(files) <= set(gpu_check.OUT_FILES), files
    summary = (out / "summary.md").read_text()
    for stage, title in gpu_check.STAGES.items():
        row = [line for line in summary.splitlines() if line.startswith(f"| {stage}: {title} |")]
        word = "skipped" if stage == "e" else "timed out"
        assert len(row) == 1 and f"| {word}" in row[0], (stage, summary)
    for pid_file in work.glob("*.pid"):                # each stub's child, killed with its group
        status = Path(f"/proc/{pid_file.read_text().strip()}/status")
        assert not status.exists() or "zombie" in status.read_text(), pid_file.name


# what it prints, "started here" and "stopped by SIGINT", is not in its source: the log holds both
STOPPED_POLITELY = """
import time
try:
    print("started", "here", flush=True)
    time.sleep(30)
except KeyboardInterrupt:      # pytest prints its summary here, a training saves its checkpoint
    print("stopped by", "SIGINT")
"""


def test_the_end_of_a_grant_interrupts_a_command_even_when_ctrl_c_was_ignored(tmp_path):
    """Started as a background job, the check inherits Ctrl-C ignored, and so would every command:
    the SIGINT at the end of a grant must still reach the command before its SIGKILL."""
    log = tmp_path / "log"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code, seconds = gpu_check.run_command([sys.executable, "-c", STOPPED_POLITELY], 10, 3,
                                              log, None)            # SIGINT after 7 s
    finally:
        signal.signal(signal.SIGINT, before)
    text = log.read_text(encoding="utf-8")
    assert code == "timeout" and "started here" in text and "stopped by SIGINT" in text, text
    assert seconds < 10 + 5, seconds                          # not the 30 s sleep
