"""The lessons as Jupyter notebooks: each has a jupytext header naming the kernel, the header is
invisible to run.py (and, in an HTML comment, to GitHub), and every lesson executes as a notebook
(jupytext converts it, nbclient runs it in a python3 kernel). The execution tests need the `lessons`
extra (pip install -e .[lessons]) and are skipped without it; they take about as long as
tests/test_lessons.py (lesson 09 trains for a minute or more), plus a kernel start per lesson.
Jupyter starts a notebook's kernel in the notebook's folder, lessons/: lesson 01 runs from there too,
its grader cell included, which must find lessons/check.py from either folder."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
spec = importlib.util.spec_from_file_location("lesson_runner_nb", LESSONS / "run.py")
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)

EXTRA = ("jupytext", "nbclient", "nbformat", "ipykernel")
MISSING = [name for name in EXTRA if importlib.util.find_spec(name) is None]
needs_extra = pytest.mark.skipif(bool(MISSING), reason=f"the lessons extra is not installed (missing "
                                 f"{', '.join(MISSING)}): pip install -e .[lessons]")


# ==================================================================== the header (no extra needed)
@pytest.mark.parametrize("path", runner.lesson_paths(), ids=lambda p: p.stem)
def test_every_lesson_starts_with_a_hidden_jupytext_header(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!--\n\n---\njupyter:\n  jupytext:\n"), f"{path.name}: no jupytext header at the top"
    header, rest = text.split("\n-->\n", 1)
    assert "\n---\n" in header and header.rstrip().endswith("---")
    for line in ("  kernelspec:", "    language: python", "    name: python3", "    format_name: markdown",
                 "    comment_magics: true", "    hide_notebook_metadata: true"):
        assert line + "\n" in header, f"{path.name}: the header lacks {line.strip()!r}"
    assert rest.lstrip("\n").startswith("# Lesson "), f"{path.name}: the title must follow the header"
    assert all("jupytext" not in code for _, code in runner.blocks(path))   # run.py never sees the header


def test_fences_may_carry_cell_metadata(tmp_path):
    md = tmp_path / "98_meta.md"
    md.write_text('# T\n\n```python tags=["answer"] jupyter={"source_hidden": true}\nx = 41\n```\n\n'
                  "```python\nx += 1\n```\n\n```bash\nexit 1\n```\n\n```pythonic\nnot run\n```\n")
    assert [code for _, code in runner.blocks(md)] == ["x = 41\n", "x += 1\n"]
    assert runner.run(md)["x"] == 42


def test_a_missing_extra_gives_a_clear_error(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "nbclient", None)
    with pytest.raises(ImportError, match=r"pip install -e \.\[lessons\]"):
        runner.notebook(runner.lesson_paths(1)[0])
    with pytest.raises(SystemExit, match=r"lessons extra"):
        runner.main(["--notebook", "1"])


# ==================================================================== executing them
@needs_extra
def test_a_failing_cell_names_the_lesson(tmp_path):
    md = tmp_path / "97_bad.md"
    md.write_text("# Bad\n\n```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    with pytest.raises(RuntimeError, match=r"97_bad.md as a notebook:(.|\n)*x is not 2"):
        runner.notebook(md, tmp_path / "bad.ipynb")


@needs_extra
@pytest.mark.parametrize("path", runner.lesson_paths(), ids=lambda p: p.stem)
def test_lesson_executes_as_a_notebook(path, tmp_path):
    import nbformat
    out = runner.notebook(path, tmp_path / f"{path.stem}.ipynb")
    nb = nbformat.read(str(out), as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code" and not c.source.startswith("%%")]
    assert len(code) == len(runner.blocks(path)), "one code cell per ```python block"
    assert all(c.get("execution_count") for c in code), "every python cell ran"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    if path.name.startswith("10_") and importlib.util.find_spec("matplotlib"):
        images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
        assert images, "plot_attention's Figure shows inline in the notebook"


@needs_extra
@pytest.mark.parametrize("folder", [LESSONS, LESSONS.parent], ids=["in_lessons", "in_the_root"])
def test_the_grader_cell_runs_where_jupyter_starts_the_kernel(folder, monkeypatch):
    """Jupyter starts a notebook's kernel in the notebook's folder, lessons/: there (and in the repository
    root, where run.py starts it) every cell of lesson 01 runs, the grader cell included, which grades the
    untouched exercise: each function "not implemented yet", exit status 1 (a check.py not found is 2)."""
    import jupytext
    from nbclient import NotebookClient
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    nb = jupytext.read(LESSONS / "01_backend.md", fmt="md")
    grader = [c for c in nb.cells if c.cell_type == "code" and "check.py" in c.source]
    assert len(grader) == 1 and grader[0].source.startswith("%%bash\n"), "one grader cell, a %%bash cell"
    grader[0].metadata["tags"] = ["raises-exception"]   # its non-zero exit status is an error in the notebook
    NotebookClient(nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(folder)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "every cell ran"
    assert not any(o.output_type == "error" for c in code if c is not grader[0] for o in c.outputs)
    printed = "".join(o.get("text", "") for o in grader[0].outputs if o.output_type == "stream")
    assert "machine_epsilon" in printed and "not implemented yet" in printed, printed
    errors = [o for o in grader[0].outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["CalledProcessError"] and "exit status 1." in errors[0].evalue, errors
