"""The exercise grader, lessons/check.py: it passes the answers in lessons/solutions/, fails the untouched
stubs of lessons/exercises/ with "not implemented yet" (never a traceback), and fails every wrong answer of
the catalogue lessons/checks/mistakes/ with the hint that names the mistake. So grader, answers and stubs
cannot rot."""
import ast
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from minitransformer.text import bpe_learn

pytestmark = pytest.mark.usefixtures("on_cpu")   # the lessons' code is NumPy code

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
spec = importlib.util.spec_from_file_location("lesson_check", LESSONS / "check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)                       # it puts lessons/ on sys.path, for lessons/checks/
decoding = importlib.import_module("checks.10_decoding")
bpe = importlib.import_module("checks.08_bpe")

ITEMS = [(lesson, name) for lesson, (_, items) in check.LESSON_ITEMS.items() for name, _ in items]
ITEM_LINE = re.compile(r"^  (PASS|FAIL)  (\S+) +(.*)$")


def grade(capsys, *argv):
    """Run the grader in this process: (exit status, {item: (PASS or FAIL, text)}, everything printed)."""
    status = check.main([str(a) for a in argv])
    out = capsys.readouterr().out
    lines = {m.group(2): (m.group(1), m.group(3)) for m in map(ITEM_LINE.match, out.splitlines()) if m}
    return status, lines, out


def stem(lesson):
    return check.LESSON_ITEMS[lesson][0]


def catalogue(lesson):
    """The MISTAKES of lessons/checks/mistakes/NN_topic.py: [(function, wrong answer, words of its hint)]."""
    name = f"checks.mistakes.{stem(lesson)}"
    return importlib.import_module(name).MISTAKES if importlib.util.find_spec(name) else []


MISTAKES = [(lesson, *mistake) for lesson in sorted(check.LESSON_ITEMS) for mistake in catalogue(lesson)]
# The issue's bar (issue 29): at least ten plausible mistakes for each of these exercises together.
BAR = {"04": ("softmax", "softmax_backward", "cross_entropy_backward", "layer_norm_backward"),
       "06": ("causal_mask", "attention_forward", "attention_backward"), "08": ("learn_merges", "encode"),
       "09": ("noam_lr", "adam"), "10": ("beam_search",), "12": ("shard_weights", "ring_allreduce", "ring_bytes_sent")}


@pytest.mark.parametrize("lesson", sorted(check.LESSON_ITEMS))
def test_the_solutions_pass(lesson, capsys):
    status, lines, out = grade(capsys, lesson, "--solutions")
    assert status == 0, out
    assert set(lines) == {name for _, name in ITEMS if _ == lesson}
    assert all(result == "PASS" for result, _ in lines.values()), out


@pytest.mark.parametrize("lesson", sorted(check.LESSON_ITEMS))
def test_the_untouched_stubs_fail_as_not_implemented(lesson, capsys):
    status, lines, out = grade(capsys, lesson)
    assert status == 1 and "Traceback" not in out
    assert set(lines) == {name for _, name in ITEMS if _ == lesson}
    assert all(result == "FAIL" and text.startswith("not implemented yet") for result, text in lines.values()), out


def answers_with(lesson, change):
    """The text of lessons/solutions/NN_*.py with a wrong answer: code appended (it replaces the right
    one), or (old, new) pairs: each `old`, found once, replaced by `new`."""
    text = (LESSONS / "solutions" / f"{stem(lesson)}.py").read_text()
    if isinstance(change, str):
        return text + textwrap.dedent(change)
    for old, new in change if isinstance(change[0], tuple) else [change]:
        assert text.count(old) == 1, f"{old!r} is not once in the answers of lesson {lesson}"
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("lesson, name, change, hint", MISTAKES,
                         ids=lambda x: x if isinstance(x, str) and len(x) < 30 else "")
def test_every_catalogued_mistake_fails_with_its_hint(lesson, name, change, hint, tmp_path, capsys):
    path = tmp_path / f"{stem(lesson)}.py"           # the answers, with one of them replaced by a wrong one
    path.write_text(answers_with(lesson, change))
    status, lines, out = grade(capsys, lesson, name, "--module", path)
    assert status == 1 and "Traceback" not in out
    result, text = lines[name]
    assert result == "FAIL" and hint in text, out


# Answers of the wrong kind, and where a message once misled: (lesson, function, code, words of its line).
ODD = [
    ("04", "softmax", """
        def softmax(x, axis=-1):                    # right values, but the caller's logits are gone
            x -= x.max(axis=axis, keepdims=True)
            np.exp(x, out=x)
            x /= x.sum(axis=axis, keepdims=True)
            return x
        """, "changed its input x in place"),
    ("04", "cross_entropy_backward", """
        def softmax(x, axis=-1):                    # the caller's logits changed: named by the guard of every call
            x -= x.max(axis=axis, keepdims=True)
            np.exp(x, out=x)
            x /= x.sum(axis=axis, keepdims=True)
            return x
        """, "changed its input logits in place"),
    ("04", "layer_norm_backward", """
        def layer_norm_backward(x, gamma, dy, eps=1e-6, _right=layer_norm_backward):
            return _right(x, gamma, dy, eps)[:2]
        """, "got tuple of 2"),
    ("06", "causal_mask", """
        def causal_mask(T):                         # exit() used to end the grader
            raise SystemExit("done")
        """, "called exit()"),
    ("06", "causal_mask", """
        def causal_mask(T):                         # an additive mask: the right triangle, the wrong kind
            return np.where(np.tril(np.ones((T, T), bool)), 0.0, -1e9)[None, None]
        """, "make it boolean"),
    ("06", "attention_forward", """
        def attention_forward(q, k, v, mask=None):  # -inf: NaN where every key is masked
            s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
            if mask is not None:
                s = np.where(mask, s, -np.inf)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            return p @ v, p
        """, "not -inf"),
    ("08", "merge", """
        def merge(ids, pair, new_id):               # no return
            out = list(ids)
        """, "it should be a list of token ids, got None (a function without return gives None)"),
    ("08", "learn_merges", """
        def learn_merges(word_counts, num_merges, min_frequency=2, offset=3, _right=learn_merges):
            merges = _right(word_counts, num_merges, min_frequency, offset)    # new ids 256 + k
            return [tuple(i - offset if i >= offset + 256 else i for i in pair) for pair in merges]
        """, "merge j makes id offset + 256 + j"),
    ("09", "noam_lr", """
        def noam_lr(step, d_model, warmup_steps=4000, _right=noam_lr):     # text: "1.7e-07" read as a number
            return str(_right(step, d_model, warmup_steps))
        """, "got str"),
    ("09", "noam_lr", """
        def noam_lr(step, d_model, warmup_steps=4000, _right=noam_lr):
            return 0.0 if step == 0 else _right(step, d_model, warmup_steps)
        """, "step 0 counts as step 1"),
    ("10", "length_penalty", """
        def length_penalty(length, alpha):          # no return: None, once read as NaN
            lp = ((5.0 + length) / 6.0) ** alpha
        """, "holding NoneType"),
    ("10", "beam_search", """
        def beam_search(step, beam_size, max_len, alpha=0.0, _right=beam_search):   # "23" once read as [2, 3]
            tokens, log_prob = _right(step, beam_size, max_len, alpha)
            return "".join(map(str, tokens)), log_prob
        """, "tokens should be a list of token ids"),
]


@pytest.mark.parametrize("lesson, name, code, words", ODD, ids=lambda x: x if len(x) < 30 else "")
def test_an_answer_of_the_wrong_kind_fails_with_a_clear_line(lesson, name, code, words, tmp_path, capsys):
    path = tmp_path / f"{stem(lesson)}.py"
    path.write_text((LESSONS / "solutions" / f"{stem(lesson)}.py").read_text() + textwrap.dedent(code))
    status, lines, out = grade(capsys, lesson, name, "--module", path)
    assert status == 1 and "Traceback" not in out
    result, text = lines[name]
    assert result == "FAIL" and words in text, out


def test_top_level_code_that_exits_or_never_ends_fails_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(check, "CPU_SECONDS", 1)                 # 1 s, not 30
    path = tmp_path / "mine.py"
    endless = "still running after 1 s of CPU time: an endless loop, or the machine is busy?"
    for code, why in (("exit()", "it calls exit()"), ("while True:\n    pass", endless)):
        path.write_text("import numpy as np\n" + code + "\n")
        status, lines, out = grade(capsys, "04", "--module", path)
        assert status == 1 and len(lines) == 4, out
        assert set(lines.values()) == {("FAIL", f"the file does not load: {why} (line 2)")}, out


def spin(seconds):
    """Use `seconds` of this process's CPU time."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_the_time_limit_counts_only_the_cpu_time_of_your_code(monkeypatch):
    """The grader's own work and the time your code waits do not count; your CPU time adds up over
    the calls of one function's grading, and fails it, with the case, once spent."""
    monkeypatch.setattr(check, "CPU_SECONDS", 0.5)
    g = check.Grade(Path("mine.py"))
    with check.time_limit(g):
        spin(1.0)                                    # the grader's references
        g.call(time.sleep, 1.0)                      # waiting: past the CPU limit on the clock
        g.call(spin, 0.2)
    g = check.Grade(Path("mine.py"))
    spent = r"^case 3: still running after 0.5 s of CPU time: an endless loop, or the machine is busy\?$"
    with pytest.raises(check.Fail, match=spent), check.time_limit(g):
        for case in range(1, 4):
            g.start(f"case {case}")
            g.call(spin, 0.2)


def test_an_answer_that_waits_past_the_backstop_fails(monkeypatch):
    monkeypatch.setattr(check, "CPU_SECONDS", 0.1)
    g = check.Grade(Path("mine.py"))
    begin = time.monotonic()
    waiting = r"still running after 1 s, though it uses little CPU time: is it waiting"
    with pytest.raises(check.Fail, match=waiting), check.time_limit(g):
        g.call(time.sleep, 30)
    assert time.monotonic() - begin < 10


SLOW_BEAM_SEARCH = """
    import time

    def beam_search(step, beam_size, max_len, alpha=0.0, _right=beam_search):
        time.sleep(0.04)                            # 22 cases: about 0.9 s on the clock, little CPU
        return _right(step, beam_size, max_len, alpha)
    """
ENDLESS_BEAM_SEARCH = """
    def beam_search(step, beam_size, max_len, alpha=0.0):
        finished = []
        while len(finished) < beam_size:            # nothing is ever added: an endless loop
            step([[]])
    """


def test_a_right_answer_slow_only_on_the_clock_passes_and_an_endless_loop_fails(tmp_path, capsys,
                                                                                monkeypatch):
    """Lesson 10's beam search once failed as an endless loop on a busy machine: the limit counted
    the clock, and the grader's own search for its cases (about 1.5 s of CPU time) too."""
    monkeypatch.setattr(check, "CPU_SECONDS", 0.5)
    decoding.beam_search_cases.cache_clear()         # the grader's own work, in this grading
    path = tmp_path / f"{stem('10')}.py"
    path.write_text(answers_with("10", SLOW_BEAM_SEARCH))
    status, lines, out = grade(capsys, "10", "beam_search", "--module", path)
    assert status == 0 and lines["beam_search"][0] == "PASS", out
    path.write_text(answers_with("10", ENDLESS_BEAM_SEARCH))
    status, lines, out = grade(capsys, "10", "beam_search", "--module", path)
    assert status == 1 and "Traceback" not in out
    result, text = lines["beam_search"]
    assert result == "FAIL", out
    assert text.endswith("still running after 0.5 s of CPU time: an endless loop, or the machine is busy?"), out


def test_every_exercise_has_catalogued_mistakes_and_the_issues_topics_ten_each():
    assert {(lesson, name) for lesson, name, *_ in MISTAKES} == set(ITEMS)
    for lesson, names in BAR.items():
        assert set(names) <= {name for name, _ in check.LESSON_ITEMS[lesson][1]}, lesson
        assert sum(name in names for this, name, *_ in MISTAKES if this == lesson) >= 10, lesson
    texts = [answers_with(lesson, change) for lesson, _, change, _ in MISTAKES]
    assert len(set(texts)) == len(texts), "a mistake is catalogued twice"


def source_of(path, name):
    """The source text of the top-level function or class `name` in the file at `path`."""
    text = path.read_text(encoding="utf-8")
    node = next(n for n in ast.parse(text).body if getattr(n, "name", None) == name)
    return ast.get_source_segment(text, node)


@pytest.mark.parametrize("lesson", sorted(check.LESSON_ITEMS))
def test_stubs_and_solutions_have_the_same_functions_and_signatures(lesson):
    paths = [LESSONS / folder / f"{stem(lesson)}.py" for folder in ("exercises", "solutions")]
    stub, answer = (check.load(path) for path in paths)
    for _, name in (item for item in ITEMS if item[0] == lesson):
        mine, theirs = getattr(stub, name), getattr(answer, name)
        assert inspect.signature(mine) == inspect.signature(theirs), name
        assert inspect.getdoc(mine) and inspect.getdoc(theirs), f"{name} needs a docstring in both files"
        assert "raise NotImplementedError" in source_of(paths[0], name), name
        assert "NotImplementedError" not in source_of(paths[1], name), name


@pytest.mark.parametrize("lesson", sorted(check.LESSON_ITEMS))
def test_the_answers_to_the_lessons_questions_stand_apart_from_the_solutions(lesson):
    """The questions' answers are prose in lessons/answers/ (tests/test_lessons.py runs their blocks); a
    solution file that still holds them as code must have them hold."""
    answer = check.load(LESSONS / "solutions" / f"{stem(lesson)}.py")
    if hasattr(answer, "answers_to_questions"):
        assert lesson >= "07", "lessons 01-06 keep their answers in lessons/answers/ only"
        answer.answers_to_questions()
    assert (LESSONS / "answers" / f"{next(LESSONS.glob(lesson[:2] + '_*.md')).stem}.md").exists()


def test_a_wrong_step_of_layer_norm_fails_that_step_alone(tmp_path, capsys):
    """Each step gets autograd's gradients from above, so a mistake in one does not fail the steps below it."""
    path = tmp_path / "steps.py"
    path.write_text(answers_with("04b", ("-0.5 * (var + eps) ** -1.5 * drstd", "-(var + eps) ** -1.5 * drstd")))
    status, lines, out = grade(capsys, "04b", "--module", path)
    assert status == 1 and {name for name, (result, _) in lines.items() if result == "FAIL"} == {"grad_var"}, out


def test_the_package_beam_search_is_the_brute_force_best_when_nothing_is_pruned():
    """The grader's references agree, so the beam-search exercise has one right answer."""
    for seed, alpha in ((99, 0.6), (7, 0.0), (8, 2.0)):
        step = decoding.random_step(6, seed)
        assert decoding.package_beam_search(step, 6, 27, 3, alpha)[0] == decoding.brute_force(step, 6, 3, alpha)[0]


def test_the_beam_search_cases_catch_every_mistake_and_the_plain_one_is_the_packages():
    """Each mistake of the catalogue finds another output on some case; without one, it finds the package's."""
    cases = decoding.beam_search_cases()
    for _, step, V, k, max_len, alpha in cases:
        (tokens, log_prob), ref = (f(step, V, k, max_len, alpha) for f in (decoding.beam_like, decoding.package_beam_search))
        assert tokens == ref[0] and log_prob == pytest.approx(ref[1], rel=1e-12)
    for name, (_, mistake) in decoding.MISTAKES.items():
        assert any(mistake(*case[1:])[0] != decoding.beam_like(*case[1:])[0] for case in cases), name


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(4, 7), st.integers(1, 4), st.integers(1, 4),
       st.sampled_from([0.0, 0.6, 1.5]))
