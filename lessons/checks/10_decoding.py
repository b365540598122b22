"""Lesson 10, decoding: length_penalty against search.length_penalty, and beam_search over a step()
function (lesson 10's tables and random models) against search.beam_search, or against the brute-force
best of every output when the beam is wide enough to prune nothing."""
import contextlib
import itertools
import math

import numpy as np

import minitransformer as mt
from minitransformer import config, search

EOS = 0


def check_length_penalty(fn, g):
    for alpha in (0.0, 0.6, 1.0, 2.0):
        g.start(f"alpha={alpha}")
        lengths = list(range(1, 13))
        ref = [search.length_penalty(n, alpha) for n in lengths]
        g.cmp("lp(1 .. 12)", [g.call(fn, n, alpha) for n in lengths], ref,
              known=length_penalty_mistakes(lengths, alpha))


def check_beam_search(fn, g):
    for case, step, V, k, max_len, alpha in beam_search_cases():
        g.start(case)

        def watched(prefixes, step=step, max_len=max_len, V=V):
            for p in prefixes:
                if len(p) > max_len or EOS in p or any(not 0 <= t < V for t in p):
                    g.fail(f"step() got the prefix {tuple(p)}: a prefix holds at most max_len tokens, never EOS")
            return step(prefixes)
        got = g.call(fn, watched, k, max_len, alpha=alpha)
        tokens, log_prob = g.unpack(got, ["tokens", "log_prob"])
        tokens = g.ids(tokens, "tokens")
        wide = k >= V ** max_len                             # a beam that prunes nothing: the best of all
        ref = brute_force(step, V, max_len, alpha) if wide else package_beam_search(step, V, k, max_len, alpha)
        if tokens != ref[0]:
            hint = beam_search_hint(tokens, step, V, k, max_len, alpha)
            g.fail(f"found {tokens}, expected {ref[0]} (log p {ref[1]:.4f}); {hint}")
        g.cmp("log_prob", log_prob, ref[1], tol=1e-9, known=log_prob_mistakes(ref[1], step, tokens))


def beam_search_cases():
    """(what, step, V, beam size, max_len, alpha): two tables, random models, and one beam that prunes nothing."""
    cases = [("lesson 10's greedy trap, beam 2", table_step(greedy_trap, 4), 4, 2, 5, 0.0),
             ("longer_is_better, beam 1, alpha 2", table_step(longer_is_better, 3), 3, 1, 8, 2.0),
             ("longer_is_better, beam 1, alpha 0", table_step(longer_is_better, 3), 3, 1, 8, 0.0)]
    for i, (V, max_len, k, alpha) in enumerate([(4, 3, 1, 0.0), (4, 3, 2, 0.6), (5, 4, 3, 0.6), (3, 4, 2, 1.5),
                                               (5, 3, 2, 0.0), (4, 4, 4, 0.6)]):
        cases.append((f"a random model, {V} tokens, max_len {max_len}, beam {k}, alpha {alpha}",
                      random_step(V, i), V, k, max_len, alpha))
    cases.append(("beam 27 over 3 tokens, max_len 3: nothing pruned, so the best of all 15 outputs",
                  random_step(3, 99), 3, 27, 3, 0.6))
    return cases


# -------------------------------------------------------------- models: step(prefixes) -> next-token log-probs
def table_step(table, V):
    """step() of a table {prefix: {token: probability}}; unlisted tokens have probability 0."""
    def step(prefixes):
        out = np.full((len(prefixes), V), -np.inf)
        for row, prefix in enumerate(prefixes):
            for token, p in table(tuple(prefix)).items():
                out[row, token] = math.log(p)
        return out
    return step


def random_step(V, seed):
    """step() of a random language model: the next-token log-probs are a function of the prefix."""
    def step(prefixes):
        rows = []
        for prefix in prefixes:
            z = 1.5 * np.random.default_rng([seed, len(prefix), *map(int, prefix)]).standard_normal(V)
            rows.append(z - z.max() - np.log(np.exp(z - z.max()).sum()))
        return np.array(rows)
    return step


