"""Every figure in the README's results is found in the file it links
(benchmarks/check_figures.py), and the checker finds a figure that its file does not hold, a figure
with no file, and a missing file."""
import sys
from pathlib import Path

import pytest

from script_checks import check_bad_option, check_help

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import check_figures  # noqa: E402

LOG = """test_2016_flickr: BLEU = 41.34  (nrefs:1|case:mixed)
total 2,110 s (35.2 min) from start to score; 0.642 s an update
"""


def fake_readme(tmp_path, body):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run.log").write_text(LOG, encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text("# A project\n\nIntro 9.99 unchecked.\n\n## Results\n\n" + body
                      + "\n## Layout\n\nAfter 8.88, unchecked.\n", encoding="utf-8")
    return readme


def test_the_readme_figures_are_in_their_files():
    assert check_figures.check(ROOT / "README.md") == []


def test_a_row_whose_figures_its_file_holds_passes(tmp_path):
    readme = fake_readme(tmp_path, "| run | result | log |\n|---|---|---|\n"
                         "| recipe | BLEU 41.34 in 35.2 min (2110 s) | [log](runs/run.log) |\n")
    assert check_figures.check(readme) == []


def test_a_wrong_number_is_found(tmp_path):
    readme = fake_readme(tmp_path, "| run | result | log |\n|---|---|---|\n"
                         "| recipe | BLEU 41.39 in 35.2 min | [log](runs/run.log) |\n")
    assert check_figures.check(readme) == ["README.md:9: 41.39 is in none of the files it links"]


def test_both_ends_of_a_range_are_checked(tmp_path):
    readme = fake_readme(tmp_path, "The update took 0.642-0.70 s ([log](runs/)).\n")
    assert check_figures.check(readme) == ["README.md:7: 0.70 is in none of the files it links"]


def test_a_sentence_uses_its_own_link_or_else_its_paragraphs(tmp_path):
    (tmp_path / "other.log").write_text("nothing measured here\n", encoding="utf-8")
    readme = fake_readme(tmp_path, "It scored 41.34 ([log](other.log)). It took 35.2 min, as the\n"
                         "[run](runs/run.log) says.\n\nA figure with no file: 12.5 min.\n")
    assert check_figures.check(readme) == [
        "README.md:7: 41.34 is in none of the files it links",
        "README.md:10: 12.5 link no file"]


def test_a_missing_file_is_reported(tmp_path):
    readme = fake_readme(tmp_path, "It scored 41.34 ([log](runs/gone.log)).\n")
    assert check_figures.check(readme) == [
        "README.md:7: the linked runs/gone.log is missing",
        "README.md:7: 41.34 is in none of the files it links"]


def test_what_counts_as_a_figure():
    text = ("3,200 updates on a 2-core VM, seed 0, at commit 2929774 (2026-11-28): 41.34, 0.78x, "
            "96.0%, 142 s, 2,110 s, 6.3-7.4 min, 116-232 s; `--steps 3000 --lr 0.5` "
            "<!-- 1.23 --> [results/x-2026-11-28/](results/x-2026-11-28/) test_2016_flickr H200")
    assert check_figures.figures(text) == ["41.34", "0.78", "96.0", "142", "2110", "6.3", "7.4",
                                           "116", "232"]


@pytest.mark.parametrize("figure, text, found", [
    ("41.34", "BLEU = 41.34 (", True), ("41.3", "BLEU = 41.34", False),
    ("2110", "total 2,110 s", True), ("110", "total 2,110 s", False),
    ("2.11", "torch 2.11.0", True),
])
def test_a_figure_is_found_as_a_number_of_its_own(figure, text, found):
    assert check_figures.holds(text, figure) is found


def test_the_script_exits_1_on_a_problem(tmp_path):
    readme = fake_readme(tmp_path, "It scored 41.99 ([log](runs/run.log)).\n")
    assert check_figures.main(["--readme", str(readme)]) == 1
    readme.write_text("## Results\n\nIt scored 41.34 ([log](runs/run.log)).\n", encoding="utf-8")
    assert check_figures.main(["--readme", str(readme)]) == 0


def test_help_and_a_bad_readme(tmp_path):
    check_help("benchmarks/check_figures.py")
    check_bad_option("benchmarks/check_figures.py", ["--readme", "{tmp}/none.md"],
                     r"--readme .*none\.md is not a file", tmp_path)
