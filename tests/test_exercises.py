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
import threading
import time
from pathlib import Path

import numpy as np
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
# The catalogue's bar: at least ten plausible mistakes for each of these exercises together.
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


# Right answers written another way than the solutions: each must pass (lesson, function, code).
RIGHT = [
    ("02", "mul", """
        def mul(a, b):                              # np.multiply, and a backward that names its argument grad
            def backward(grad):
                return np.multiply(grad, b.data), np.multiply(a.data, grad)
            return make_node(np.multiply(a.data, b.data), (a, b), backward, "mul")
        """),
    ("02", "reduce_sum", """
        def reduce_sum(x, axis=None, keepdims=False):   # ones times g, put back by reshaping
            axes = tuple(range(x.ndim)) if axis is None else tuple(int(i) % x.ndim for i in np.atleast_1d(axis))
            out = np.asarray(x.data.sum(axis=axes, keepdims=keepdims))
            kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
            return make_node(out, (x,), lambda g: (np.ones(x.shape) * np.reshape(g, kept),), "sum")
        """),
    ("02", "matmul", """
        def matmul(a, b):                           # einsum
            A, B = a.data, b.data
            return make_node(np.einsum("ik,kj->ij", A, B), (a, b),
                             lambda g: (np.einsum("ij,kj->ik", g, B), np.einsum("ik,ij->kj", A, g)), "matmul")
        """),
    ("03", "numeric_gradient", """
        def numeric_gradient(f, x, eps=1e-6):       # perturbs a copy, never x itself
            x, grad = np.array(x, dtype=np.float64), np.zeros(np.shape(x))
            for i in np.ndindex(x.shape):
                up, down = x.copy(), x.copy()
                up[i] += eps
                down[i] -= eps
                grad[i] = (f(up) - f(down)) / (2 * eps)
            return grad
        """),
    ("04", "softmax", """
        def softmax(x, axis=-1):                    # through the log-sum-exp
            m = x.max(axis=axis, keepdims=True)
            return np.exp(x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True)))
        """),
    ("04", "softmax_backward", """
        def softmax_backward(y, dy, axis=-1):       # expanded
            return y * dy - y * np.sum(y * dy, axis=axis, keepdims=True)
        """),
    ("04", "cross_entropy_backward", """
        def cross_entropy_backward(logits, target, label_smoothing=0.0, ignore_index=None):   # one-hot by eye
            V = logits.shape[-1]
            valid = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
            onehot = np.eye(V)[np.where(valid, target, 0)]
            q = (1 - label_smoothing) * onehot + label_smoothing / V
            z = logits - logits.max(axis=-1, keepdims=True)
            p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
            return (p - q) * valid[..., None] / max(int(valid.sum()), 1)
        """),
    ("04", "layer_norm_backward", """
        def layer_norm_backward(x, gamma, dy, eps=1e-6):    # np.var, rstd, and sums over the leading axes
            rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
            xhat = (x - x.mean(axis=-1, keepdims=True)) * rstd
            g = gamma * dy
            dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
            lead = tuple(range(x.ndim - 1))
            return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)
        """),
    ("04b", "grad_var", """
        def grad_var(drstd, var, eps=1e-6):         # rstd cubed
            return -0.5 / np.sqrt(var + eps) ** 3 * drstd
        """),
    ("04b", "grad_xc", """
        def grad_xc(dxhat, rstd, dvar, xc):
            return rstd * dxhat + (2.0 / xc.shape[-1]) * xc * dvar
        """),
    ("04b", "grad_x", """
        def grad_x(dxc, dmu):
            out = dxc.copy()
            out += dmu / dxc.shape[-1]                  # in place, but into its own copy
            return out
        """),
    ("05", "linear_backward", """
        def linear_backward(x, weight, dy):        # einsum over every leading axis
            lead = tuple(range(x.ndim - 1))
            return dy @ weight.T, np.tensordot(x, dy, axes=(lead, lead)), dy.sum(axis=lead)
        """),
    ("06", "attention_forward", """
        def attention_forward(q, k, v, mask=None):  # einsum, and the empty rows zeroed by np.where
            s = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
            if mask is not None:
                s = np.where(mask, s, -1e9)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p = p / p.sum(axis=-1, keepdims=True)
            if mask is not None:
                p = np.where(np.broadcast_to(mask, p.shape).any(axis=-1, keepdims=True), p, 0.0)
            return np.einsum("bhqk,bhkd->bhqd", p, v), p
        """),
    ("06", "attention_backward", """
        def attention_backward(q, k, v, weights, dout):     # einsum
            c = 1 / np.sqrt(q.shape[-1])
            dp = np.einsum("bhqd,bhkd->bhqk", dout, v)
            ds = weights * (dp - np.einsum("bhqk,bhqk->bhq", dp, weights)[..., None])
            return (c * np.einsum("bhqk,bhkd->bhqd", ds, k), c * np.einsum("bhqk,bhqd->bhkd", ds, q),
                    np.einsum("bhqk,bhqd->bhkd", weights, dout))
        """),
]


@pytest.mark.parametrize("lesson, name, code", RIGHT, ids=lambda x: x if len(x) < 30 else "")
def test_a_right_answer_written_another_way_passes(lesson, name, code, tmp_path, capsys):
    path = tmp_path / f"{stem(lesson)}.py"
    path.write_text(answers_with(lesson, code))
    status, lines, out = grade(capsys, lesson, name, "--module", path)
    assert status == 0 and lines[name][0] == "PASS", out