def test_the_plain_beam_search_behind_the_hints_is_the_packages(seed, V, k, max_len, alpha):
    """beam_like, which the grader's hints vary, finds what search.beam_search finds on any random model."""
    step = decoding.random_step(V, seed)
    tokens, log_prob = decoding.beam_like(step, V, k, max_len, alpha)
    ref = decoding.package_beam_search(step, V, k, max_len, alpha)
    assert tokens == ref[0] and log_prob == pytest.approx(ref[1], rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text("abcé", min_size=1, max_size=6), st.integers(1, 5), min_size=1, max_size=6),
       st.text("abcé", max_size=10))
def test_the_graders_encode_is_the_packages_lowest_rank_first(word_counts, word):
    """The grader's encode (each learned merge once, in rank order) is bpe_learn's (the lowest rank first,
    again and again): merges only make pairs of a later rank, so the two orders agree."""
    merges = bpe_learn.learn_merges_naive(word_counts, 8, 1, 3)
    ranks = {pair: 3 + 256 + k for k, pair in enumerate(merges)}
    assert bpe.encode_like(word, merges) == bpe_learn.apply_merges([b + 3 for b in word.encode("utf-8")], ranks)


def test_the_command_line(tmp_path):
    def run(*argv):
        done = subprocess.run([sys.executable, str(LESSONS / "check.py"), *argv], capture_output=True, text=True,
                              cwd=tmp_path)
        return done.returncode, done.stdout + done.stderr
    status, out = run("04")
    assert status == 1 and "Traceback" not in out and out.count("not implemented yet") == 4
    status, out = run("4", "softmax", "--solutions")
    assert status == 0 and "PASS  softmax" in out and "cross_entropy" not in out
    status, out = run("exercises/04_functional.py", "--solutions", "softmax")   # a file's name, options anywhere
    assert status == 0 and "PASS  softmax" in out
    broken = tmp_path / "broken.py"
    broken.write_text("def softmax(x, axis=-1):\n    return x +\n")
    status, out = run("04", "--module", str(broken))
    assert status == 1 and "Traceback" not in out and out.count("the file does not load: SyntaxError") == 4
    for argv, words in ((["99"], "no exercises for lesson"), (["04", "softmax_forward"], "has no exercise"),
                        (["--module", str(broken)], "give its number")):
        status, out = run(*argv)
        assert status == 2 and words in out and "Traceback" not in out


