"""Lesson 10, decoding: length_penalty against search.length_penalty, and beam_search over a step()
function against search.beam_search (or the brute-force best of every output, for a beam too wide to
prune anything). The cases: lesson 10's tables, a tie, random models, and random models searched
(from fixed seeds) so that each catalogued mistake of beam_like finds another output than the rules
do. A wrong search gets the hint of the mistake that finds what it found on every case."""
import contextlib
import functools
import itertools
import math

import numpy as np

import minitransformer as mt
from minitransformer import config, search

EOS, FIRST = 2, 3      # as in lesson 10: 0 <pad> and 1 <s> are never emitted, words are 3, 4, ...


def check_length_penalty(fn, g):
    for alpha in (0.0, 0.6, 1.0, 2.0):
        g.start(f"alpha={alpha}")
        lengths = list(range(1, 13))
        ref = [search.length_penalty(n, alpha) for n in lengths]
        g.cmp("lp(1 .. 12)", [g.call(fn, n, alpha) for n in lengths], ref,
              known=length_penalty_mistakes(lengths, alpha))


def check_beam_search(fn, g):
    cases, found = beam_search_cases(), []                  # found: your tokens on each case so far
    g.error_hint = ("where no output finished: at max_len only EOS may follow, so every search "
                    "finishes at least one")
    for case, step, V, k, max_len, alpha in cases:
        g.start(case)
        tokens, log_prob = run_search(fn, g, step, V, k, max_len, alpha)
        found.append(tokens)
        wide = k >= (V - FIRST) ** max_len             # a beam that prunes nothing: the best of all
        ref = brute_force(step, V, max_len, alpha) if wide else package_beam_search(step, V, k,
                                                                                    max_len, alpha)
        if tokens != ref[0]:
            failed = len(found) - 1
            for later in cases[len(found):]:          # your search on the other cases, for the hint
                try:
                    found.append(run_search(fn, g, *later[1:])[0])
                except Exception:                    # (Fail and NotDone too)
                    found.append(None)
            g.fail(f"found {tokens}, expected {ref[0]} (log p {ref[1]:.4f}); "
                   f"{beam_search_hint(found, cases, failed)}")
        g.cmp("log_prob", log_prob, ref[1], tol=1e-9,
              known=log_prob_mistakes(ref[1], step, tokens, alpha))


def run_search(fn, g, step, V, k, max_len, alpha):
    """Your (tokens, log_prob) on one case; step() refuses a prefix the rules never extend."""
    def watched(prefixes):
        for p in prefixes:
            if len(p) > max_len or any(not FIRST <= t < V for t in p):
                g.fail(f"step() got the prefix {tuple(p)}: a prefix holds at most max_len words "
                       f"(ids {FIRST} and up), never EOS ({EOS}); a candidate of log p -inf drops "
                       f"out")
        return step(prefixes)
    tokens, log_prob = g.unpack(g.call(fn, watched, k, max_len, alpha=alpha),
                                ["tokens", "log_prob"])
    return g.ids(tokens, "tokens"), log_prob


