"""Run a lesson's ```python blocks in order, in one namespace, as the test suite does; or run the
lesson as a Jupyter notebook.

    python lessons/run.py 02                    # one lesson, by number
    python lessons/run.py                       # every lesson, in order
    python lessons/run.py --notebook 04         # as a notebook: jupytext converts, nbclient executes
    python lessons/run.py --notebook 04 --output 04.ipynb   # keep the executed notebook there

An error names the lesson, the block and its first line in the Markdown file. The notebook route
needs the `lessons` extra (pip install -e .[lessons]: jupytext, nbclient, ipykernel, matplotlib);
each lesson starts with a jupytext header, inside an HTML comment so that GitHub does not show it,
that names the kernel (python3). The kernel starts in the repository root, as the test suite runs.
Fences in other languages (```bash: the exercises' grader) become %%bash cells, which a learner runs
in Jupyter and which this script skips, as run() does.
A ```python fence may carry jupytext cell metadata after the language, e.g. an answer collapsed in
Jupyter: ```python tags=["answer"] jupyter={"source_hidden": true}
"""
import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

LESSONS = Path(__file__).resolve().parent
ROOT = LESSONS.parent
FENCE = re.compile(r"^```python(?:[ \t][^\n]*)?\n(.*?)^```", re.S | re.M)
NOTEBOOK_EXTRA = ("running a lesson as a notebook needs the lessons extra: pip install -e .[lessons]  "
                  "(jupytext, nbclient, ipykernel, matplotlib)")


def blocks(path):
    """(line number, code) of every ```python block in a Markdown file."""
    text = Path(path).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


def lesson_paths(number=None):
    paths = sorted(LESSONS.glob("[0-9][0-9]_*.md"))
    if number is not None:
        paths = [p for p in paths if p.name.startswith(f"{int(number):02d}_")]
        if not paths:
            raise SystemExit(f"no lesson numbered {number} in {LESSONS}")
    return paths


def run(path):
    """Execute every block of one lesson in a fresh namespace; return that namespace."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    namespace = {"__name__": f"lesson_{Path(path).stem}"}
    for line, code in blocks(path):
        try:
            exec(compile(code, f"{path}:{line}", "exec"), namespace)
        except Exception as e:
            raise RuntimeError(f"{Path(path).name}, block starting at line {line}: {type(e).__name__}: {e}") from e
    return namespace


def notebook(path, output=None, kernel="python3", timeout=900):
    """Convert a lesson to a notebook (jupytext), execute it in a fresh `kernel` started in the
    repository root (nbclient), and write the executed notebook to `output` (default: a new temporary
    folder). Returns the output path. A failing cell raises RuntimeError naming the lesson and the cell."""
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
    for cell in nb.cells:   # a ```bash fence (the grader of the exercises) is a %%bash cell: shown, not run here
        if cell.cell_type == "code" and cell.source.startswith("%%"):
            cell.metadata.setdefault("tags", []).append("skip-execution")
    client = NotebookClient(nb, kernel_name=kernel, timeout=timeout, resources={"metadata": {"path": str(ROOT)}})
    try:
        client.execute()
    except CellExecutionError as e:
        raise RuntimeError(f"{path.name} as a notebook: {e}") from None
    if output is None:
        output = Path(tempfile.mkdtemp(prefix="lesson-")) / f"{path.stem}.ipynb"
    nbformat.write(nb, str(output))
    return Path(output)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("number", nargs="?", help="the lesson's number, e.g. 04 (default: every lesson)")
    parser.add_argument("--notebook", action="store_true", help="run it as a Jupyter notebook (jupytext + nbclient)")
    parser.add_argument("--output", help="with --notebook: where to write the executed notebook (.ipynb; "
                        "a folder when several lessons run; default: a temporary folder)")
    args = parser.parse_args(argv)
    paths = lesson_paths(args.number)
    for p in paths:
        start = time.perf_counter()
        if args.notebook:
            out = args.output
            if out is not None and (len(paths) > 1 or Path(out).is_dir()):
                Path(out).mkdir(parents=True, exist_ok=True)
                out = Path(out) / f"{p.stem}.ipynb"
            try:
                written = notebook(p, out)
            except ImportError as e:
                raise SystemExit(str(e)) from None
            print(f"{p.name}: executed as a notebook, every python cell ran ({time.perf_counter() - start:.1f} s): {written}")
        else:
            run(p)
            print(f"{p.name}: all blocks ran, every assert held ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