@pytest.mark.parametrize("path", sorted(LESSONS.glob("[0-9][0-9]_*.md")), ids=lambda p: p.stem)
def test_every_folded_derivation_closes_in_its_own_notebook_cell(path):
    """A <details> fold opens and closes between two code blocks, without a double blank line (jupytext would
    cut the markdown cell there and leave the fold open in the notebook)."""
    for prose in re.split(r"^```.*?^```", path.read_text(encoding="utf-8"), flags=re.S | re.M):
        folds = re.findall(r"<details>.*?</details>", prose, re.S)
        assert prose.count("<details>") == prose.count("</details>") == len(folds), path.name
        assert not any("\n\n\n" in fold for fold in folds), f"{path.name}: a double blank line in a fold"


@pytest.mark.parametrize("lesson", sorted(check.LESSON_ITEMS))
def test_each_lesson_ends_with_now_you_and_keeps_its_answers_out_of_sight(lesson):
    """Questions, then Now you (the exercise, its grader, where its solution is), then at most a section
    "After the exercises" with the package's forms the exercises ask for."""
    text = next(LESSONS.glob(f"{lesson[:2]}_*.md")).read_text(encoding="utf-8")   # 04b: lesson 04's second
    exercises = text[text.index("## Exercises"):]
    assert "<details>" not in exercises, "answers belong in lessons/answers/, not under the questions"
    assert f"solutions/{stem(lesson)}.py" in exercises
    now_you = exercises[exercises.index("## Now you"):]
    assert f"exercises/{stem(lesson)}.py" in now_you and f"python lessons/check.py {lesson}" in now_you
    assert all(h.startswith("## After the exercises") for h in re.findall(r"^## .*", now_you, re.M)[1:])


FORMS = {"04": ["def softmax(x, axis=-1):", "print(body(F.layer_norm))"],      # what an exercise asks for
         "06": ["def attention(q, k, v, mask=None", "getsource(attention.attention_backward)"]}


@pytest.mark.parametrize("lesson", sorted(FORMS))
def test_the_package_forms_an_exercise_asks_for_are_shown_only_after_it(lesson):
    text = next(LESSONS.glob(f"{lesson}_*.md")).read_text(encoding="utf-8")
    after = text.index("## After the exercises")
    assert text.index("## Now you") < after
    for shown in FORMS[lesson]:
        assert text.count(shown) == 1 and text.index(shown) > after, shown