@functools.cache
def beam_search_cases():
    """(what, step, V, beam size, max_len, alpha): the lesson's tables, a tie, random models, one
    beam that prunes nothing, and for each mistake of MISTAKES a random model where it finds another
    output (searched once a process: every step() is a pure function of its prefixes)."""
    cases = [("lesson 10's greedy trap, beam 2", table_step(greedy_trap, 6), 6, 2, 5, 0.0),
             ("longer_is_better, beam 1, alpha 2", table_step(longer_is_better, 5), 5, 1, 8, 2.0),
             ("longer_is_better, beam 1, alpha 0", table_step(longer_is_better, 5), 5, 1, 8, 0.0),
             ("a tie: 3 and 4 equally likely, then EOS and 3 5 equally likely, beam 1",
              table_step(tie, 6), 6, 1, 3, 0.0),
             ("a tie across beams: 5 ranks above 4, and 5 6, 5 7, 4 6, 4 7 are equally likely, "
              "beam 2", table_step(tie_across_beams, 9), 9, 2, 2, 0.0)]
    for i, (V, max_len, k,
            alpha) in enumerate([(7, 3, 1, 0.0), (7, 3, 2, 0.6), (8, 4, 3, 0.6), (6, 4, 2, 1.5)]):
        cases.append(
            (f"a random model, {V - FIRST} words, max_len {max_len}, beam {k}, alpha {alpha}",
             random_step(V, i), V, k, max_len, alpha))
    cases.append(("beam 27 over 3 words, max_len 3: nothing pruned, so the best of all 40 outputs",
                  random_step(6, 99), 6, 27, 3, 0.6))
    V, k, max_len, alpha = 7, 2, 4, 1.0
    for name, (_, mistake) in MISTAKES.items():
        seed = adversarial_seed(mistake, V, k, max_len, alpha)
        if seed is not None:                        # (a random model never ties: the tie case does)
            cases.append((f"a random model (seed {seed}, {V - FIRST} words, max_len {max_len}, "
                          f"beam {k}, alpha {alpha}) where {name} finds another "
                          f"output", random_step(V, seed), V, k,
                          max_len, alpha))
    return cases


def adversarial_seed(mistake, V, k, max_len, alpha, tries=500):
    """The first seed whose random model makes `mistake` find another output than
    the rules, or None."""
    return next((s for s in range(tries) if mistake(random_step(V, s), V, k, max_len, alpha)[0] !=
                 beam_like(random_step(V, s), V, k, max_len, alpha)[0]), None)


# --------------------------------------------------- models: step(prefixes) -> next-token log-probs
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
    """step() of a random language model over EOS and the words 3 .. V-1: log-probs, a
    function of the prefix."""
    def step(prefixes):
        rows = np.full((len(prefixes), V), -np.inf)
        for row, prefix in enumerate(prefixes):
            z = 1.5 * np.random.default_rng([seed, len(prefix),
                                             *map(int, prefix)]).standard_normal(V - EOS)
            rows[row, EOS:] = z - z.max() - np.log(np.exp(z - z.max()).sum())
        return rows
    return step


def greedy_trap(prefix):  # lesson 10's table
    return {(): {3: 0.5, 4: 0.4, EOS: 0.1}, (3,): {3: 0.3, 4: 0.3, 5: 0.3, EOS: 0.1},
            (4,): {5: 0.9, EOS: 0.1}}.get(prefix, {EOS: 1.0})


def longer_is_better(prefix):  # lesson 10's table
    if not prefix:
        return {EOS: 0.5, 3: 0.3, 4: 0.2}
    return {3: 0.97, 4: 0.02, EOS: 0.01} if len(prefix) < 4 else {EOS: 0.9, 3: 0.05, 4: 0.05}


def tie(prefix):  # the tie rule decides every step: the answer is [3], log p = log 0.25
    return {(): {3: 0.5, 4: 0.5}, (3,): {EOS: 0.5, 5: 0.5}}.get(prefix, {EOS: 1.0})


def tie_across_beams(prefix):
    """5 ranks above 4, then 5 6, 5 7, 4 6 and 4 7 tie (powers of 2: exactly): 5 6 and 5 7, of the
    better beam, stay alive and the answer is [5, 7]; the lower token first keeps 5 6 and 4 6
    ([4, 6]), the smaller prefix first 4 6 and 4 7 ([4, 7])."""
    return {(): {5: 0.5, 4: 0.25, 3: 0.125, EOS: 0.125},
            (5,): {6: 0.25, 7: 0.25, 3: 0.125, 4: 0.125, 8: 0.125, EOS: 0.125},
            (4,): {6: 0.5, 7: 0.5}, (5, 6): {EOS: 0.5, 3: 0.5}, (5, 7): {EOS: 0.625, 3: 0.375},
            (4, 6): {EOS: 0.75, 3: 0.25}, (4, 7): {EOS: 0.875, 3: 0.125}}.get(prefix, {EOS: 1.0})


