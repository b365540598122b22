"""The exercise grader, lessons/check.py: it passes the answers in lessons/solutions/, fails the untouched
stubs of lessons/exercises/ with "not implemented yet" (never a traceback), and fails one deliberately
wrong answer per exercise with the hint that names the mistake. So grader, answers and stubs cannot rot."""
import ast
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
spec = importlib.util.spec_from_file_location("lesson_check", LESSONS / "check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)                       # it puts lessons/ on sys.path, for lessons/checks/
decoding = importlib.import_module("checks.10_decoding")

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


# One wrong answer per exercise: (lesson, function) -> (code that replaces the right answer, words the
# grader's line must hold). Each is a mistake a learner makes: a factor, a sign, a missing path or term.
WRONG = {
    ("01", "machine_epsilon"): ("""
        def machine_epsilon(dtype):                 # one halving too many
            e = 1.0
            while dtype(1) + dtype(e) != dtype(1):
                e /= 2
            return e
        """, "that is eps/2"),
    ("01", "smallest_lost_power_of_ten"): ("""
        def smallest_lost_power_of_ten(dtype):      # added in Python floats, whatever the dtype
            k = 1
            while 1.0 + 10.0 ** -k != 1.0:
                k += 1
            return k
        """, "16 is float64's answer"),
    ("02", "mul"): ("""
        def mul(a, b):
            return make_node(a.data * b.data, (a, b), lambda g: (g * a.data, g * b.data), "mul")
        """, "the gradients are swapped"),
    ("02", "reduce_sum"): ("""
        def reduce_sum(x, axis=None, keepdims=False):   # works for axis=0 and None, not for (0, 2)
            out = np.asarray(x.data.sum(axis=axis, keepdims=keepdims))
            return make_node(out, (x,), lambda g: (np.broadcast_to(g, x.shape),), "sum")
        """, "np.expand_dims"),
    ("02", "matmul"): ("""
        def matmul(a, b):
            return make_node(a.data @ b.data, (a, b), lambda g: (g @ b.data, a.data.T @ g), "matmul")
        """, "dA = g B^T"),
    ("03", "numeric_gradient"): ("""
        def numeric_gradient(f, x, eps=1e-6):       # one-sided
            grad, base = np.empty(x.shape), f(x)
            for i in range(x.size):
                old = x.flat[i]
                x.flat[i] = old + eps
                grad.flat[i] = (f(x) - base) / eps
                x.flat[i] = old
            return grad
        """, "one-sided difference"),
    ("03", "gradcheck"): ("""
        def gradcheck(op, *arrays, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0):   # R = ones
            xs = [np.array(a, dtype=np.float64) for a in arrays]
            leaves = [mt.tensor(x, requires_grad=True) for x in xs]
            op(*leaves).sum().backward()
            for i, leaf in enumerate(leaves):
                def loss(xi, i=i):
                    with mt.no_grad():
                        return float(op(*[mt.tensor(xi if j == i else x) for j, x in enumerate(xs)]).data.sum())
                numeric = numeric_gradient(loss, xs[i], eps)
                analytic = leaf.grad if leaf.grad is not None else np.zeros(xs[i].shape)
                if np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric)):
                    return False
            return True
        """, "fixed random R"),
    ("04", "softmax"): ("""
        def softmax(x, axis=-1):
            return np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)
        """, "subtract the maximum"),
    ("04", "softmax_backward"): ("""
        def softmax_backward(y, dy, axis=-1):
            return y * dy
        """, "you left out - sum(dy * y)"),
    ("04", "cross_entropy_backward"): ("""
        _right = cross_entropy_backward
        def cross_entropy_backward(logits, target, label_smoothing=0.0, ignore_index=None):
            valid = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
            return _right(logits, target, label_smoothing, ignore_index) * max(int(valid.sum()), 1)
        """, "divide by the number of counted rows"),
    ("04", "layer_norm_backward"): ("""
        def layer_norm_backward(x, gamma, dy, eps=1e-6):
            mu = x.mean(-1, keepdims=True)
            sigma = np.sqrt(x.var(-1, keepdims=True) + eps)
            xhat, g = (x - mu) / sigma, dy * gamma
            dx = (g - xhat * (g * xhat).mean(-1, keepdims=True)) / sigma
            D = x.shape[-1]
            return dx, (dy * xhat).reshape(-1, D).sum(0), dy.reshape(-1, D).sum(0)
        """, "you left out - mean(g)"),
    ("05", "xavier_bound"): ("""
        def xavier_bound(d_in, d_out):
            return math.sqrt(2.0 / (d_in + d_out))
        """, "that is the standard deviation"),
    ("05", "linear_backward"): ("""
        def linear_backward(x, weight, dy):
            d_in, d_out = weight.shape
            return dy @ weight.T, x.reshape(-1, d_in).T @ dy.reshape(-1, d_out), dy
        """, "sum dy over every leading axis"),
    ("05", "FeedForward"): ("""
        class FeedForward(nn.Module):
            def __init__(self, d_model, d_ff):
                super().__init__()
                self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
            def forward(self, x):
                return self.w_2(self.w_1(x))
        """, "put a ReLU between the two layers"),
    ("06", "causal_mask"): ("""
        def causal_mask(T):
            return np.triu(np.ones((T, T), dtype=bool))[None, None]
        """, "the LOWER triangle"),
    ("06", "attention_forward"): ("""
        _right = attention_forward
        def attention_forward(q, k, v, mask=None):
            return _right(q * math.sqrt(q.shape[-1]), k, v, mask)
        """, "divide the scores by sqrt(d_k)"),
    ("06", "attention_backward"): ("""
        _right = attention_backward
        def attention_backward(q, k, v, weights, dout):
            dq, dk, dv = _right(q, k, v, weights, dout)
            return dq * math.sqrt(q.shape[-1]), dk * math.sqrt(q.shape[-1]), dv
        """, "you left out the 1/sqrt(d_k)"),
    ("07", "sinusoids"): ("""
        _right = sinusoids
        def sinusoids(n_positions, d_model):       # cosines in the even columns, sines in the odd
            table = _right(n_positions, d_model)
            table[:, 0::2], table[:, 1::2] = table[:, 1::2].copy(), table[:, 0::2].copy()
            return table
        """, "even columns are sines"),
    ("07", "count_parameters"): ("""
        _right = count_parameters
        def count_parameters(vocab_size, d_model, d_ff, n_layers):   # one attention per decoder layer
            return _right(vocab_size, d_model, d_ff, n_layers) - n_layers * 4 * (d_model ** 2 + d_model)
        """, "two attentions"),
    ("08", "merge"): ("""
        def merge(ids, pair, new_id):               # moves on by one after a merge, not two
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(new_id)
                else:
                    out.append(ids[i])
                i += 1
            return out
        """, "skip past both ids"),
    ("08", "learn_merges"): ("""
        def learn_merges(word_counts, num_merges, min_frequency=2, offset=3):   # ties to the largest pair
            words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]
            merges = []
            for k in range(num_merges):
                counts = {}
                for w, f in zip(words, word_counts.values()):
                    for pair in zip(w, w[1:]):
                        counts[pair] = counts.get(pair, 0) + f
                if not counts:
                    break
                best = max(counts, key=lambda p: (counts[p], p))
                if counts[best] < max(1, min_frequency):
                    break
                words = [merge(w, best, offset + 256 + k) for w in words]
                merges.append(best)
            return merges
        """, "a tie goes to the smallest"),
    ("08", "encode"): ("""
        def encode(word, merges, offset=3):         # characters, not bytes
            ids = [ord(c) + offset for c in word]
            for k, pair in enumerate(merges):
                ids = merge(ids, pair, offset + 256 + k)
            return ids
        """, "start from the UTF-8 bytes"),
    ("09", "noam_lr"): ("""
        def noam_lr(step, d_model, warmup_steps=4000):
            step = max(step, 1)
            return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)
        """, "step * warmup_steps^-1.5"),
    ("09", "smoothed_targets"): ("""
        def smoothed_targets(target, vocab_size, eps):     # tensor2tensor's: eps over the V - 1 others
            q = np.full((len(target), vocab_size), eps / (vocab_size - 1))
            q[np.arange(len(target)), target] = 1 - eps
            return q
        """, "tensor2tensor's variant"),
    ("09", "loss_floor"): ("""
        def loss_floor(vocab_size, eps):
            q = smoothed_targets(np.array([0]), vocab_size, eps)
            return float(-(q * np.log(q)).sum())
        """, "0 log 0 counts as 0"),
    ("10", "length_penalty"): ("""
        def length_penalty(length, alpha):
            return ((4.0 + length) / 6.0) ** alpha
        """, "|Y| counts the final EOS"),
    ("10", "beam_search"): ("""
        _right = beam_search
        def beam_search(step, beam_size, max_len, alpha=0.0):   # ranks by log p alone
            return _right(step, beam_size, max_len, 0.0)
        """, "rank finished outputs by score"),
    ("11", "transfer_megabytes"): ("""
        def transfer_megabytes(shape, dtype):
            return math.prod(shape) * np.dtype(dtype).itemsize / 2 ** 20
        """, "not 2^20 (MiB)"),
    ("11", "layer_norm"): ("""
        def layer_norm(x, gamma, beta, eps=1e-6):
            return gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta
        """, "ddof=0"),
    ("12", "shard_weights"): ("""
        def shard_weights(token_counts, rank, size):     # this rank's own tokens: the average of the means
            own = token_counts[rank::size]
            return [c / sum(own) / size for c in own]
        """, "the average of the ranks' own means"),
    ("12", "ring_allreduce"): ("""
        _right = ring_allreduce
        def ring_allreduce(arrays):                      # the all-gather left out
            chunks = [np.array_split(np.array(a).reshape(-1), len(arrays)) for a in arrays]
            N = len(arrays)
            for s in range(N - 1):
                sent = [(r, (r - s) % N, chunks[r][(r - s) % N].copy()) for r in range(N)]
                for r, c, data in sent:
                    chunks[(r + 1) % N][c] += data
            return [np.concatenate(c).reshape(np.shape(arrays[0])) for c in chunks]
        """, "the all-gather"),
    ("12", "ring_bytes_sent"): ("""
        def ring_bytes_sent(n_elements, itemsize, size):   # the reduce-scatter alone
            return (size - 1) * (n_elements // size) * itemsize
        """, "that is one phase"),
}


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


@pytest.mark.parametrize("lesson, name", sorted(WRONG), ids=lambda x: x)
def test_a_wrong_answer_fails_with_its_hint(lesson, name, tmp_path, capsys):
    code, hint = WRONG[lesson, name]
    path = tmp_path / f"{stem(lesson)}.py"           # the answers, with one of them replaced by a wrong one
    path.write_text((LESSONS / "solutions" / f"{stem(lesson)}.py").read_text() + textwrap.dedent(code))
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
        def softmax(x, axis=-1):                    # caught by the gradcheck after the cases: named as such
            x -= x.max(axis=axis, keepdims=True)
            np.exp(x, out=x)
            x /= x.sum(axis=axis, keepdims=True)
            return x
        """, "mt.gradcheck, logits (3, 4)"),
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
    monkeypatch.setattr(check.time_limit.__wrapped__, "__defaults__", (1,))      # 1 s, not 30
    path = tmp_path / "mine.py"
    for code, why in (("exit()", "it calls exit()"), ("while True:\n    pass", "still running after 1 s: an endless loop?")):
        path.write_text("import numpy as np\n" + code + "\n")
        status, lines, out = grade(capsys, "04", "--module", path)
        assert status == 1 and len(lines) == 4, out
        assert set(lines.values()) == {("FAIL", f"the file does not load: {why} (line 2)")}, out


def test_every_exercise_has_a_wrong_answer():
    assert sorted(WRONG) == sorted(ITEMS)


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
def test_the_answers_to_the_lessons_questions_hold(lesson):
    answer = check.load(LESSONS / "solutions" / f"{stem(lesson)}.py")
    answer.answers_to_questions()


def test_the_package_beam_search_is_the_brute_force_best_when_nothing_is_pruned():
    """The grader's references agree, so the beam-search exercise has one right answer."""
    for seed, alpha in ((99, 0.6), (7, 0.0), (8, 2.0)):
        step = decoding.random_step(3, seed)
        assert decoding.package_beam_search(step, 3, 27, 3, alpha)[0] == decoding.brute_force(step, 3, 3, alpha)[0]


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


@pytest.mark.parametrize("lesson", sorted(check.LESSON_ITEMS))
def test_each_lesson_ends_with_now_you_and_keeps_its_answers_out_of_sight(lesson):
    text = next(LESSONS.glob(f"{lesson}_*.md")).read_text(encoding="utf-8")
    exercises = text[text.index("## Exercises"):]
    assert "<details>" not in exercises, "answers belong in lessons/solutions/, not under the questions"
    assert f"solutions/{stem(lesson)}.py" in exercises
    now_you = exercises[exercises.index("## Now you"):]
    assert f"exercises/{stem(lesson)}.py" in now_you and f"python lessons/check.py {lesson}" in now_you
