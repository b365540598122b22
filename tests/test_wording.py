"""What a user reads speaks of the software and its users, not of how it was made: no numbered
work periods ("session 12", "sessions 26-27", "session24") and no "the issue's command" or
"issue 31" in the README, the lessons, docs/, benchmarks/README.md, results/ (every file but the
figures and the translations, and the folder names), the package's comments and strings, the
scripts' help and comments, or the tests' names, comments and strings. Runs are named by date and
commit or by what they are. Each failure names the file, the line and the words."""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# numbered work periods and the words of a tracker: "session 12", "Sessions 26-27", "session24",
# "session-1", "the issue", "the issue's", "issue 31", "issue #31", 'issue "A title"'
MAKING = re.compile(r"\bsessions?[\s-]*(?:\d|#)|\bthe issue\b|\bissues?\s*#?\d|\bissue\s+[\"“]"
                    r"|\bwork periods?\b|\bthis session\b", re.IGNORECASE)
# a test's or a folder's name: any "session" or "issue" in it
NAME = re.compile(r"session|issue", re.IGNORECASE)
# in results/, every file is read but the figures and the models' translations (their words are
# the model's: "the issue" may be one)
NOT_READ = {".png", ".npz", ".npy", ".gz"}
TRANSLATIONS = (".hyp.en", ".hyp.de", ".ref.en", ".ref.de")


def rel(path):
    return str(path.relative_to(ROOT))


def text_files():
    """The Markdown and the lesson code a user reads, whole."""
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    files += sorted((ROOT / "docs").glob("*.md"))
    files += sorted((ROOT / "lessons").rglob("*.md")) + sorted((ROOT / "lessons").rglob("*.py"))
    files += [f for f in sorted((ROOT / "results").rglob("*")) if f.suffix not in NOT_READ
              and not f.name.endswith(TRANSLATIONS)]
    return [f for f in files if f.is_file()]


def code_files():
    """Python whose comments and strings (docstrings, help, messages) a user reads: the tests' too
    (this file's own examples aside)."""
    files = sorted((ROOT / "minitransformer").rglob("*.py"))
    files += sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    files += sorted((ROOT / "tests").glob("*.py"))
    files += sorted((ROOT / "benchmarks" / "tests").glob("*.py"))
    return [f for f in files if f != Path(__file__).resolve()]


def offending_lines(text):
    """(line number, the words) of every match of MAKING in `text`."""
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1)
            for m in MAKING.finditer(line)]


def comments_and_strings(source):
    """(line number, text) of every comment and string token of Python `source`."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            for i, line in enumerate(tok.string.splitlines()):
                found.append((tok.start[0] + i, line))
    return found


@pytest.mark.parametrize("path", text_files(), ids=rel)
def test_a_page_names_no_work_period(path):
    bad = offending_lines(path.read_text(encoding="utf-8"))
    assert not bad, "\n".join(f"{rel(path)}:{n}: {words!r}" for n, words in bad)


@pytest.mark.parametrize("path", code_files(), ids=rel)
def test_comments_and_strings_name_no_work_period(path):
    pieces = comments_and_strings(path.read_text(encoding="utf-8"))
    bad = [(n, m.group(0)) for n, text in pieces for m in MAKING.finditer(text)]
    assert not bad, "\n".join(f"{rel(path)}:{n}: {words!r}" for n, words in bad)


def test_results_folders_are_named_by_what_they_are():
    bad = [rel(p) for p in sorted((ROOT / "results").rglob("*")) if NAME.search(p.name)]
    assert not bad, "named by a work period or an issue: " + ", ".join(bad)


def test_test_names_name_no_work_period():
    bad = []
    paths = sorted((ROOT / "tests").glob("*.py"))
    paths += sorted((ROOT / "benchmarks" / "tests").glob("*.py"))
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and NAME.search(node.name):
                bad.append(f"{rel(path)}:{node.lineno}: {node.name}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("text, found", [
    ("rerun in session 16: 98.0%", True),
    ("the Intel VM of sessions 26-27", True),
    ("Session 24 cut the step", True), ("results/train-step-session25/", True),
    ("the issue's own command", True), ("Goal (issue 31): 38 BLEU", True),
    ("(the session-1 recipe)", True), ('issue "A good translator"', True),
    ("the GPU run at this session's code", True),
    ("--out results/gpu-run-h200/session19-call2", True),
    ("a training session with the model", False), ("an issue with CuPy", False),
    ("the tissue 3", False), ("results/multi30k-default-2026-11-28/", False),
])
def test_the_pattern_finds_work_periods_and_only_them(text, found):
    assert bool(offending_lines(text)) is found
