"""The command line: --help of every subcommand, the demo end to end (--quick), train / resume /
average / translate on files, bleu against a hand-computed case, a few errors on bad input (the full table is
tests/test_bad_input.py), and the layout of minitransformer/cli/ (subcommands import only common.py and the library)."""
import ast
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minitransformer.run import checkpoint as ckpt
from minitransformer.run import distributed
from minitransformer import cli
from minitransformer.cli import demo

COMMANDS = ["demo", "bpe", "train", "translate", "bleu", "average"]
CLI_DIR = Path(cli.__file__).resolve().parent


def run(argv, capsys, stdin=None, monkeypatch=None):
    if stdin is not None:  # fileio reads stdin's bytes (sys.stdin.buffer)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert f"usage: python -m minitransformer {command}" in out
    assert f"examples:\n  python -m minitransformer {command}" in out


@pytest.mark.parametrize("argv", [["demo", "--bogus"], ["bleu", "h.txt", "r.txt", "--lowercase"],
                                  ["translate", "--checkpoint", "c.npz", "--bogus", "1"],
                                  ["average", "--output", "a.npz", "c.npz", "--bogus"]])
def test_unknown_option_named_by_its_subcommand(argv, capsys):
    # "python -m minitransformer: error: unrecognized arguments", without the subcommand or its usage line
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    unknown = " ".join(argv[argv.index(next(a for a in argv if a in ("--bogus", "--lowercase"))):])
    assert e.value.code == 2
    assert err.startswith(f"usage: python -m minitransformer {argv[0]} ")
    assert err.endswith(f"python -m minitransformer {argv[0]}: error: unrecognized arguments: {unknown}\n"), err


