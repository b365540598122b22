"""Run a lesson's ```python blocks in order, in one namespace, as the test suite does; or run the
lesson as a Jupyter notebook.

    python lessons/run.py 02                    # one lesson, by number (or name: 02_autograd)
    python lessons/run.py /tmp/my_02.md         # a copy of a lesson, to try things in
    python lessons/run.py                       # every lesson, in order
    python lessons/run.py --notebook 04         # as a notebook: jupytext converts, nbclient
                                                # executes
    python lessons/run.py --notebook 04 --output 04.ipynb   # keep the executed notebook there

An error names the lesson, the line that failed and the first line of its block in the Markdown
file. The notebook route needs the `lessons` extra (pip install -e .[lessons]: jupytext, nbclient,
ipykernel, matplotlib);
each lesson starts with a jupytext header, inside an HTML comment so that GitHub does not show it,
that names the kernel (python3). The kernel starts in the repository root, as the test suite runs.
Fences in other languages (```bash: the exercises' grader) become %%bash cells, which a learner runs
in Jupyter and which this script skips, as run() does.
A ```python fence may carry jupytext cell metadata after the language, e.g. an answer collapsed in
Jupyter: ```python tags=["answer"] jupyter={"source_hidden": true}
"""
import argparse
import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

LESSONS = Path(__file__).resolve().parent
ROOT = LESSONS.parent
FENCE = re.compile(r"^```python(?:[ \t][^\n]*)?\n(.*?)^```", re.S | re.M)
NOTEBOOK_EXTRA = ("running a lesson as a notebook needs the lessons extra: pip install -e "
                  ".[lessons]  (jupytext, nbclient, ipykernel, matplotlib)")


def blocks(path):
    """(line number, code) of every ```python block in a Markdown file."""
    text = Path(path).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


def lesson_paths(number=None):
    """Every lesson's Markdown file, in order; or the one `number` names: its number (4, "04"), its
    name ("04_functional", "04_functional.md") or the path of a Markdown file (a copy
    to try things in)."""
    paths = sorted(LESSONS.glob("[0-9][0-9]_*.md"))
    if number is None:
        return paths
    name = str(number)
    if name.endswith(".md") and Path(name).is_file():
        # a file there first: a copy named like the lesson
        return [Path(name).resolve()]
    chosen = [p for p in paths if name in (p.stem, p.name) or name.isdigit()
              and p.name.startswith(f"{int(name):02d}_")]
    if not chosen:
        raise ValueError(f"no lesson {name!r}: give a lesson's number ({paths[0].name[:2]} to "
                         f"{paths[-1].name[:2]}), its name (04_functional) or the path of a .md "
                         f"file")
    return chosen


def run(path):
    """Execute every block of one lesson in a fresh namespace; return that namespace. A failing
    block raises RuntimeError naming the lesson, the line that failed and the block's first line."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    namespace = {"__name__": f"lesson_{Path(path).stem}"}
    for line, code in blocks(path):
        try:   # blank lines first, so that tracebacks give (and show) the line of the Markdown file
            exec(compile("\n" * (line - 1) + code, str(path), "exec"), namespace)
        except Exception as e:
            at = [line] + [f.lineno for f in traceback.extract_tb(e.__traceback__)
                           if f.filename == str(path)]
            at = e.lineno if isinstance(e, SyntaxError) and e.filename == str(path) else at[-1]
            raise RuntimeError(f"{Path(path).name}, line {at} (block starting at line {line}): "
                               f"{type(e).__name__}: {e}") from e
    return namespace


def notebook(path, output=None, kernel="python3", timeout=900):
    """Convert a lesson to a notebook (jupytext), execute it in a fresh `kernel` started in the
    repository root (nbclient), and write the executed notebook to `output` (default: a new
    temporary folder). Returns the output path. A failing cell raises RuntimeError naming the
    lesson and the block."""
    try:
        import jupytext
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
        import ipykernel  # noqa: F401  (the python3 kernel)
    except ImportError as e:
        raise ImportError(f"{NOTEBOOK_EXTRA}; missing: {e.name}") from None
    path = Path(path)
    nb = jupytext.read(path, fmt="md")
    for cell in nb.cells:
        # a ```bash fence (the grader of the exercises) is a %%bash cell: shown, not run here
        if cell.cell_type == "code" and cell.source.startswith("%%"):
            cell.metadata.setdefault("tags", []).append("skip-execution")
    client = NotebookClient(nb, kernel_name=kernel, timeout=timeout,
                            resources={"metadata": {"path": str(ROOT)}})
    try:
        client.execute()
    except CellExecutionError as e:
        # the failing cell is the last that ran; python cells are the blocks
        ran = [c.get("execution_count") for c in nb.cells if c.cell_type == "code"
               and not c.source.startswith("%%")]
        line = blocks(path)[max((i for i, n in enumerate(ran) if n), default=0)][0]
        raise RuntimeError(f"{path.name} as a notebook: the block starting at line {line} failed: "
                           f"{e.ename}: {e.evalue}") from e
    if output is None:
        output = Path(tempfile.mkdtemp(prefix="lesson-")) / f"{path.stem}.ipynb"
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(output))
    return Path(output)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("number", nargs="?", help="the lesson's number (04), name (04_functional) "
                        "or the path of a .md file (default: every lesson)")
    parser.add_argument("--notebook", action="store_true",
                        help="run it as a Jupyter notebook (jupytext + nbclient)")
    parser.add_argument("--output", help="with --notebook: where to write the executed notebook: a "
                                         ".ipynb file, or a folder (each lesson as NN_name.ipynb "
                                         "in it); default: a temporary folder")
    args = parser.parse_args(argv)
    try:
        paths = lesson_paths(args.number)
    except ValueError as e:
        parser.error(str(e))
    folder = args.output is not None and (Path(args.output).suffix != ".ipynb"
                                          or Path(args.output).is_dir())
    if args.output is not None:
        # checked before any lesson runs: a .ipynb file, or a folder for them
        out = Path(args.output)
        if not args.notebook:
            parser.error(f"--output {out} is where --notebook writes the executed notebook; add "
                         f"--notebook")
        if not folder and len(paths) > 1:
            parser.error(f"--output {out} is one notebook but {len(paths)} lessons run: give a "
                         f"folder")
        if folder and out.exists() and not out.is_dir():
            parser.error(f"--output {out} is a file that is not a notebook: give a .ipynb file or "
                         f"a folder")
        base = out if folder else out.parent
        there = next(d for d in [base, *base.parents] if d.exists())
        if not there.is_dir() or not os.access(there, os.W_OK | os.X_OK):
            parser.error(f"--output {out} cannot be written: {there} is not a folder this user may "
                         f"write in")
    for p in paths:
        start = time.perf_counter()
        if args.notebook:
            out = Path(args.output) / f"{p.stem}.ipynb" if folder else args.output
            try:
                written = notebook(p, out)
            except ImportError as e:
                raise SystemExit(f"{parser.prog}: error: {e}") from None
            print(f"{p.name}: executed as a notebook, every python cell ran "
                  f"({time.perf_counter() - start:.1f} s): {written}")
        else:
            run(p)
            print(f"{p.name}: all blocks ran, every assert held ({time.perf_counter() - start:.1f} "
                  f"s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