# -------------------------------------------------------------- the references
class StepModel:
    """A step() function dressed as the model search.beam_search expects (ids 0
    <pad>, 1 <s>, 2 </s>)."""

    def __init__(self, step, V, max_len):
        self.step, self.V = step, V
        self.config = config.TransformerConfig.tiny(vocab_size=V, max_len=max_len + 2)

    @contextlib.contextmanager
    def inference_mode(self):
        yield self

    def encode(self, src, src_mask=None):
        return mt.tensor(np.zeros((src.shape[0], 1, 1)))

    def init_cache(self, capacity=0):
        return None

    def decode(self, tgt_in, memory, src_mask=None, tgt_mask=None, cache=None):
        prefixes = [tuple(int(t) for t in row[1:]) for row in mt.to_numpy(tgt_in)]
        # dead beams (log p -inf)
        real = [i for i, p in enumerate(prefixes) if min(p, default=FIRST) >= FIRST]
        logits = np.full((len(prefixes), 1, self.V), -np.inf)               # may hold <pad> or <s>:
        logits[:, 0, EOS:] = 0.0                                            # step() never sees them
        if real:
            logits[real, 0] = self.step([prefixes[i] for i in real])
        return mt.tensor(logits)


def package_beam_search(step, V, beam_size, max_len, alpha):
    """The package's beam_search on step(): (tokens, log_prob) of the best output."""
    model = StepModel(step, V, max_len)
    settings = config.SearchConfig(beam_size=beam_size, alpha=alpha, max_len_a=0, max_len_b=max_len)
    h = search.beam_search(model, [[FIRST]], settings, use_cache=False)[0][0]
    return list(h.tokens), h.log_prob


def brute_force(step, V, max_len, alpha):
    """The best of every output of at most max_len words, by log p / lp(|Y|) (a tie: the first in
    order of length, then of ids): (tokens, log_prob)."""
    best = None
    for n in range(max_len + 1):
        for tokens in itertools.product(range(FIRST, V), repeat=n):
            rows = step([tokens[:i] for i in range(n + 1)])
            logp = sum(rows[i, tokens[i]] for i in range(n)) + rows[n, EOS]
            score = logp / search.length_penalty(n + 1, alpha)
            if best is None or score > best[0]:
                best = (score, list(tokens), float(logp))
    return best[1], best[2]


def beam_like(step, V, k, max_len, alpha, keep=None, alive_from=None, finish_from=None, count_eos=1,
              by_score=True, stop=None, ties="beam", last_wins=False, force_eos=True):
    """The exercise's beam search, plain, or with one mistake: keep `keep` prefixes alive, not k;
    take them from the first `alive_from` candidates only; finish the EOS candidates among the first
    `finish_from`, not k; score with lp(n + count_eos); rank finished outputs by log p
    (by_score False); stop at the "first" finished output or once "k" are finished; rank a tie the
    "high"er beam and token first, or the lower "token" first, or the smaller "prefix" first; let
    the last of equal scores win; stop at max_len without the step of EOS only (force_eos False).
    (tokens, log_prob), (None, None) where nothing finished."""
    keep, finish_from = keep or k, finish_from or k
    alive, finished = [((), 0.0)], []                      # (prefix, log p); (score, tokens, log p)
    order = {"beam": lambda c: (c[1], c[2]), "high": lambda c: (-c[1], -c[2]),
             "token": lambda c: (c[2], c[1]),
             "prefix": lambda c: (alive[c[1]][0], c[2])}[ties]
    for t in range(max_len + 1 if force_eos else max_len):
        rows = np.asarray(step([p for p, _ in alive]))
        cands = [(logp + rows[r, tok], r, tok) for r, (_, logp) in enumerate(alive)
                 for tok in range(V)
                 if rows[r, tok] > -np.inf and (t < max_len or tok == EOS)]
        cands.sort(key=lambda c: (-c[0], *order(c)))
        for logp, r, tok in cands[:finish_from]:
            if tok == EOS:
                n = len(alive[r][0])
                lp = search.length_penalty(n + count_eos, alpha) if by_score else 1.0
                finished.append((logp / lp, list(alive[r][0]), logp))
        alive = [(alive[r][0] + (tok,), logp) for logp, r, tok in cands[:alive_from]
                 if tok != EOS][:keep]
        if not alive or stop == "first" and finished or stop == "k" and len(finished) >= k:
            break
    if not finished:
        return None, None
    best = max(s for s, _, _ in finished)
    _, tokens, logp = [h for h in finished if h[0] == best][-1 if last_wins else 0]
    return tokens, logp


