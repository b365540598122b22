"""Every lesson's ```python blocks run in order in one namespace, asserts included."""
import importlib.util
import os
from pathlib import Path

import pytest

import minitransformer as mt

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
spec = importlib.util.spec_from_file_location("lesson_runner", LESSONS / "run.py")
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


@pytest.mark.parametrize("path", runner.lesson_paths(), ids=lambda p: p.stem)
def test_lesson_runs(path, monkeypatch):
    monkeypatch.chdir(LESSONS.parent)
    assert runner.blocks(path), f"{path.name} has no ```python block to run"
    runner.run(path)
    mt.use(os.environ.get("MINITRANSFORMER_DEVICE", "cpu"))   # a lesson may switch the backend


def test_runner_reports_the_failing_block(tmp_path):
    bad = tmp_path / "99_bad.md"
    bad.write_text("# Bad\n\n```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    with pytest.raises(RuntimeError, match=r"99_bad.md, block starting at line 10: AssertionError: x is not 2"):
        runner.run(bad)
