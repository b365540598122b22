"""The package's size in code lines and code tokens, per file and in all.

    python benchmarks/code_size.py [--rev REV]

A code line is a line that holds a code token. A code token is any token of the tokenize module
except NEWLINE, NL, COMMENT, INDENT, DEDENT, ENCODING and ENDMARKER, and except the tokens of a
docstring: the string statement that comes first in a module, class or function body. Blank lines,
comment-only lines and docstring lines are therefore not code lines; a string that spans lines
counts each line it spans (tinygrad's sz.py counts lines the same way). Tokens per line (code
tokens / code lines) shows how densely the code is written: packing statements sideways raises it.
Token counts depend on the Python version (3.12 splits an f-string into several tokens; 3.11 reads
it as one STRING); the code lines do not.

Without --rev it reads the working tree's minitransformer/**/*.py; with --rev it reads those files
as they were at that git revision (git show REV:path). tests/test_style.py holds the package to
the 300-code-line budget counted here.
"""
import argparse
import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "minitransformer"
NOT_CODE = {
    tokenize.NEWLINE,
    tokenize.NL,
    tokenize.COMMENT,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def docstring_nodes(source):
    """The docstring expressions of a module's source: first statements of a
    body that are strings."""
    found = []
    bodies = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, bodies) and node.body:
            first = node.body[0]
            is_string = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            if is_string and isinstance(first.value.value, str):
                found.append(first)
    return found


def docstring_lines(source):
    """The set of line numbers that docstrings span."""
    return {n for node in docstring_nodes(source) for n in range(node.lineno, node.end_lineno + 1)}


def code_tokens(source):
    """The code tokens of a module's source (see the module's docstring), in order."""
    spans = [
        ((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))
        for node in docstring_nodes(source)
    ]
    tokens = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in NOT_CODE:
            continue
        if any(start <= token.start and token.end <= end for start, end in spans):
            continue
        tokens.append(token)
    return tokens


def code_line_numbers(source):
    """The set of line numbers holding a code token (all the lines a multi-line token spans)."""
    return {n for token in code_tokens(source) for n in range(token.start[0], token.end[0] + 1)}


def sources(rev=None):
    """{path relative to the repository: source} for every .py file of the package."""
    if rev is None:
        files = sorted((ROOT / PACKAGE).rglob("*.py"))
        return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in files}
    listing = git("ls-tree", "-r", "--name-only", rev, "--", PACKAGE).splitlines()
    return {path: git("show", f"{rev}:{path}") for path in sorted(listing) if path.endswith(".py")}


def git(*args):
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Code lines and code tokens per line of minitransformer/, per file and in all."
    )
    parser.add_argument(
        "--rev",
        default=None,
        help="a git revision to read the files at (default: the working tree)",
    )
    args = parser.parse_args(argv)
    if args.rev is not None:
        check = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{args.rev}^{{commit}}"],
            cwd=ROOT,
            capture_output=True,
        )
        if check.returncode != 0:
            parser.error(f"--rev {args.rev} is not a commit of this repository")
    total_lines = 0
    total_tokens = 0
    print(f"{'file':<44} {'code lines':>10} {'tokens/line':>11}")
    for path, source in sources(args.rev).items():
        lines = len(code_line_numbers(source))
        tokens = len(code_tokens(source))
        total_lines += lines
        total_tokens += tokens
        print(f"{path:<44} {lines:>10} {tokens / max(lines, 1):>11.2f}")
    print(f"{'total':<44} {total_lines:>10} {total_tokens / max(total_lines, 1):>11.2f}")
    print(f"({total_tokens} code tokens)")


if __name__ == "__main__":
    sys.exit(main())
