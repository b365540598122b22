"""Lesson 10, answers: the length penalty and beam search, on any next-token function.

Graded by `python lessons/check.py 10 --solutions`; your own go in lessons/exercises/10_decoding.py.

Answers to the lesson's questions:
1. lp(7) with alpha = 1 is (5 + 7) / 6 = 2.
2. A beam of 3 also returns 4 5 (p = 0.36): both 3 and 4 survive the first step, as with a beam of 2.
3. 51 positions with the cache, one per step; 1 + 2 + ... + 51 = 1326 by recomputation, 26 times more.
4. Yes: log 0.5 = -0.69 beats every longer output (3 3 3 3 </s> has log p = -1.40), and without a
   length penalty nothing makes up for that.
5. Yes. Step 0: 3 (0.5), 4 (0.45); after 3: 5, 4, 3 (0.34, 0.33, 0.33), then </s>; after 4: 5 or 3
   (0.5 each), then </s> 0.6 or 3 0.4. Greedy takes 3 5 </s>: 0.17. A beam of 2 keeps 4 5 and 4 3
   (0.225 each), which prune every extension of 3 (0.17 at most), and ends with 4 3 </s>: 0.135. A wider
   beam finds better *prefixes*, not necessarily better outputs: pruning can drop greedy's path.
6. Counting </s>: -1.0 / lp(2) = -0.857 against -1.31 / lp(4) = -0.873: the short one wins. Leaving it
   out: -1.0 / lp(1) = -1.0 against -1.31 / lp(3) = -0.983: the long one wins. The convention decides.
7. With alpha > 0 a longer output is divided by a larger lp, which raises its (negative) score: a prefix
   judged at the next length may still win at a later one (longer_is_better). With alpha = 0, lp = 1
   and log p only falls as a prefix grows: its score now bounds every continuation, and the two stops
   agree.
"""
import math

EOS = 2   # id 2, </s>, ends an output (0 <pad> and 1 <s> are never emitted)


def length_penalty(length, alpha):
    """lp(|Y|) = ((5 + |Y|) / 6) ** alpha (GNMT), |Y| counting the final EOS: lp(1) = 1."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(step, beam_size, max_len, alpha=0.0):
    """The best output (tokens without EOS, its log p) by score = log p / lp(|Y|), found by beam search.

    Each step ranks every extension of every alive prefix by summed log p (a stable sort: a tie goes to
    the better prefix, then the lower token); the EOS candidates among the first k finish, and the k best
    candidates that do not end in EOS stay alive. At max_len, only EOS. Of equal scores, the first found.
    """
    alive, finished = [((), 0.0)], []                     # (prefix, log p); (score, tokens, log p)
    for t in range(max_len + 1):
        rows = step([prefix for prefix, _ in alive])      # (len(alive), V) log p of the next token
        candidates = sorted(((logp + rows[r][token], prefix, token)
                             for r, (prefix, logp) in enumerate(alive) for token in range(len(rows[r]))
                             if t < max_len or token == EOS),          # at max_len, EOS is forced
                            key=lambda c: -c[0])
        candidates = [c for c in candidates if c[0] > -math.inf]        # probability 0: not a candidate
        for logp, prefix, token in candidates[:beam_size]:
            if token == EOS:                                            # |Y| = len(prefix) + 1, EOS counted
                finished.append((logp / length_penalty(len(prefix) + 1, alpha), list(prefix), logp))
        alive = [(prefix + (token,), logp) for logp, prefix, token in candidates if token != EOS][:beam_size]
        if not alive:
            break
    _, tokens, logp = max(finished, key=lambda h: h[0])     # max() keeps the first of equal scores
    return tokens, logp


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this), with the lesson's ids: </s> is 2."""
    def table_step(table):
        return lambda prefixes: [[math.log(table(p).get(t, 0)) if table(p).get(t, 0) else -math.inf
                                  for t in range(6)] for p in prefixes]
    greedy_trap = {(): {3: 0.5, 4: 0.4, EOS: 0.1}, (3,): {3: 0.3, 4: 0.3, 5: 0.3, EOS: 0.1}, (4,): {5: 0.9, EOS: 0.1}}
    def longer_is_better(p):
        return {EOS: 0.5, 3: 0.3, 4: 0.2} if not p else {3: 0.97, 4: 0.02, EOS: 0.01} if len(p) < 4 else {EOS: 0.9}
    assert length_penalty(7, 1.0) == 2.0                                                       # 1
    tokens, logp = beam_search(table_step(lambda p: greedy_trap.get(p, {EOS: 1.0})), 3, 5)       # 2
    assert tokens == [4, 5] and math.isclose(math.exp(logp), 0.36)
    assert (51, sum(range(1, 52))) == (51, 1326)                                               # 3
    assert beam_search(table_step(longer_is_better), 2, 8)[0] == []                            # 4
    def beam_beats_greedy(p):                                                                  # 5
        table = {(): {3: 0.5, 4: 0.45, EOS: 0.05}, (3,): {5: 0.34, 4: 0.33, 3: 0.33}, (4,): {5: 0.5, 3: 0.5},
                 (4, 5): {EOS: 0.6, 3: 0.4}, (4, 3): {EOS: 0.6, 3: 0.4}}
        return table.get(p, {EOS: 1.0})
    (greedy, g_logp), (beam, b_logp) = (beam_search(table_step(beam_beats_greedy), k, 8) for k in (1, 2))
    assert greedy == [3, 5] and beam == [4, 3] and b_logp < g_logp
    lp = length_penalty                                                                           # 6
    assert -1.0 / lp(2, 1.0) > -1.31 / lp(4, 1.0) and -1.0 / lp(1, 1.0) < -1.31 / lp(3, 1.0)
