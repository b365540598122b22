"""The size and shape rules of every module of minitransformer/: at most 300 code lines (counted
with the tokenize module, not counting blank, comment-only or docstring lines, so that a module
cannot meet it by writing sideways), every line at most 100 columns, one name assigned per
assignment (no `a, b = x, y`), one statement per line (no semicolons), and plain.py's docstrings no
longer than its code. The 100 columns hold for the Python files of lessons/, examples/ and
benchmarks/ (not benchmarks/tests/) too. Each failure names the file, the line and the rule."""
import ast
import io
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import code_size  # noqa: E402  (benchmarks/code_size.py: the counter, shared with the size report)

CODE_LINE_BUDGET = 300
MAX_COLUMNS = 100
MODULES = sorted((ROOT / "minitransformer").rglob("*.py"))
IDS = [str(p.relative_to(ROOT)) for p in MODULES]
# The 100-column rule holds beyond the package too: the lessons' code (exercises, solutions, the
# grader's checks and mistakes, capstone, figures), the examples and the benchmark scripts (not
# their tests).
WIDE = sorted({*(ROOT / "lessons").rglob("*.py"), *(ROOT / "examples").glob("*.py"),
               *(ROOT / "benchmarks").glob("*.py")})
WIDE_IDS = [str(p.relative_to(ROOT)) for p in WIDE]


def code_lines(path):
    """The number of code lines of a Python file: lines holding a code token, leaving out blank
    lines, comment-only lines and docstring lines (benchmarks/code_size.py says
    what a code token is)."""
    return len(code_size.code_line_numbers(Path(path).read_text(encoding="utf-8")))


def name_of(path):
    return str(Path(path).relative_to(ROOT))


def test_code_lines_counts_only_lines_holding_code(tmp_path):
    snippet = (
        '"""A module docstring\n'
        'on two lines."""\n'
        "\n"
        "# a comment-only line\n"
        "def f(x):  # a comment after code\n"
        '    """A function docstring."""\n'
        "    text = '''a string\n"
        "    that is not a docstring'''\n"
        "    return (x +\n"
        "            1)\n"
    )
    (tmp_path / "snippet.py").write_text(snippet)
    assert code_lines(tmp_path / "snippet.py") == 5
    assert code_size.docstring_lines(snippet) == {1, 2, 6}


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_code_lines_within_budget(path):
    count = code_lines(path)
    assert count <= CODE_LINE_BUDGET, (
        f"{name_of(path)}:1: {count} code lines, past the budget of {CODE_LINE_BUDGET}: "
        "split the module by concept rather than packing its lines"
    )


def long_lines(path, name=None):
    """'name:line: N columns, past 100: wrap the line' for each line of `path` past MAX_COLUMNS
    (name: the file's path from the repository's root unless given)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    name = name or name_of(path)
    return [
        f"{name}:{number}: {len(line)} columns, past {MAX_COLUMNS}: wrap the line"
        for number, line in enumerate(lines, start=1)
        if len(line) > MAX_COLUMNS
    ]


def test_long_lines_are_found(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("x = 1\n" + "y = '" + "a" * 95 + "'\n" + "z = '" + "a" * 94 + "'\n")
    assert long_lines(path, "probe.py") == [
        f"probe.py:2: 101 columns, past {MAX_COLUMNS}: wrap the line"]


def test_the_wider_rule_covers_lessons_examples_and_benchmarks_not_their_tests():
    names = set(WIDE_IDS)
    for name in ("lessons/exercises/04_functional.py", "lessons/solutions/04_functional.py",
                 "lessons/checks/mistakes/04_functional.py", "lessons/capstone.py",
                 "examples/multi30k.py", "benchmarks/train_step.py"):
        assert name in names, name
    assert not any(name.startswith(("benchmarks/tests/", "tests/")) for name in names)


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_lines_fit_in_100_columns(path):
    long = long_lines(path)
    assert not long, "\n".join(long)


@pytest.mark.parametrize("path", WIDE, ids=WIDE_IDS)
def test_lessons_examples_and_benchmarks_fit_in_100_columns(path):
    long = long_lines(path)
    assert not long, "\n".join(long)


def packed_assignments(source):
    """Line numbers of assignments of a tuple/list literal to as many targets (`a, b = x, y`), not
    counting a swap of the same targets (`a, b = b, a`); unpacking a call's result is fine."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        for target in node.targets:
            packed = (
                isinstance(target, (ast.Tuple, ast.List))
                and isinstance(value, (ast.Tuple, ast.List))
                and len(target.elts) >= 2
                and len(target.elts) == len(value.elts)
            )
            if not packed:
                continue
            targets = sorted(ast.dump(t, include_attributes=False) for t in target.elts)
            values = sorted(ast.dump(v, include_attributes=False) for v in value.elts)
            swap = [t.replace("Store()", "Load()") for t in targets] == values
            if not swap:
                found.append(node.lineno)
    return found


def test_packed_assignments_are_found():
    source = (
        "a, b = 1, 2\n"
        "self.x, self.y = x, y\n"
        "a, b = b, a\n"
        "q, k, v = f()\n"
        "for i, x in pairs: pass\n"
        "[c, d] = [3, 4]\n"
        "e = g = 0\n"
    )
    assert packed_assignments(source) == [1, 2, 6]


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_no_packed_assignments(path):
    found = [
        f"{name_of(path)}:{number}: assigns several names from a literal: one assignment per line"
        for number in packed_assignments(path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_no_semicolons(path):
    source = path.read_text(encoding="utf-8")
    found = [
        f"{name_of(path)}:{token.start[0]}: statements joined by a semicolon: one statement per "
        f"line"
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.OP and token.string == ";"
    ]
    assert not found, "\n".join(found)


def test_plain_docstrings_no_longer_than_its_code():
    path = ROOT / "minitransformer" / "plain.py"
    source = path.read_text(encoding="utf-8")
    docs = len(code_size.docstring_lines(source))
    code = code_lines(path)
    assert docs <= code, (
        f"{name_of(path)}:1: {docs} docstring lines against {code} code lines: "
        "the page of plain forms is code first, its docstrings no longer than its code"
    )
