"""What benchmarks/gpu_check.py's commands say, and its results: the figures read from each
command's output (pytest's counts and failures, the parity stage's replay verdict, Multi30k's
scores, train_step.py's ratios against PyTorch), then summary.md and results.json.

Also a pytest plugin (`-p gpu_check_results` with GPU_CHECK_REPORTS set): every test reported, one
JSON line as it ends, a failure with its traceback, so that a run stopped at its budget keeps what
it found. Only the standard library is imported here: pytest loads this module first thing.
"""
import json
import os
import re
import statistics

STAGES = {"a": "versions and the fused-kernel parity tests", "b": "the whole suite on CuPy",
          "c": "Multi30k on the GPU recipe", "d": "training steps against PyTorch eager",
          "e": "with the time left: two ranks through NCCL, the step's kernels"}
LOGS = {"a": "a-versions-parity.log", "b": "b-suite.log", "c": "c-multi30k.log",
        "d": "d-train-step.log", "e": "e-extra.log"}
OUT_FILES = ("summary.md", "results.json", *LOGS.values(), "test_2016_flickr.hyp.en")
PYTESTS = ("parity", "suite", "nccl2")
REPLAY_TESTS = ("tests/test_graphs.py::test_replayed_steps_give_the_eager_steps_bits",
                "tests/test_graphs.py::test_a_run_with_graphs_resumes_exactly")
TRACEBACK_CHARS = 6000   # of one failure's report
LOG_BYTES = 14 * 2 ** 20  # a log's most: what comes back from a call is at most 16 MiB a file
MULTI30K = (("test BLEU", r"test_2016_flickr: BLEU = ([\d.]+)"), ("chrF", r"chrF = ([\d.]+)"),
            ("lowercased BLEU", r"lowercased BLEU = ([\d.]+)"), ("updates", r"trained (\d+) steps"),
            ("training s", r"steps in (\d+) s"), ("total s", r"; total (\d+) s"),
            ("stopped at", r"stopped at update (\d+)"))
_reports = None          # the plugin's file, in the controlling process only


# -------------------------------------------------------------------- the pytest plugin
def pytest_configure(config):
    """With GPU_CHECK_REPORTS set, open the reports file (not in xdist's workers: their reports
    reach the controlling process)."""
    global _reports
    path = os.environ.get("GPU_CHECK_REPORTS")
    if path and not hasattr(config, "workerinput"):
        _reports = open(path, "a", encoding="utf-8")


def pytest_runtest_logreport(report):
    """One JSON line a test's call (its setup or teardown too when they do not pass)."""
    if _reports is None or (report.when != "call" and report.passed):
        return
    record = {"test": report.nodeid, "when": report.when, "outcome": report.outcome}
    if report.failed:
        record["traceback"] = report.longreprtext[-TRACEBACK_CHARS:]
    _reports.write(json.dumps(record) + "\n")
    _reports.flush()


# -------------------------------------------------------------------- figures
def suite_figures(reports, text):
    """Counts, the failed tests and whether pytest finished, from the plugin's reports file."""
    lines = reports.read_text(encoding="utf-8").splitlines() if reports.exists() else []
    recs = [json.loads(line) for line in lines]

    def count(call, outcome):
        return sum(r["outcome"] == outcome and (r["when"] == "call") == call for r in recs)
    done = re.search(r"\d+ (passed|failed|skipped|errors?|deselected)\b.* in [\d.]+s", text)
    return {"passed": count(True, "passed"), "failed": count(True, "failed"),
            "errors": count(False, "failed"),
            "skipped": sum(r["outcome"] == "skipped" for r in recs),
            "failed tests": [r["test"] + ("" if r["when"] == "call" else f" ({r['when']})")
                             for r in recs if r["outcome"] == "failed"],
            "finished": bool(done), "reports": recs}


def replay_verdict(recs):
    """(whether every replay test ran and passed, why)."""
    seen = {t: [r["outcome"] for r in recs if r["test"] == t or r["test"].startswith(t + "[")]
            for t in REPLAY_TESTS}
    bad = [f"{t.split('::')[1]}: {', '.join(o) or 'not run'}" for t, o in seen.items()
           if not o or any(x != "passed" for x in o)]
    return not bad, "; ".join(bad) or "the replay tests passed on the GPU"


def step_ratios(text, json_file):
    """train_step.py's rounds, ours then PyTorch's each: the median, lowest and highest ratio of
    ms a step, synced step by step and pipelined. From its --json file (unrounded) where it
    finished, else from the lines of the rounds it printed before it was stopped."""
    if json_file.exists():
        rows = [(r["framework"], r["ms_per_step"], r.get("ms_per_step_pipelined"))
                for r in json.loads(json_file.read_text(encoding="utf-8"))["results"]]
    else:
        rows = [(fw, float(ms), float(piped) if piped else None) for fw, ms, piped in re.findall(
            r"^(ours|torch)\s+\w+\s+x1\s+([\d.]+) ms/step.*?(?:pipelined ([\d.]+) ms/step)?$",
            text, re.M)]
    pairs = list(zip([r for r in rows if r[0] == "ours"], [r for r in rows if r[0] == "torch"]))
    result = {"rounds": len(pairs)}
    for key, col in (("synced", 1), ("pipelined", 2)):
        both = [(o[col], t[col]) for o, t in pairs if o[col] and t[col]]
        if both:
            ratios = sorted(o / t for o, t in both)
            result[key] = {"ratio": statistics.median(ratios), "low": ratios[0], "high": ratios[-1],
                           "ours ms": [o for o, _ in both], "torch ms": [t for _, t in both]}
    return result


