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


# More wrong answers, each the answer of lessons/solutions/ with a line or two changed as a learner would get
# it wrong: (lesson, function, (the text, the wrong text) or several such pairs, words the grader's line must hold).
MUTANTS = [
    ("02", "mul", ("return g * b.data, g * a.data", "return b.data, a.data"), "multiply by the incoming gradient g"),
    ("02", "matmul", ("return g @ B.T, A.T @ g", "return g @ B.T, g.T @ A"), "dB = A^T g is (k, m)(m, n)"),
    ("03", "numeric_gradient", ("out[i] = (up - down) / (2 * eps)", "out[i] = (up - down) / eps"),
     "yours is twice the answer"),
    ("07", "sinusoids", ("-np.arange(0, d_model, 2) / d_model", "-np.arange(0, d_model, 2) / 2 / d_model"),
     "the exponent is 2i / d_model"),
    ("07", "count_parameters", ("norm = 2 * D ", "norm = D "), "each LayerNorm has gamma and beta"),
    ("04", "softmax", (("x.max(axis=axis, keepdims=True)", "x.max(axis=-1, keepdims=True)"),
                       ("e.sum(axis=axis, keepdims=True)", "e.sum(axis=-1, keepdims=True)")), "not the last axis"),
    ("04", "softmax_backward", ("(dy * y).sum(axis=axis", "(dy * y).sum(axis=-1"), "sum along `axis`"),
    ("04", "softmax_backward", ("y * (dy - (dy * y).sum(", "(dy - (dy * y).sum("), "multiply by y"),
    ("04", "cross_entropy_backward", ("return (p - q) * valid[..., None] / n", "return (p - q) / n"),
     "rows whose target is ignore_index get a zero gradient"),
    ("04", "cross_entropy_backward", ("n = max(int(valid.sum()), 1)", "n = valid.size"),
     "divide by the rows that count"),
    ("04", "cross_entropy_backward", ("1 - eps + eps / V, axis=-1)", "1 - eps, axis=-1)"),
     "the target gets eps / V too"),
    ("04", "cross_entropy_backward", (("q = np.full(logits.shape, eps / V)", "q = np.zeros(logits.shape)"),
                                      ("1 - eps + eps / V, axis=-1)", "1.0, axis=-1)")), "not onehot"),
    ("04", "layer_norm_backward", ("keepdims=True) + eps)", "keepdims=True))"), "you left out eps"),
    ("04", "layer_norm_backward", ("(dy * xhat).reshape(-1, D)", "(dy * x).reshape(-1, D)"), "the normalised x"),
    ("04", "layer_norm_backward", ("dy.reshape(-1, D).sum(axis=0)", "dy.reshape(-1, D).mean(axis=0)"), "not mean"),
    ("04", "layer_norm_backward", ("- g.mean(axis=-1, keepdims=True) - xhat", "- xhat"), "you left out - mean(g)"),
    ("11", "layer_norm", ("np.sqrt(var + eps)", "np.sqrt(var)"), "you left out eps"),
    ("05", "xavier_bound", ("math.sqrt(6.0 / (d_in + d_out))", "math.sqrt(6.0 / d_in)"), "use d_in + d_out"),
    ("05", "linear_backward", ("X.T @ G", "G.T @ X"), "dweight has weight's shape (d_in, d_out)"),
    ("05", "linear_backward", ("G.sum(axis=0)", "G.mean(axis=0)"), "not mean"),
    ("05", "FeedForward", ("self.w_2(self.w_1(x).relu())", "self.w_2(self.w_1(x).relu()).relu()"),
     "no ReLU after the second layer"),
    ("06", "causal_mask", ("np.tril(np.ones((T, T), dtype=bool))", "np.tril(np.ones((T, T), dtype=bool), -1)"),
     "a query may attend to itself"),
    ("06", "causal_mask", ("np.tril(np.ones((T, T), dtype=bool))[None, None]", "np.tril(np.ones((T, T), dtype=bool))"),
     "(1, 1, T, T), to broadcast over batch and heads"),
    ("06", "attention_forward", ("p = np.exp(s - s.max(axis=-1, keepdims=True))", "p = np.exp(s)"),
     "subtract each row's largest score before exp"),
    ("06", "attention_forward", (("s = np.where(mask, s, -1e9)", "pass"),               # the mask after the softmax
                                 ("p = p * mask.any(axis=-1, keepdims=True)", "p = p * mask")),
     "mask before the softmax"),
    ("06", "attention_forward", (("s.max(axis=-1", "s.max(axis=-2"), ("p.sum(axis=-1", "p.sum(axis=-2")),
     "the softmax runs over the keys (the last axis)"),
    ("06", "attention_forward", ("k, -1, -2) / math.sqrt(q.shape[-1])", "k, -1, -2) / q.shape[-1]"),
     "not by d_k"),
    ("06", "attention_forward", ("s = np.where(mask, s, -1e9)", "s = np.where(mask, -1e9, s)"),
     "the mask is True where attention is ALLOWED"),
    ("06", "attention_backward", ("dv = np.swapaxes(p, -1, -2) @ dout", "dv = p @ dout"), "dV = P^T dO: transpose P"),
    ("06", "attention_backward", ("ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))", "ds = p * dp"),
     "the softmax backward of lesson 04"),
    ("08", "encode", "\n".join(["",
        "def encode(word, merges, offset=3):         # the leftmost known pair first, not the lowest rank",
        "    ids = [b + offset for b in word.encode('utf-8')]",
        "    new = {pair: offset + 256 + k for k, pair in enumerate(merges)}",
        "    while True:",
        "        i = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) in new), None)",
        "        if i is None:",
        "            return ids",
        "        ids[i:i + 2] = [new[ids[i], ids[i + 1]]]", ""]), "that is the leftmost known pair first"),
    ("08", "encode", ("ids = merge(ids, pair, offset + 256 + rank[pair])", "ids = merge(ids, pair, 256 + rank[pair])"),
     "merge k makes the id offset + 256 + k"),
    ("08", "encode", ("key=lambda p: rank.get(p, len(merges)))", "key=lambda p: -rank.get(p, -1))"),  # latest first
     "apply the merge of the lowest rank first"),
    ("08", "learn_merges", ("if counts[best] < max(1, min_frequency):", "if counts[best] <= min_frequency:"),
     "still occurs"),
    ("08", "learn_merges", ("counts[pair] = counts.get(pair, 0) + f", "counts[pair] = counts.get(pair, 0) + 1"),
     "times its word's count"),
    ("09", "noam_lr", ("min(step ** -0.5, step * warmup_steps ** -1.5)",
                       "max(step ** -0.5, step * warmup_steps ** -1.5)"),
     "the min of the two branches"),
    ("09", "smoothed_targets", ("target] += 1 - eps", "target] = 1 - eps"), "the target gets eps / V too"),
    ("12", "shard_weights", ("n = sum(token_counts)", "n = sum(token_counts[rank::size])"), "not this rank's own"),
    ("12", "ring_allreduce", ("np.array(a).reshape(-1)", "np.asarray(a).reshape(-1)"),
     "leave the inputs as they are (work on copies)"),
    ("10", "beam_search", ("if token != EOS][:beam_size]", "if token != EOS][:beam_size + 1]"),
     "keep exactly k = beam_size alive"),
    ("10", "beam_search", ("if token != EOS][:beam_size]", "if token != EOS][:2 * beam_size]"),
     "that is what 2k alive prefixes find"),
    ("10", "beam_search", (("if token != EOS][:beam_size]", "if token != EOS]"),    # exhaustive search
                           ("for logp, prefix, token in candidates[:beam_size]:",
                            "for logp, prefix, token in candidates:")),
     "that is the best of ALL outputs"),
    ("10", "beam_search", ("for logp, prefix, token in candidates if token != EOS][:beam_size]",
                           "for logp, prefix, token in candidates[:beam_size] if token != EOS]"),
     "the EOS candidates took places in the beam"),
    ("10", "beam_search", ("for logp, prefix, token in candidates[:beam_size]:",
                           "for logp, prefix, token in candidates:"), "only the EOS candidates ranked among"),
    ("10", "beam_search", ("length_penalty(len(prefix) + 1, alpha)", "length_penalty(len(prefix), alpha)"),
     "|Y| counts the final EOS: an output of n words scores log p / lp(n + 1)"),
    ("10", "beam_search", ("length_penalty(len(prefix) + 1, alpha)", "length_penalty(len(prefix) + 2, alpha)"),
     "|Y| = n + 1, the n words and ONE EOS"),
    ("10", "beam_search", ("if not alive:", "if not alive or finished:"),
     "a finished output does not end the search"),
    ("10", "beam_search", ("if not alive:", "if not alive or len(finished) >= beam_size:"),
     "k finished outputs do not end the search"),
    ("10", "beam_search", ("max(finished, key=lambda h: h[0])", "max(finished, key=lambda h: h[2])"),
     "rank finished outputs by score"),
    ("10", "beam_search", ("max(finished, key=lambda h: h[0])", "sorted(finished, key=lambda h: h[0])[-1]"),
     "of finished outputs with equal scores, the first found wins"),
    ("10", "beam_search", ("key=lambda c: -c[0])", "key=lambda c: (-c[0], -c[2]))"),
     "candidates of equal log p rank by lower beam"),
    ("10", "beam_search", (("if t < max_len or token == EOS", "if True"),           # no EOS forced at max_len
                           ("for t in range(max_len + 1):", "for t in range(2 * max_len + 2):")),
     "a prefix holds at most max_len words"),
    ("10", "beam_search", ("candidates = [c for c in candidates if c[0] > -math.inf]", "pass"),
     "a candidate of log p -inf drops out"),
    ("10", "beam_search", ("return tokens, logp", "return tokens + [EOS], logp"), "tokens leave out the final EOS"),
    ("10", "beam_search", ("return tokens, logp", "return tokens, logp / length_penalty(len(tokens) + 1, alpha)"),
     "return log p, not the score"),
]


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


@pytest.mark.parametrize("lesson, name, change, hint", [(*key, *WRONG[key]) for key in sorted(WRONG)] + MUTANTS,
                         ids=lambda x: x if isinstance(x, str) and len(x) < 30 else "")
def test_a_wrong_answer_fails_with_its_hint(lesson, name, change, hint, tmp_path, capsys):
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
