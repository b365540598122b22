"""Lesson 08, answers: byte-pair encoding, the naive learner and the encoder.

Graded by `python lessons/check.py 08 --solutions`; your own go in lessons/exercises/08_bpe.py.

The answers to the lesson's questions, explained, are in lessons/answers/08_bpe.md.
"""


def merge(ids, pair, new_id):
    """A new list: every occurrence of `pair` in `ids`, scanned left to right,
    replaced by new_id."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2                                               # skip both: [5, 5, 5] -> [6, 5]
        else:
            out.append(ids[i])
            i += 1
    return out


def learn_merges(word_counts, num_merges, min_frequency=2, offset=3):
    """Each step, count every adjacent pair (weighted by its word's count), merge the most frequent
    one, ties to the smallest (left, right); merge k makes id offset + 256 + k.
    O(merges x corpus)."""
    # byte b has id b + offset
    words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]
    freqs = list(word_counts.values())
    merges = []
    for k in range(num_merges):
        counts = {}
        for w, f in zip(words, freqs):
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + f
        if not counts:
            break                                                # every word is one token
        best = min(counts, key=lambda p: (-counts[p], p))        # most frequent, then smallest
        if counts[best] < max(1, min_frequency):
            break
        words = [merge(w, best, offset + 256 + k) for w in words]
        merges.append(best)
    return merges


def encode(word, merges, offset=3):
    """The word's UTF-8 bytes as ids, then the learned merge of the lowest rank, again and again,
    until no learned pair is left: exactly what training did to this word."""
    rank = {pair: k for k, pair in enumerate(merges)}
    ids = [b + offset for b in word.encode("utf-8")]
    while len(ids) > 1:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, len(merges)))
        if pair not in rank:
            break
        ids = merge(ids, pair, offset + 256 + rank[pair])
    return ids