def test_top_level_help_lists_commands():
    run = subprocess.run([sys.executable, "-m", "minitransformer", "--help"], cwd=CLI_DIR.parents[1],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    listed = run.stdout.split("positional arguments:")[1].split("options:")[0]
    assert all(f"\n    {c}" in listed for c in COMMANDS), listed


def cli_imports(path):
    """The modules of minitransformer.cli that a file of cli/ imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:       # from .common import ..., from . import x
            found.update([node.module] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minitransformer.cli"):
            rest = node.module[len("minitransformer.cli"):].lstrip(".")
            found.update([rest] if rest else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            found.update(a.name[len("minitransformer.cli."):] for a in node.names
                         if a.name.startswith("minitransformer.cli."))
    return {name.split(".")[0] for name in found}


def test_subcommands_import_only_common():
    files = sorted(p for p in CLI_DIR.glob("*.py") if p.name != "__init__.py")
    assert {p.stem for p in files} >= {"common", "train", "translate", "bpe", "demo"}
    for path in files:
        others = cli_imports(path) - {"common"}
        assert not others, f"cli/{path.name} imports {sorted(others)}: subcommands share only cli/common.py"
    assert cli_imports(CLI_DIR / "common.py") == set()


def test_every_subcommand_runs_through_run_name():
    parser = cli.build_parser()
    for command in COMMANDS:
        args = parser.parse_args([command] + {"demo": [], "bpe": ["--input", "x", "--vocab-size", "300", "--output", "y"],
                                              "train": ["--train-src", "a", "--train-tgt", "b", "--out", "c"],
                                              "translate": ["--checkpoint", "c"], "bleu": ["h", "r"],
                                              "average": ["c", "--output", "o"]}[command])
        assert args.func.__name__ == f"run_{command}"


def test_demo_quick_end_to_end(tmp_path, capsys):
    code, out, err = run(["demo", "--quick", "--out", str(tmp_path), "--no-progress"], capsys)
    assert code == 0, err
    for label in ("source:", "reference:", "hypothesis:", "exact match on", "BLEU = ", "nrefs:1|"):
        assert label in out
    losses = [r["loss"] for r in map(json.loads, open(tmp_path / "log.jsonl")) if "loss" in r and "step" in r]
    assert losses[-1] < losses[0] - 1.0, (losses[0], losses[-1])
    assert (tmp_path / "tokenizer.json").exists()
    checkpoint = [f for f in os.listdir(tmp_path) if f.startswith("checkpoint_0")]
    assert checkpoint


def test_demo_translates_with_the_weights_the_validation_judged_best(tmp_path, capsys, monkeypatch):
    """With evaluations, the demo's translations come from checkpoint_best.npz: the first
    evaluation of the highest validation BLEU, not the last update."""
    monkeypatch.setattr(demo, "QUICK", dict(demo.QUICK, eval_every=50))
    code, out, err = run(["demo", "--quick", "--out", str(tmp_path), "--no-progress"], capsys)
    assert code == 0, err
    evaluations = [r for r in map(json.loads, open(tmp_path / "log.jsonl")) if "bleu" in r]
    assert [r["step"] for r in evaluations] == [50, 100, 150]
    best = max(evaluations, key=lambda r: (r["bleu"], -r["step"]))
    assert f"translating with the weights of step {best['step']}, the best validation BLEU" in out
    assert f"--checkpoint {tmp_path / 'checkpoint_best.npz'}" in out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Small train/valid files of the generated task, and the paths of a short trained run."""
    d = tmp_path_factory.mktemp("corpus")
    (train_src, train_tgt), (valid_src, valid_tgt), _ = demo.make_splits(200, 10, 0, seed=5, max_numbers=2,
                                                                          max_digits=2)
    for name, lines in dict(train_src=train_src, train_tgt=train_tgt, valid_src=valid_src,
                            valid_tgt=valid_tgt).items():
        (d / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = d / "config.json"
    cfg.write_text(json.dumps({"preset": "tiny", "d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 1}))
    return d


def train_args(d, out, *extra):
    return ["train", "--config", str(d / "config.json"), "--train-src", str(d / "train_src.txt"),
            "--train-tgt", str(d / "train_tgt.txt"), "--valid-src", str(d / "valid_src.txt"),
            "--valid-tgt", str(d / "valid_tgt.txt"), "--out", str(out), "--max-tokens", "200",
            "--warmup", "5", "--eval-every", "3", "--save-every", "2", "--keep", "3", "--no-progress", *extra]


def test_train_resume_average_translate(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    code, stdout, err = run(train_args(corpus, out, "--vocab-size", "300", "--steps", "4"), capsys)
    assert code == 0, err
    assert "done at step 4" in stdout and (out / "tokenizer.json").exists()
    assert re.search(r"best BLEU \d+\.\d\d; checkpoint: ", stdout), stdout       # validated: its best, 2 decimals
    code, stdout, err = run(train_args(corpus, out, "--vocab-size", "300", "--steps", "6", "--resume", "auto"), capsys)
    assert code == 0, err
    assert "using the tokenizer learned before" in stdout and "done at step 6" in stdout
    records = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [r["step"] for r in records if "loss" in r and "event" not in r][-2:] == [5, 6]

    code, stdout, err = run(["average", str(out), "--last", "2", "--output", str(tmp_path / "avg.npz")], capsys)
    assert code == 0, err
    assert "averaged 2 checkpoints" in stdout
    a, b, avg = (ckpt.load(p) for p in (out / "checkpoint_0000004.npz", out / "checkpoint_0000006.npz", tmp_path / "avg.npz"))
    for k in avg.model:  # summed in float64 (exact for two float32 numbers), halved, rounded once to float32
        mean = ((a.model[k].astype(np.float64) + b.model[k]) / 2).astype(avg.model[k].dtype)
        np.testing.assert_array_equal(avg.model[k], mean)

    code, stdout, err = run(["translate", "--checkpoint", str(tmp_path / "avg.npz"), "--beam", "2"], capsys,
                            stdin="1 2\n3 , 4 5\n", monkeypatch=monkeypatch)
    assert code == 0, err
    assert len(stdout.splitlines()) == 2
    from minitransformer import search
    bounds, done = [], search._done                                    # --stop reaches beam search's bound
    monkeypatch.setattr(search, "_done", lambda *a: bounds.append(a[-1]) or done(*a))
    code, stdout, err = run(["translate", "--checkpoint", str(tmp_path / "avg.npz"), "--beam", "2", "--stop", "fast"],
                            capsys, stdin="1 2\n", monkeypatch=monkeypatch)
    assert code == 0 and len(stdout.splitlines()) == 1, err
    assert bounds and not any(bounds)                                  # exact=False at every step
    monkeypatch.setattr(search, "_done", done)
    (tmp_path / "in.txt").write_text("1 2\n3 , 4 5\n7\n")
    (tmp_path / "out.txt").write_text("an earlier, longer result\n" * 5)
    code, stdout, err = run(["translate", "--checkpoint", str(tmp_path / "avg.npz"), "--beam", "1",
                             "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")], capsys)
    assert code == 0 and stdout == "", err
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 3      # replaced whole, by the new result
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]
    code, stdout, err = run(["translate", "--checkpoint", str(tmp_path / "avg.npz"), "--beam", "3", "--nbest", "2"],
                            capsys, stdin="1 2\n", monkeypatch=monkeypatch)
    assert code == 0, err
    assert [line.split("\t")[0] for line in stdout.splitlines()] == ["0", "0"]

    png = tmp_path / "attn.png"
    argv = ["translate", "--checkpoint", str(tmp_path / "avg.npz"), "--beam", "2", "--attention", str(png)]
    try:
        import matplotlib  # noqa: F401
        code, stdout, err = run(argv, capsys, stdin="1 2\n", monkeypatch=monkeypatch)
        assert code == 0, err
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "attention map of line 1" in err
    except ImportError:
        pass
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)                   # as if it were not installed
    code, stdout, err = run(argv, capsys, stdin="1 2\n", monkeypatch=monkeypatch)
    assert code == 1 and "--attention: drawing attention maps needs matplotlib" in err and "Traceback" not in err
    assert stdout == ""                                                # refused before any translation


def test_bleu_identical_is_100(tmp_path, capsys):
    lines = ["the cat sat on the mat", "two dogs ran in the park"]
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("\n".join(lines) + "\n")
    ref.write_text("\n".join(lines) + "\n")
    code, out, _ = run(["bleu", str(hyp), str(ref)], capsys)
    assert code == 0 and "BLEU = 100.00" in out and "signature: nrefs:1|case:mixed" in out


def test_bleu_hand_computed(tmp_path, capsys):
    # one sentence, hypothesis "a b c d e" against reference "a b c d f": n-gram precisions
    # 4/5, 3/4, 2/3, 1/2, brevity penalty 1 -> BLEU = (4/5 * 3/4 * 2/3 * 1/2) ** (1/4) = 0.5 ** 0.5 * ...
    hyp, ref = tmp_path / "h.txt", tmp_path / "r.txt"
    hyp.write_text("a b c d e\n")
    ref.write_text("a b c d f\n")
    code, out, _ = run(["bleu", str(hyp), str(ref)], capsys)
    expected = 100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25
    assert code == 0 and f"BLEU = {expected:.2f}" in out


@pytest.mark.parametrize("argv, code, message", [
    (["bleu", "nope.txt", "ref.txt"], 2, "hypothesis file not found: nope.txt"),
    (["translate", "--checkpoint", "missing.npz"], 2, "--checkpoint file not found: missing.npz"),
    (["average", "a.npz", "--output", "b.npz"], 2, "checkpoint not found: a.npz"),
    (["demo", "--steps", "0"], 2, "--steps must be at least 1"),
    (["demo", "--seed", str(10 ** 400)], 2, "--seed must be at most 9,007,199,254,740,991 in size"),
])
def test_usage_errors(argv, code, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got, out, err = run(argv, capsys)
    assert got == code
    assert message in err and "Traceback" not in err


def test_runtime_and_input_errors(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    got, _, err = run(["translate", "--checkpoint", "bad.npz"], capsys)
    assert got == 1 and "bad.npz is not a readable checkpoint" in err
    other = tmp_path / "other_tok.json"
    from minitransformer.text.bpe import BPE
    BPE.train(["x y z"], 262, min_frequency=1).save(other)
    got, _, err = run(train_args(corpus, tmp_path / "y", "--steps", "2", "--vocab-size", "300"), capsys)
    assert got == 0, err
    got, _, err = run(train_args(corpus, tmp_path / "y", "--steps", "3", "--tokenizer", str(other), "--resume", "auto"),
                      capsys)
    assert got == 1 and "was saved for another model configuration" in err
    (tmp_path / "h.txt").write_text("a\nb\n")
    (tmp_path / "r.txt").write_text("a\n")
    got, _, err = run(["bleu", "h.txt", "r.txt"], capsys)
    assert got == 2 and "r.txt has 1 lines but the hypotheses have 2" in err
    got, _, err = run(train_args(corpus, tmp_path / "x", "--steps", "1"), capsys)
    assert got == 2 and "--tokenizer FILE or --vocab-size" in err
    (tmp_path / "short.txt").write_text("1 2\n")
    args = train_args(corpus, tmp_path / "x", "--steps", "1", "--vocab-size", "300")
    args[args.index("--train-tgt") + 1] = "short.txt"
    got, _, err = run(args, capsys)
    assert got == 1 and "parallel files differ in length" in err and "short.txt has 1" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as e:  # argparse's own usage errors exit with 2 too
        cli.main(["train", "--steps", "x"])
    assert e.value.code == 2


def test_stdout_is_utf8_whatever_the_locale(tmp_path, monkeypatch):
    """Text in is UTF-8 (fileio refuses anything else), so text out is too, with PYTHONIOENCODING=ascii or
    a C locale: a non-ASCII name on stdout is written, not a UnicodeEncodeError after all the work."""
    from minitransformer.cli.common import prints
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stdout)
    assert prints(lambda args: print("Grüße, 世界") or 0)(None) == 0
    assert stdout.buffer.getvalue() == "Grüße, 世界\n".encode("utf-8")
    (tmp_path / "c.txt").write_text("Grüße aus Köln\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "minitransformer", "bpe", "--input", "c.txt", "--vocab-size", "262",
                           "--output", "tök.json", "--quiet"], cwd=tmp_path, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": "ascii", "PYTHONPATH": str(CLI_DIR.parents[1])})
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode()
    assert "wrote tök.json".encode("utf-8") in done.stdout


HUGE = str(10 ** 400)
max_rank_threads = distributed.max_rank_threads


@pytest.mark.parametrize("extra, message", [
    (["--warmup", HUGE], r"--warmup must be at most 9,007,199,254,740,991 in size \(2\*\*53 - 1, .*\), got a number "
                         r"of 401 digits"),
    (["--seed", str(2 ** 53)], r"--seed must be at most 9,007,199,254,740,991 in size .*got 9,007,199,254,740,992"),
    (["--max-tokens", HUGE], r"--max-tokens must be at most"),
    (["--steps", "-" + HUGE], r"--steps must be at most .* in size"),
    (["--ranks", str(max_rank_threads() + 1), "--max-tokens", "100000"],
     r"--ranks must be at most \d+ \(2 rank threads per CPU core here"),
    (["--accum", "1000000"], r"--accum 1,000,000 asks for more batches per update than the 200 training pairs"),
    (["--epochs", "1e300"], r"--epochs 1e\+300 over 200 pairs could make more than 9,007,199,254,740,991 updates"),
], ids=["warmup", "seed", "max-tokens", "steps", "ranks", "accum", "epochs"])
def test_train_bounds_every_option_before_any_work(corpus, tmp_path, capsys, extra, message):
    """What would overflow later (a float, int64, a checkpoint's JSON) or allocate without bound (an
    update's batches, rank threads) is one sentence naming the option, exit 2, before --out holds a file."""
    argv = train_args(corpus, tmp_path / "run", "--vocab-size", "300", *extra)
    if "--epochs" not in extra:
        argv += ["--steps", "2"] if "--steps" not in extra else []
    code, _, err = run(argv, capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "run").exists()


def test_train_refuses_more_batches_per_update_than_an_epoch_holds_keeping_the_tokenizer(corpus, tmp_path, capsys):
    """Fewer than --accum batches in an epoch is known once the pairs are encoded: refused before the model
    trains, naming --accum; the tokenizer learned meanwhile is kept, and --tokenizer uses it again."""
    out = tmp_path / "run"
    code, _, err = run(train_args(corpus, out, "--vocab-size", "300", "--steps", "2", "--accum", "150", "--ranks", "1"),
                       capsys)
    assert code == 2 and "Traceback" not in err, err
    assert re.search(r"--accum 150 asks for more batches per update than an epoch holds \(\d+ of up to 200 tokens\)",
                     err), err
    assert f"{out / 'tokenizer.json'}, learned now, is kept" in err and os.listdir(out) == ["tokenizer.json"]
    code, _, err = run(train_args(corpus, out, "--tokenizer", str(out / "tokenizer.json"), "--steps", "1"), capsys)
    assert code == 0, err


def test_train_too_long_an_out_is_one_sentence_and_makes_no_folder(corpus, tmp_path, capsys):
    deep = tmp_path.joinpath(*["d" * 200] * 21)
    code, _, err = run(train_args(corpus, deep, "--vocab-size", "300", "--steps", "1"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(r"--out \S+ is a path of 4,\d{3} bytes: .* passes the 4,095 bytes a path may have", err), err
    assert os.listdir(tmp_path) == []


def test_resume_auto_never_touches_another_runs_files_when_its_checkpoints_are_gone(corpus, tmp_path, capsys):
    """The step checkpoints moved away, the run's log.jsonl and tokenizer.json stay: `--resume auto` finds
    nothing to continue, and starting afresh would append to that log and replace that tokenizer."""
    out = tmp_path / "run"
    code, _, err = run(train_args(corpus, out, "--vocab-size", "300", "--steps", "2"), capsys)
    assert code == 0, err
    for name in os.listdir(out):
        if name.startswith("checkpoint_"):
            os.replace(out / name, tmp_path / name)
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert sorted(before) == ["log.jsonl", "tokenizer.json"]
    code, _, err = run(train_args(corpus, out, "--vocab-size", "300", "--steps", "4", "--resume", "auto"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--out {out} already holds log.jsonl of an earlier run: --resume auto finds none of its step" in err
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    code, _, err = run(train_args(corpus, tmp_path / "empty", "--vocab-size", "300", "--steps", "1", "--resume",
                                  "auto"), capsys)
    assert code == 0, err                                              # an empty folder: a fresh start


def test_resume_auto_names_a_fifo_planted_as_the_latest_checkpoint_before_any_work(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / "checkpoint_0000009.npz")                          # reading it would wait for ever
    code, _, err = run(train_args(corpus, out, "--vocab-size", "300", "--steps", "12", "--resume", "auto"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--resume auto: the latest checkpoint" in err and "is a pipe or a device, not a file" in err
    assert os.listdir(out) == ["checkpoint_0000009.npz"]               # no tokenizer learned, no log


def test_running_out_of_memory_is_one_sentence(capsys):
    """A MemoryError anywhere in a subcommand: one line naming the command, exit 1, no traceback."""
    import argparse
    from minitransformer.cli.common import run_command

    def needs_too_much(args):
        raise MemoryError()
    code = run_command(argparse.Namespace(func=needs_too_much, command="translate"))
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [
        "python -m minitransformer translate: error: not enough memory for this input"]