def greedy_trap(prefix):  # lesson 10's table, EOS 0 and words 1, 2, 3 for its 2, 3, 4, 5
    return {(): {1: 0.5, 2: 0.4, 0: 0.1}, (1,): {1: 0.3, 2: 0.3, 3: 0.3, 0: 0.1},
            (2,): {3: 0.9, 0: 0.1}}.get(prefix, {0: 1.0})


def longer_is_better(prefix):
    if not prefix:
        return {0: 0.5, 1: 0.3, 2: 0.2}
    return {1: 0.97, 2: 0.02, 0: 0.01} if len(prefix) < 4 else {0: 0.9, 1: 0.05, 2: 0.05}


# -------------------------------------------------------------- the references
class StepModel:
    """A step() function dressed as the model search.beam_search expects: ids 0 <pad>, 1 <s>, 2 </s>,
    and token j of step() is id j + 2 (so EOS 0 is </s>)."""

    def __init__(self, step, V, max_len):
        self.step, self.V = step, V
        self.config = config.TransformerConfig.tiny(vocab_size=V + 2, max_len=max_len + 2)

    @contextlib.contextmanager
    def inference_mode(self):
        yield self

    def encode(self, src, src_mask=None):
        return mt.tensor(np.zeros((src.shape[0], 1, 1)))

    def init_cache(self, capacity=0):
        return None

    def decode(self, tgt_in, memory, src_mask=None, tgt_mask=None, cache=None):
        prefixes = [tuple(int(t) - 2 for t in row[1:]) for row in mt.to_numpy(tgt_in)]
        real = [i for i, p in enumerate(prefixes) if min(p, default=0) >= 0]   # dead beams (log p -inf)
        logits = np.full((len(prefixes), 1, self.V + 2), -np.inf)           # may hold <pad> or <s>:
        logits[:, 0, 2:] = 0.0                                               # step() never sees them
        if real:
            logits[real, 0, 2:] = self.step([prefixes[i] for i in real])
        return mt.tensor(logits)


def package_beam_search(step, V, beam_size, max_len, alpha):
    """The package's beam_search on step(): (tokens, log_prob) of the best output."""
    model = StepModel(step, V, max_len)
    settings = config.SearchConfig(beam_size=beam_size, alpha=alpha, max_len_a=0, max_len_b=max_len)
    h = search.beam_search(model, [[3]], settings, use_cache=False)[0][0]
    return [t - 2 for t in h.tokens], h.log_prob


def brute_force(step, V, max_len, alpha):
    """The best of every output of at most max_len tokens, by log p / lp(|Y|): (tokens, log_prob)."""
    best = None
    for n in range(max_len + 1):
        for tokens in itertools.product(range(1, V), repeat=n):
            rows = step([tokens[:i] for i in range(n + 1)])
            logp = sum(rows[i, tokens[i]] for i in range(n)) + rows[n, EOS]
            score = logp / search.length_penalty(n + 1, alpha)
            if best is None or score > best[0]:
                best = (score, list(tokens), float(logp))
    return best[1], best[2]


# -------------------------------------------------------------- known mistakes, and their hints
def length_penalty_mistakes(lengths, alpha):
    return [([((5 + n - 1) / 6) ** alpha for n in lengths], "|Y| counts the final EOS: lp(1) = 1")]


def log_prob_mistakes(log_prob, step, tokens):
    return [(log_prob - step([tuple(tokens)])[0, EOS], "add the log-probability of the final EOS too")]


def beam_search_hint(tokens, step, V, k, max_len, alpha):
    """Why beam search found `tokens`: what it left out, or which simpler search finds them."""
    if len(tokens) > max_len or EOS in tokens:
        return "tokens leave out the final EOS and hold at most max_len tokens (then EOS is forced)"
    if alpha > 0 and tokens == package_beam_search(step, V, k, max_len, 0.0)[0]:
        return "rank finished outputs by score = log p / lp(|Y|), with |Y| counting the EOS"
    if k > 1 and tokens == package_beam_search(step, V, 1, max_len, alpha)[0]:
        return "that is what a beam of 1 finds: keep the k best candidates alive"
    return ("follow the rules of the docstring: only EOS candidates ranked among the first k finish, "
            "and the k best candidates that do not end in EOS go on")


ITEMS = [("length_penalty", check_length_penalty), ("beam_search", check_beam_search)]