# -------------------------------------------------------------- known mistakes, and their hints
def length_penalty_mistakes(lengths, alpha):
    return [([((5 + n - 1) / 6) ** alpha for n in lengths], "|Y| counts the final EOS: lp(1) = 1"),
            ([((5 + n + 1) / 6) ** alpha for n in lengths],
             "`length` is |Y| and already counts the EOS: lp(1) = 1, add nothing"),
            ([(5 + n) / 6 ** alpha for n in lengths],
             "** binds tighter than /: write ((5 + |Y|) / 6) ** alpha"),
            ([(5 + n) ** alpha / 6 for n in lengths],
             "the power applies to the whole (5 + |Y|) / 6"),
            ([alpha * (5 + n) / 6 for n in lengths],
             "alpha is the power of (5 + |Y|) / 6, not a factor")]


def log_prob_mistakes(log_prob, step, tokens, alpha):
    lp = search.length_penalty(len(tokens) + 1, alpha)
    return [(log_prob - step([tuple(tokens)])[0, EOS],
             "add the log-probability of the final EOS too"),
            (log_prob / lp, "return log p, not the score log p / lp(|Y|)")]


MISTAKES = {   # what a wrong search does: (hint, the mistake as a search)
    "a search with no pruning": (
        "that is the best of ALL outputs: beam search prunes, keeping only the k best candidates "
        "alive", lambda step, V, k, max_len, alpha: brute_force(step, V, max_len, alpha)),
    "a beam of k + 1": (
        "that is what k + 1 alive prefixes find: keep exactly k = beam_size alive",
        lambda step, V, k, *rest: beam_like(step, V, k, *rest, keep=k + 1)),
    "a beam of 2k": (
        "that is what 2k alive prefixes find: of the candidates, only the k best not ending in EOS "
        "go on", lambda step, V, k, *rest: beam_like(step, V, k, *rest, keep=2 * k)),
    "taking the alive prefixes from the first k candidates": (
        "the EOS candidates took places in the beam: the k best candidates NOT ending in EOS go "
        "on, wherever they rank",
        lambda step, V, k, *rest: beam_like(step, V, k, *rest, alive_from=k)),
    "finishing every EOS candidate": (
        "only the EOS candidates ranked among the first k finish",
        lambda step, V, k, *rest: beam_like(step, V, k, *rest, finish_from=k * V)),
    "lp(n) for n words": (
        "|Y| counts the final EOS: an output of n words scores log p / lp(n + 1)",
        lambda *case: beam_like(*case, count_eos=0)),
    "lp(n + 2) for n words": (
        "|Y| = n + 1, the n words and ONE EOS: an output of n words scores log p / lp(n + 1)",
        lambda *case: beam_like(*case, count_eos=2)),
    "stopping at the first finished output": (
        "a finished output does not end the search: go on until no prefix is alive (a longer "
        "output may still score better)",
        lambda *case: beam_like(*case, stop="first")),
    "stopping once k outputs are finished": (
        "k finished outputs do not end the search: go on until no prefix is alive (a longer output "
        "may still score better)",
        lambda *case: beam_like(*case, stop="k")),
    "ranking finished outputs by log p": (
        "rank finished outputs by score = log p / lp(|Y|), with |Y| counting the EOS",
        lambda *case: beam_like(*case, by_score=False)),
    "one alive prefix, whatever k": (
        "only one prefix stayed alive: the k best candidates that do not end in EOS go on",
        lambda step, V, k, *rest: beam_like(step, V, k, *rest, keep=1)),
    "greedy search": (
        "that is greedy search: one prefix, ended at its first EOS; beam search keeps k prefixes "
        "alive and goes on until none is",
        lambda step, V, k, *rest: beam_like(step, V, 1, *rest, stop="first")),
    "a beam of 1": (
        "that is what a beam of 1 finds: keep the k best candidates alive",
        lambda step, V, k, *rest: beam_like(step, V, 1, *rest)),
    "a tie to the higher beam and token": (
        "a tie: candidates of equal log p rank by lower beam (the better prefix), then lower token",
        lambda *case: beam_like(*case, ties="high")),
    "a tie to the lower token, then the lower beam": (
        "a tie: candidates of equal log p rank by beam first (the better prefix), then by token, "
        "not token by token across the beams",
        lambda *case: beam_like(*case, ties="token")),
    "a tie to the smaller prefix": (
        "a tie: candidates of equal log p rank by their prefix's rank in the beam (its log p), not "
        "by the prefix's ids",
        lambda *case: beam_like(*case, ties="prefix")),
    "no step of EOS only at max_len": (
        "a prefix of max_len words still ends: at the step after max_len, only EOS may follow, and "
        "those candidates finish as any others",
        lambda *case: beam_like(*case, force_eos=False)),
    "a tie to the last finished output": (
        "a tie: of finished outputs with equal scores, the first found wins (max() keeps the "
        "first)",
        lambda *case: beam_like(*case, last_wins=True)),
}


