"""Every lesson's ```python blocks run in order in one namespace, asserts included, and so do those of
the answers to its questions (lessons/answers/); each question has a prose answer there."""
import importlib.util
import os
import re
import traceback
from pathlib import Path

import pytest

import minitransformer as mt

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
spec = importlib.util.spec_from_file_location("lesson_runner", LESSONS / "run.py")
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


ANSWERS = sorted((LESSONS / "answers").glob("[0-9][0-9]_*.md"))


@pytest.mark.parametrize("path", runner.lesson_paths(), ids=lambda p: p.stem)
def test_lesson_runs(path, monkeypatch):
    monkeypatch.chdir(LESSONS.parent)
    assert runner.blocks(path), f"{path.name} has no ```python block to run"
    runner.run(path)
    mt.use(os.environ.get("MINITRANSFORMER_DEVICE", "cpu"))   # a lesson may switch the backend


@pytest.mark.parametrize("path", ANSWERS, ids=lambda p: p.stem)
def test_the_answers_computations_hold(path, monkeypatch):
    """lessons/answers/NN_name.md: the prose answers, their ```python blocks asserted like a lesson's."""
    monkeypatch.chdir(LESSONS.parent)
    assert runner.blocks(path), f"{path.name} has no ```python block to run"
    runner.run(path)
    mt.use(os.environ.get("MINITRANSFORMER_DEVICE", "cpu"))


def test_runner_reports_the_failing_block(tmp_path):
    bad = tmp_path / "99_bad.md"
    bad.write_text("# Bad\n\n```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    with pytest.raises(RuntimeError, match=r"99_bad.md, line 10 \(block starting at line 10\): AssertionError: x is"):
        runner.run(bad)
    # the line that failed, in the Markdown file: inside a function an earlier block defined, too
    bad.write_text("# Bad\n\n```python\ndef f():\n    return 1 / 0\n```\n\n```python\ny = 2\nf()\n```\n")
    with pytest.raises(RuntimeError, match=r"line 5 \(block starting at line 9\): ZeroDivisionError") as e:
        runner.run(bad)
    assert [f.lineno for f in traceback.extract_tb(e.value.__cause__.__traceback__)][-2:] == [10, 5]
    bad.write_text("# Bad\n\n```python\nx = 1\ny = (\n```\n")
    with pytest.raises(RuntimeError, match=r"line 5 \(block starting at line 4\): SyntaxError"):
        runner.run(bad)


def test_a_lesson_is_named_by_number_name_or_path_and_a_bad_one_in_one_line(tmp_path, capsys):
    functional = runner.lesson_paths("04")
    assert [p.name for p in functional] == ["04_functional.md"]
    assert runner.lesson_paths(4) == runner.lesson_paths("04_functional") == runner.lesson_paths("04_functional.md") \
        == functional
    copy = tmp_path / "04_functional.md"               # a learner's copy, named like the lesson: the copy runs
    copy.write_text("# Mine\n\n```python\nx = 1\n```\n")
    assert runner.lesson_paths(str(copy)) == [copy.resolve()]
    for bad in ("abc", "99", "1.5", "-1", str(tmp_path / "missing.md")):
        with pytest.raises(SystemExit) as e:
            runner.main([bad])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("run.py: error: no lesson ") and "Traceback" not in err, err


def test_output_is_checked_before_any_lesson_runs(tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(runner, "run", ran.append)
    monkeypatch.setattr(runner, "notebook", lambda p, out: ran.append(out))
    (tmp_path / "notes.txt").write_text("mine")
    for argv, message in [(["01", "--output", str(tmp_path / "x.ipynb")], "add --notebook"),
                          (["--notebook", "--output", str(tmp_path / "x.ipynb")], "12 lessons run: give a folder"),
                          (["01", "--notebook", "--output", str(tmp_path / "notes.txt")], "is not a notebook"),
                          (["01", "--notebook", "--output", str(tmp_path / "notes.txt" / "a.ipynb")], "not a folder")]:
        with pytest.raises(SystemExit) as e:
            runner.main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err, argv
    assert ran == [] and (tmp_path / "notes.txt").read_text() == "mine"
    runner.main(["01", "--notebook", "--output", str(tmp_path / "nb")])          # a folder: the lesson's name in it
    runner.main(["01", "--notebook", "--output", str(tmp_path / "one.ipynb")])
    assert ran == [tmp_path / "nb" / "01_backend.ipynb", str(tmp_path / "one.ipynb")]


def test_figures_refuses_a_bad_name_or_out_before_drawing(tmp_path, capsys):
    spec_ = importlib.util.spec_from_file_location("lesson_figures_cli", LESSONS / "figures.py")
    figures = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(figures)
    (tmp_path / "afile").write_text("mine")
    for argv, message in [(["nonsense"], "no figure named 'nonsense'"), (["02"], "lesson 02 has no figure"),
                          (["09_lr_schedule", "--out", str(tmp_path / "afile")], "is a file"),
                          (["09_lr_schedule", "--out", str(tmp_path / "afile" / "sub")], "is a file")]:
        with pytest.raises(SystemExit) as e:
            figures.main(argv)
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert e.value.code == 2 and err.startswith("figures.py: error: ") and message in err, argv
    assert (tmp_path / "afile").read_text() == "mine"


def questions(path):
    """The numbered items of a lesson's "## Exercises" section (up to the next heading)."""
    section = path.read_text(encoding="utf-8").split("\n## Exercises\n", 1)[1].split("\n## ", 1)[0]
    return [int(line.split(".", 1)[0]) for line in section.splitlines() if line[:1].isdigit() and ". " in line[:4]]


@pytest.mark.parametrize("path", sorted(LESSONS.glob("[01][0-9]_*.md")), ids=lambda p: p.stem)
def test_each_lesson_ends_with_five_to_ten_questions_each_answered_in_prose_apart(path):
    """Each question gets a section of lessons/answers/NN_name.md, "## k. ...", in prose (not only code);
    the lesson links to that file, and the exercises' solutions hold no answers to the questions."""
    numbers = questions(path)
    assert 5 <= len(numbers) <= 10 and numbers == list(range(1, len(numbers) + 1)), (path.name, numbers)
    answers = LESSONS / "answers" / path.name
    assert answers.exists(), f"{path.name}: its answers belong in lessons/answers/{path.name}"
    text = answers.read_text(encoding="utf-8")
    sections = re.findall(r"^## (\d+)\. .*?(?=^## |\Z)", text, flags=re.M | re.S)
    assert [int(n) for n in sections] == numbers, (answers.name, sections)
    for number, body in re.findall(r"^## (\d+)\. [^\n]*\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S):
        prose = re.sub(r"^```.*?^```", "", body, flags=re.M | re.S)
        assert len(prose.split()) >= 8, f"{answers.name}: answer {number} needs its why, in words"
    assert f"answers/{path.name}" in path.read_text(encoding="utf-8")
    solution = LESSONS / "solutions" / f"{path.stem}.py"
    assert "answers_to_questions" not in solution.read_text(encoding="utf-8")