def test_every_call_is_guarded_and_the_contract_may_open_it():
    """Writing into an input, the incoming gradient included, or returning memory an input or another
    result holds fails, naming the argument; may_write and may_share open what a contract allows."""
    def scale(x, dy):
        dy *= 2
        return dy
    g = check.Grade(Path("mine.py"))
    with pytest.raises(check.Fail, match=r"scale changed its input dy in place \(first at index \(0,\)\).*"
                                         r"corrupts other tensors' gradients"):
        g.call(scale, np.ones(2), np.ones(2))
    with g.contract(may_write={"dy"}):
        g.call(scale, np.ones(2), np.ones(2))
    g.call(lambda counts: counts, {"ab": [1, 2]})
    with pytest.raises(check.Fail, match=r"changed its input counts\['ab'\]\[1\] in place"):
        g.call(lambda counts: counts["ab"].__setitem__(1, 5), {"ab": [1, 2]})
    with pytest.raises(check.Fail, match=r"changed its input counts\['ab'\] in place \(its length went"):
        g.call(lambda counts: counts["ab"].append(3), {"ab": [1, 2]})
    for fn, words in ((lambda x: x[1:], r"the result shares memory with the input x"),
                      (lambda xs: [xs[0] * 2] * 3, r"the result\[1\] and the result\[0\] share memory")):
        g = check.Grade(Path("mine.py"))
        g.call(fn, np.ones(3)) if "xs" not in fn.__code__.co_varnames else g.call(fn, [np.ones(3)])
        with pytest.raises(check.Fail, match=words):
            g.finish()
        g = check.Grade(Path("mine.py"))
        with g.contract(may_share=True):
            g.call(fn, np.ones(3)) if "xs" not in fn.__code__.co_varnames else g.call(fn, [np.ones(3)])
        g.finish()


def test_a_known_mistake_is_named_only_when_a_second_case_confirms_it():
    """One case that happens to match a catalogued mistake says only what differs and where; a second
    case that matches it too names it; a second case that does not leaves it unnamed."""
    known = lambda ref: [(2 * ref, "a factor 2: the known mistake")]
    ref1, ref2 = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    for second, named in ((2 * ref2, True), (ref2 + 1, False), (ref2, False)):
        g = check.Grade(Path("mine.py"))
        g.start("case 1")
        g.cmp("out", 2 * ref1, ref1, known=known(ref1))
        g.start("case 2")
        with pytest.raises(check.Fail) as e:
            g.cmp("out", second, ref2, known=known(ref2))
            g.finish()
        text = str(e.value)
        assert text.startswith("case 1: out: max diff 2") and ("the known mistake" in text) == named, text
        assert named or "first at index" in text or "twice the answer" in text, text


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


BUSY_SOFTMAX = """
    import time

    def softmax(x, axis=-1, _right=softmax):
        start = time.thread_time()
        while time.thread_time() - start < 0.08:    # 0.08 s of this thread's CPU time a call: 7 calls
            pass
        return _right(x, axis)
    """


def test_a_right_answer_passes_on_a_busy_machine_and_the_references_do_not_count(tmp_path, capsys, monkeypatch):
    """A busy thread in the grader's process, another process spinning, and a reference that takes 0.1 s
    of CPU a case: a right answer that uses 0.56 s of CPU time in all passes a 1 s limit (the process's
    CPU time, its busy thread's included, would pass 1 s); an endless loop still fails it."""
    monkeypatch.setattr(check, "CPU_SECONDS", 1.0)
    functional = importlib.import_module("minitransformer.functional")
    package_softmax = functional.softmax

    def slow_reference(*args, **kwargs):             # the grader's own work: never counted
        spin(0.1)
        return package_softmax(*args, **kwargs)
    monkeypatch.setattr(functional, "softmax", slow_reference)
    stop = threading.Event()
    def keep_busy():                                 # NumPy's product runs without the GIL: beside yours
        a = np.ones((200, 200))
        while not stop.is_set():
            a @ a
    busy = threading.Thread(target=keep_busy, daemon=True)
    other = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"])
    busy.start()
    try:
        path = tmp_path / f"{stem('04')}.py"
        path.write_text(answers_with("04", BUSY_SOFTMAX))
        status, lines, out = grade(capsys, "04", "softmax", "--module", path)
        assert status == 0 and lines["softmax"][0] == "PASS", out
        path.write_text(answers_with("04", "def softmax(x, axis=-1):\n    while True:\n        pass\n"))
        status, lines, out = grade(capsys, "04", "softmax", "--module", path)
        assert status == 1 and lines["softmax"][1].endswith("still running after 1 s of CPU time: an endless "
                                                              "loop, or the machine is busy?"), out
    finally:
        stop.set()
        other.kill()
        other.wait()
        busy.join()


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


def test_every_exercise_has_catalogued_mistakes_and_ten_for_each_topic():
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
    """The questions' answers are prose in lessons/answers/ (tests/test_lessons.py runs their blocks),
    never in the solutions, which a learner opens only after the exercise."""
    answer = check.load(LESSONS / "solutions" / f"{stem(lesson)}.py")
    assert not hasattr(answer, "answers_to_questions")
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