def beam_search_hint(found, cases, failed):
    """The hint of the mistake that finds what your search found on case `failed` AND on every other
    case where yours returned (a mistake is named only when the cases confirm it); else what differs
    (found[i]: your tokens on cases[i], None where it raised)."""
    if len(found[failed]) > cases[failed][4] or EOS in found[failed]:
        return "tokens leave out the final EOS and hold at most max_len words (then EOS is forced)"
    ran = [(mine, case) for mine, case in zip(found, cases) if mine is not None]
    for name, (hint, mistake) in MISTAKES.items():
        theirs = [mistake(*case[1:])[0] for _, case in ran]    # None: that mistake finishes nothing
        if all(wrong is None or mine == wrong for (mine, _), wrong in zip(ran, theirs)) and any(
                wrong is not None and wrong == mine != reference(case)[0]
                for (mine, case), wrong in zip(ran, theirs)):
            return hint
    right = reference(cases[failed])[0]
    mine = found[failed]
    i = next((i for i, (a, b) in enumerate(zip(mine, right)) if a != b), min(len(mine), len(right)))
    where = (f"they part at word {i + 1}: yours {mine[i] if i < len(mine) else 'EOS'}, expected "
             f"{right[i] if i < len(right) else 'EOS'}")
    wrong = sum(mine != reference(case)[0] for mine, case in ran)
    return (f"{where}; yours differs on {wrong} of the {len(ran)} cases, and no usual mistake "
            f"gives your outputs on all of them: follow the rules of lesson 10's beam search "
            f"(which candidates finish, which k stay alive, the tie rule, when the search stops)")


@functools.cache
def reference(case):
    """The right (tokens, log_prob) of a case: the best of all outputs where the
    beam prunes nothing."""
    _, step, V, k, max_len, alpha = case
    if k >= (V - FIRST) ** max_len:
        return brute_force(step, V, max_len, alpha)
    return package_beam_search(step, V, k, max_len, alpha)


ITEMS = [("length_penalty", check_length_penalty), ("beam_search", check_beam_search)]
