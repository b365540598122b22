"""Run a lesson's ```python blocks in order, in one namespace, as the test suite does.

    python lessons/run.py 02          # one lesson, by number
    python lessons/run.py             # every lesson, in order

An error names the lesson, the block and its first line in the Markdown file.
"""
import re
import sys
import time
from pathlib import Path

LESSONS = Path(__file__).resolve().parent
ROOT = LESSONS.parent
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)


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


if __name__ == "__main__":
    for p in lesson_paths(sys.argv[1] if len(sys.argv) > 1 else None):
        start = time.perf_counter()
        run(p)
        print(f"{p.name}: all blocks ran, every assert held ({time.perf_counter() - start:.1f} s)")
