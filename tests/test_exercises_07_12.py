"""The grader of lessons 07-12 on answers written as a learner writes them, not derived from
the solutions: plausible wrong answers must FAIL with a hint that names the mistake or says
honestly what differs (never another mistake's name), and right answers written another way
must PASS."""
import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("on_cpu")   # the lessons' code is NumPy code

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
spec = importlib.util.spec_from_file_location("lesson_check_07_12", LESSONS / "check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
ITEM_LINE = re.compile(r"^  (PASS|FAIL)  (\S+) +(.*)$")
HEADER = "import math\nfrom collections import Counter\n\nimport numpy as np\n\nEOS = 2\n"


def graded(tmp_path, capsys, lesson, name, code):
    """(PASS or FAIL, the line's text) of one function written in `code`."""
    path = tmp_path / f"{check.LESSON_ITEMS[lesson][0]}.py"
    path.write_text(HEADER + textwrap.dedent(code))
    check.main([lesson, name, "--module", str(path)])
    out = capsys.readouterr().out
    found = (ITEM_LINE.match(line) for line in out.splitlines())
    lines = {m.group(2): (m.group(1), m.group(3)) for m in found if m}
    assert "Traceback" not in out, out
    return lines[name]


# (lesson, function, a wrong answer as a learner writes it, words its FAIL line must hold)
WRONG = [
    ("07", "sinusoids", """
        def sinusoids(n_positions, d_model):             # float32, as the model computes
            pos = np.arange(n_positions)[:, None]
            w = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
            pe = np.zeros((n_positions, d_model), np.float32)
            pe[:, 0::2] = np.sin(pos * w)
            pe[:, 1::2] = np.cos(pos * w)
            return pe
    """, "float64"),
    ("07", "count_parameters", """
        def count_parameters(vocab_size, d_model, d_ff, n_layers):   # three embedding matrices
            D, F = d_model, d_ff
            enc = 4 * (D * D + D) + 2 * D * F + F + D + 4 * D
            dec = 8 * (D * D + D) + 2 * D * F + F + D + 6 * D
            return 3 * vocab_size * D + n_layers * (enc + dec)
    """, "shared by both embeddings and the output projection"),
    ("08", "learn_merges", """
        def learn_merges(word_counts, num_merges, min_frequency=2, offset=3):   # never merged
            words = {tuple(b + offset for b in w.encode("utf-8")): c
                     for w, c in word_counts.items()}
            merges = []
            for k in range(num_merges):
                counts = Counter()
                for w, c in words.items():
                    for pair in zip(w, w[1:]):
                        counts[pair] += c
                pairs = [p for p in counts if p not in merges]
                if not pairs:
                    break
                best = min(pairs, key=lambda p: (-counts[p], p))
                if counts[best] < min_frequency:
                    break
                merges.append(best)
            return merges
    """, "yours counted the words as they were"),
    ("08", "learn_merges", """
        def learn_merges(word_counts, num_merges, min_frequency=2, offset=3):   # first one only
            words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]
            freqs = list(word_counts.values())
            merges = []
            for k in range(num_merges):
                counts = Counter()
                for w, f in zip(words, freqs):
                    for pair in zip(w, w[1:]):
                        counts[pair] += f
                if not counts:
                    break
                best = min(counts, key=lambda p: (-counts[p], p))
                if counts[best] < min_frequency:
                    break
                for w in words:
                    for i in range(len(w) - 1):
                        if (w[i], w[i + 1]) == best:
                            w[i:i + 2] = [offset + 256 + k]
                            break
                merges.append(best)
            return merges
    """, "not only the first"),
    ("08", "merge", """
        def merge(ids, pair, new_id):                    # the last id lost
            out, i = [], 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == pair:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            return out
    """, "the last id is lost"),
    ("08", "encode", """
        def encode(word, merges, offset=3):              # each merge's first occurrence only
            ids = [b + offset for b in word.encode("utf-8")]
            for k, pair in enumerate(merges):
                for i in range(len(ids) - 1):
                    if (ids[i], ids[i + 1]) == pair:
                        ids[i:i + 2] = [offset + 256 + k]
                        break
            return ids
    """, "EVERY occurrence"),
    ("09", "loss_floor", """
        def loss_floor(vocab_size, eps):                 # log 0 at eps = 0
            q_t = 1 - eps + eps / vocab_size
            q_o = eps / vocab_size
            return -q_t * math.log(q_t) - (vocab_size - 1) * q_o * math.log(q_o)
    """, "0 log 0 counts as 0"),
    ("09", "loss_floor", """
        def loss_floor(vocab_size, eps):                 # V other tokens, not V - 1
            if eps == 0:
                return 0.0
            q_t = 1 - eps + eps / vocab_size
            q_o = eps / vocab_size
            return -q_t * math.log(q_t) - vocab_size * q_o * math.log(q_o)
    """, "only the V - 1 other tokens"),
    ("09", "noam_lr", """
        def noam_lr(step, d_model, warmup_steps=4000):   # the larger branch
            step = max(step, 1)
            return d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)
    """, "the min of the two branches"),
    ("09", "adam", """
        def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):   # no bias corrections
            m = betas[0] * m + (1 - betas[0]) * g
            v = betas[1] * v + (1 - betas[1]) * g * g
            return p - lr * m / (np.sqrt(v) + eps), m, v
    """, "bias corrections"),
    ("09", "adam", """
        def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):   # p updated in place
            m = betas[0] * m + (1 - betas[0]) * g
            v = betas[1] * v + (1 - betas[1]) * g * g
            p -= lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
            return p, m, v
    """, "changed its input p"),
    ("10", "beam_search", """
        def length_penalty(length, alpha):
            return ((5 + length) / 6) ** alpha

        def beam_search(step, beam_size, max_len, alpha=0.0):   # finished ranked by log p
            alive, done = [((), 0.0)], []
            for t in range(max_len + 1):
                rows = step([p for p, _ in alive])
                cands = sorted(((lp + rows[r][tok], r, tok) for r, (p, lp) in enumerate(alive)
                                for tok in range(len(rows[r])) if t < max_len or tok == EOS),
                               key=lambda c: (-c[0], c[1], c[2]))
                cands = [c for c in cands if c[0] > -math.inf]
                for lp, r, tok in cands[:beam_size]:
                    if tok == EOS:
                        done.append((lp, list(alive[r][0]), lp))
                alive = [(alive[r][0] + (tok,), lp) for lp, r, tok in cands
                         if tok != EOS][:beam_size]
                if not alive:
                    break
            best = max(s for s, _, _ in done)
            return next((toks, lp) for s, toks, lp in done if s == best)
    """, "rank finished outputs by score"),
    ("10", "beam_search", """
        def length_penalty(length, alpha):
            return ((5 + length) / 6) ** alpha

        def beam_search(step, beam_size, max_len, alpha=0.0):   # ties to the higher token
            alive, done = [((), 0.0)], []
            for t in range(max_len + 1):
                rows = step([p for p, _ in alive])
                cands = sorted(((lp + rows[r][tok], r, tok) for r, (p, lp) in enumerate(alive)
                                for tok in range(len(rows[r])) if t < max_len or tok == EOS),
                               key=lambda c: (-c[0], c[1], -c[2]))
                cands = [c for c in cands if c[0] > -math.inf]
                for lp, r, tok in cands[:beam_size]:
                    if tok == EOS:
                        lp_y = length_penalty(len(alive[r][0]) + 1, alpha)
                        done.append((lp / lp_y, list(alive[r][0]), lp))
                alive = [(alive[r][0] + (tok,), lp) for lp, r, tok in cands
                         if tok != EOS][:beam_size]
                if not alive:
                    break
            best = max(s for s, _, _ in done)
            return next((toks, lp) for s, toks, lp in done if s == best)
    """, "no usual mistake gives your outputs"),
    ("10", "beam_search", """
        def beam_search(step, beam_size, max_len, alpha=0.0):   # greedy, whatever the beam
            prefix, logp = (), 0.0
            for t in range(max_len + 1):
                row = np.asarray(step([prefix])[0], dtype=float)
                if t == max_len:
                    return list(prefix), logp + row[EOS]
                tok = int(np.argmax(row))
                logp += row[tok]
                if tok == EOS:
                    return list(prefix), logp
                prefix += (tok,)
    """, "that is greedy search"),
    ("10", "beam_search", """
        def length_penalty(length, alpha):
            return ((5 + length) / 6) ** alpha

        def beam_search(step, beam_size, max_len, alpha=0.0):   # no step of EOS only
            alive, done = [((), 0.0)], []
            for t in range(max_len):
                rows = step([p for p, _ in alive])
                cands = sorted(((lp + rows[r][tok], r, tok) for r, (p, lp) in enumerate(alive)
                                for tok in range(len(rows[r]))), key=lambda c: (-c[0], c[1], c[2]))
                cands = [c for c in cands if c[0] > -math.inf]
                for lp, r, tok in cands[:beam_size]:
                    if tok == EOS:
                        lp_y = length_penalty(len(alive[r][0]) + 1, alpha)
                        done.append((lp / lp_y, list(alive[r][0]), lp))
                alive = [(alive[r][0] + (tok,), lp) for lp, r, tok in cands
                         if tok != EOS][:beam_size]
                if not alive:
                    break
            if not done:
                return [], 0.0
            best = max(s for s, _, _ in done)
            return next((toks, lp) for s, toks, lp in done if s == best)
    """, "only EOS may follow"),
    ("11", "layer_norm", """
        def layer_norm(x, gamma, beta, eps=1e-6):        # the variance as E[x^2] - E[x]^2
            mu = x.mean(axis=-1, keepdims=True)
            var = (x ** 2).mean(axis=-1, keepdims=True) - mu ** 2
            return gamma * (x - mu) / np.sqrt(var + eps) + beta
    """, "cancels catastrophically"),
    ("12", "shard_weights", """
        def shard_weights(token_counts, rank, size, average=False):   # divided by size once more
            n = sum(token_counts)
            return [c / n / size * (size if average else 1) for c in token_counts[rank::size]]
    """, "add up to 1"),
    ("12", "shard_weights", """
        def shard_weights(token_counts, rank, size, average=False):   # integer division
            n = sum(token_counts)
            return [c // n for c in token_counts[rank::size]]
    """, "integer division"),
    ("12", "shard_weights", """
        def shard_weights(token_counts, rank, size, average=False):   # the average ignored
            n = sum(token_counts)
            return [c / n for c in token_counts[rank::size]]
    """, "this allreduce averages"),
    ("12", "shard_weights", """
        def shard_weights(token_counts, rank, size):     # the stub's signature changed
            n = sum(token_counts)
            return [c / n for c in token_counts[rank::size]]
    """, "keep the stub's signature"),
    ("12", "ring_allreduce", """
        def ring_allreduce(arrays):                      # one sum, the same object for every rank
            total = arrays[0].copy()
            for a in arrays[1:]:
                total = total + a
            return [total] * len(arrays)
    """, "return one array"),
    ("12", "ring_allreduce", """
        def ring_allreduce(arrays):                      # the mean
            total = sum(a.astype(arrays[0].dtype) for a in arrays)
            return [(total / len(arrays)).astype(arrays[0].dtype) for _ in arrays]
    """, "the mean"),
    ("12", "ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # chunks of n // size
            return 2 * (size - 1) * (n_elements // size) * itemsize
    """, "the first n % size have one more"),
    ("12", "ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # rank 0's chunks, any rank
            sizes = [n_elements // size + (c < n_elements % size) for c in range(size)]
            sent = [-s % size for s in range(size - 1)] + [(1 - s) % size for s in range(size - 1)]
            return itemsize * sum(sizes[c] for c in sent)
    """, "that is what rank 0 sends"),
]


@pytest.mark.parametrize("lesson, name, code, words", WRONG,
                         ids=[f"{w[0]}-{w[1]}-{i}" for i, w in enumerate(WRONG)])
def test_a_learners_wrong_answer_fails_with_a_fitting_hint(lesson, name, code, words, tmp_path,
                                                           capsys):
    result, text = graded(tmp_path, capsys, lesson, name, code)
    assert result == "FAIL" and words in text, text


# (lesson, function, a right answer written otherwise than the solution)
RIGHT = [
    ("07", "sinusoids", """
        def sinusoids(n_positions, d_model):             # a loop over the pairs of columns
            pe = np.empty((n_positions, d_model))
            for i in range(d_model // 2):
                angle = np.arange(n_positions) / 10000 ** (2 * i / d_model)
                pe[:, 2 * i] = np.sin(angle)
                pe[:, 2 * i + 1] = np.cos(angle)
            return pe
    """),
    ("09", "noam_lr", """
        def noam_lr(step, d_model, warmup_steps=4000):   # the branch chosen by an if
            step = step or 1
            if step < warmup_steps:
                return step * warmup_steps ** -1.5 / math.sqrt(d_model)
            return 1 / math.sqrt(d_model * step)
    """),
    ("09", "smoothed_targets", """
        def smoothed_targets(target, vocab_size, eps):   # rows of the identity
            return (1 - eps) * np.eye(vocab_size)[target] + eps / vocab_size
    """),
    ("09", "adam", """
        def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):   # copies, then in place
            b1, b2 = betas
            m = np.array(b1 * m + (1 - b1) * g, dtype=np.float64)
            v = np.array(b2 * v + (1 - b2) * np.square(g), dtype=np.float64)
            new = np.array(p, dtype=np.float64)
            new -= lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
            return new, m, v
    """),
    ("10", "beam_search", """
        def length_penalty(length, alpha):
            return math.pow((5.0 + length) / 6.0, alpha)

        def beam_search(step, beam_size, max_len, alpha=0.0):   # keys (-log p, beam, token)
            alive = [[(), 0.0]]
            best = None
            for t in range(max_len + 1):
                rows = np.asarray(step([tuple(p) for p, _ in alive]), dtype=np.float64)
                keys = []
                for r, (prefix, logp) in enumerate(alive):
                    tokens = [EOS] if t == max_len else range(rows.shape[1])
                    keys += [(-(logp + rows[r, tok]), r, tok) for tok in tokens
                             if rows[r, tok] != -np.inf]
                keys.sort()
                for neg, r, tok in keys[:beam_size]:
                    if tok == EOS:
                        n = len(alive[r][0])
                        score = -neg / length_penalty(n + 1, alpha)
                        if best is None or score > best[0]:
                            best = (score, list(alive[r][0]), -neg)
                alive = [[alive[r][0] + (tok,), -neg] for neg, r, tok in keys
                         if tok != EOS][:beam_size]
                if not alive:
                    break
            return best[1], best[2]
    """),
    ("12", "shard_weights", """
        def shard_weights(token_counts, rank, size, average=False):   # an array
            counts = np.asarray(token_counts, dtype=np.float64)
            return counts[rank::size] / (counts.sum() / size if average else counts.sum())
    """),
    ("12", "ring_allreduce", """
        def ring_allreduce(arrays):                      # each rank's chunks, new arrays
            N = len(arrays)
            ranks = [[c.copy() for c in np.array_split(np.ravel(a), N)] for a in arrays]
            for phase in ("reduce-scatter", "all-gather"):
                for s in range(N - 1):
                    sent = []
                    for r in range(N):
                        c = (r - s) % N if phase == "reduce-scatter" else (r + 1 - s) % N
                        sent.append((r, c, ranks[r][c].copy()))
                    for r, c, data in sent:
                        mine = ranks[(r + 1) % N][c]
                        if phase == "reduce-scatter":
                            np.add(mine, data, out=mine)
                        else:
                            mine[:] = data
            return [np.concatenate(chunks).reshape(np.shape(arrays[0])) for chunks in ranks]
    """),
    ("12", "ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # all chunks but two
            if size == 1:
                return 0
            q, extra = divmod(n_elements, size)
            def chunk(c):
                return q + (1 if c % size < extra else 0)
            return itemsize * (2 * n_elements - chunk(rank + 1) - chunk(rank + 2))
    """),
]


@pytest.mark.parametrize("lesson, name, code", RIGHT, ids=[f"{r[0]}-{r[1]}" for r in RIGHT])
def test_a_right_answer_written_otherwise_passes(lesson, name, code, tmp_path, capsys):
    result, text = graded(tmp_path, capsys, lesson, name, code)
    assert result == "PASS", text


def test_ring_bytes_sent_is_graded_without_allocating_the_array():
    """The reference counts chunk lengths by arithmetic: a case of 10^12 elements costs nothing."""
    bytes_checks = importlib.import_module("checks.12_data_parallel")
    sizes = bytes_checks.chunk_sizes(10 ** 12 + 3, 8)
    assert sizes == [125_000_000_001] * 3 + [125_000_000_000] * 5
    assert bytes_checks.counted_bytes(10, 4, 3, 1) == 4 * (4 + 3 + 3 + 3)   # all but 2, all but 0