def figures(name, text, work):
    """What a command's output says, as a dict; work holds NAME.jsonl (the plugin's reports of a
    pytest run) and NAME.json (train_step.py's results)."""
    if name == "env":
        found = [line for line in text.splitlines() if line.startswith("{")]
        return json.loads(found[-1]) if found else {}
    if name in PYTESTS:
        return suite_figures(work / f"{name}.jsonl", text)
    if name in ("small", "base"):
        return step_ratios(text, work / f"{name}.json")
    if name == "profile":
        return {"tables": re.findall(r"^## (.*)$", text, re.M)}
    found = {key: float(m.group(1)) for key, pattern in MULTI30K if (m := re.search(pattern, text))}
    found["valid BLEU"] = re.findall(r"step (\d+): valid loss .*?BLEU ([\d.]+)", text)
    return found


# -------------------------------------------------------------------- the results
def outcome(rec):
    """A command's outcome in words."""
    if rec["outcome"] == "timeout":
        return f"timed out: stopped at its budget, {rec['seconds']:.0f} s"
    if rec["outcome"] == "done":
        return "done"
    return f"{rec['outcome']}: {rec.get('reason')}"


def command_figures(name, g):
    """One command's figures in a few words ('' where it has none)."""
    if name in PYTESTS and "passed" in g:
        return (f"{name}: {g['passed']} passed, {g['failed']} failed, {g['errors']} errors, "
                f"{g['skipped']} skipped" + ("" if g["finished"] else " (so far)"))
    if name in ("small", "base") and "synced" in g:
        s = g["synced"]
        pipelined = f", {g['pipelined']['ratio']:.2f}x pipelined" if "pipelined" in g else ""
        return (f"{name}: ours / PyTorch {s['ratio']:.2f}x synced ({s['low']:.2f}-{s['high']:.2f}, "
                f"{g['rounds']} rounds){pipelined}")
    if name == "multi30k" and "test BLEU" in g:
        return (f"test_2016_flickr BLEU {g['test BLEU']:.2f} (lowercased "
                f"{g.get('lowercased BLEU', 0):.2f}, chrF {g.get('chrF', 0):.2f}); "
                f"{g.get('updates', 0):.0f} updates in {g.get('training s', 0):.0f} s, "
                f"{g.get('total s', 0):.0f} s from start to score")
    if name == "profile" and g.get("tables"):
        return "; ".join(g["tables"])
    return ""


def stage_row(stage, recs, ctx):
    """The summary table's row of a stage."""
    worst = [r for r in recs if r["outcome"] not in ("done", "skipped")]
    status = (outcome(worst[0]) if worst else "done" if any(r["outcome"] == "done" for r in recs)
              else outcome(recs[0]) if recs else "not reached")
    parts = [command_figures(r["command"], r.get("figures", {})) for r in recs]
    if any(r["command"] == "parity" for r in recs):
        parts.append(f"replayed steps equal to eager: {'yes' if ctx['replay'][0] else 'no'} "
                     f"({ctx['replay'][1]})")
    if stage in "cde" and any(r["outcome"] != "skipped" for r in recs):
        parts.append(f"{'--cuda-graphs' if ctx['graphs'] else 'eager steps'} ({ctx['graphs_why']})")
    return (f"| {stage}: {STAGES[stage]} | {status} | {sum(r['seconds'] for r in recs):.0f} | "
            f"{sum(r['granted'] for r in recs):.0f} | {'; '.join(p for p in parts if p)} |")


def summary(ctx):
    """summary.md's text: the stages, the commands, the failed tests, the command lines."""
    v = ctx["versions"]
    lines = [f"# GPU check at {ctx['commit'].get('commit')}, {ctx['started']}", "",
             f"`{ctx['command']}`", "", "Commit: " + json.dumps(ctx["commit"]), "",
             "Versions: " + (", ".join(f"{k} {v[k]}" for k in v) or "not read"), "",
             "| stage | outcome | seconds | budget s | figures |", "|---|---|---|---|---|"]
    lines += [stage_row(s, [r for r in ctx["records"] if r["stage"] == s], ctx)
              for s in ctx["stages"]]
    lines += ["", "| command | outcome | seconds | budget s | log |", "|---|---|---|---|---|"]
    lines += [f"| {r['command']} | {outcome(r)} | {r['seconds']:.1f} | {r['granted']:.1f} | "
              f"{LOGS[r['stage']]} |" for r in ctx["records"]]
    for r in ctx["records"]:
        failed = r.get("figures", {}).get("failed tests")
        if failed:
            lines += ["", f"## {r['command']}: {len(failed)} failed (tracebacks: "
                      f"{LOGS[r['stage']]})", ""] + [f"- {t}" for t in failed[:60]]
    lines += ["", "## Commands", ""] + [f"- {r['command']}: `{r['cmd']}`" for r in ctx["records"]]
    return "\n".join(lines) + "\n"


def write_results(ctx, out):
    """summary.md and results.json in out, each written whole (atomically)."""
    from minitransformer.text.fileio import atomic_write
    atomic_write(out / "summary.md", lambda f: f.write(summary(ctx)), mode="w")
    keep = {k: ctx[k] for k in ("started", "command", "commit", "versions", "scale", "graphs",
                                "graphs_why", "stages")}
    records = [{**r, "figures": {k: v for k, v in r.get("figures", {}).items() if k != "reports"}}
               for r in ctx["records"]]
    text = json.dumps({**keep, "records": records}, indent=1) + "\n"
    atomic_write(out / "results.json", lambda f: f.write(text), mode="w")


def trim_log(path, limit=LOG_BYTES):
    """Keep a log under `limit` bytes: its first and last halves, the cut said between them."""
    if path.stat().st_size > limit:
        data = path.read_bytes()
        cut = f"\n# ... cut here: the log passed {limit} bytes ...\n".encode()
        path.write_bytes(data[:limit // 2] + cut + data[-(limit // 2):])
