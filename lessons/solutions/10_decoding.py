"""Lesson 10, answers: the length penalty and beam search, on any next-token function.

Graded by `python lessons/check.py 10 --solutions`; your own go in lessons/exercises/10_decoding.py.

The answers to the lesson's questions, explained, are in lessons/answers/10_decoding.md.
"""
import math

EOS = 2   # id 2, </s>, ends an output (0 <pad> and 1 <s> are never emitted)


def length_penalty(length, alpha):
    """lp(|Y|) = ((5 + |Y|) / 6) ** alpha (GNMT), |Y| counting the final EOS: lp(1) = 1."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(step, beam_size, max_len, alpha=0.0):
    """The best output (tokens without EOS, its log p) by score = log p / lp(|Y|), found by beam
    search.

    Each step ranks every extension of every alive prefix by summed log p (a stable sort: a tie goes
    to the better prefix, then the lower token); the EOS candidates among the first k finish, and
    the k best candidates that do not end in EOS stay alive. At max_len, only EOS. Of equal scores,
    the first found.
    """
    alive, finished = [((), 0.0)], []                     # (prefix, log p); (score, tokens, log p)
    for t in range(max_len + 1):
        rows = step([prefix for prefix, _ in alive])      # (len(alive), V) log p of the next token
        candidates = sorted(((logp + rows[r][token], prefix, token)
                             for r, (prefix, logp) in enumerate(alive)
                             for token in range(len(rows[r]))
                             if t < max_len or token == EOS),          # at max_len, EOS is forced
                            key=lambda c: -c[0])
        candidates = [c for c in candidates if c[0] > -math.inf]    # probability 0: not a candidate
        for logp, prefix, token in candidates[:beam_size]:
            if token == EOS:                                    # |Y| = len(prefix) + 1, EOS counted
                finished.append((logp / length_penalty(len(prefix) + 1, alpha), list(prefix), logp))
        alive = [(prefix + (token,), logp)
                 for logp, prefix, token in candidates if token != EOS][:beam_size]
        if not alive:
            break
    _, tokens, logp = max(finished, key=lambda h: h[0])     # max() keeps the first of equal scores
    return tokens, logp
