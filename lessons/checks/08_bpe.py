"""Lesson 08, bpe: merge against bpe_learn.merge, learn_merges against bpe_learn.learn_merges_naive
(ties, min_frequency, word counts, a syllable corpus), and encode against the learned merges applied
in rank order to the UTF-8 bytes, with words where two merges compete; all exactly."""
import numpy as np

from minitransformer.text import bpe_learn


def check_merge(fn, g):
    rng = np.random.default_rng(80)
    long = rng.integers(0, 4, 60).tolist()
    for ids, pair, new in (([1, 2, 3, 1, 2], (1, 2), 4), ([5, 5, 5], (5, 5), 6),
                           ([5, 5, 5, 5], (5, 5), 6), ([], (1, 2), 3), ([7], (7, 7), 9),
                           (long, (1, 2), 4), (long, (3, 3), 4),
                           ([31, 4, 1, 41, 1, 4], (1, 4), 300)):
        g.start(f"merge({ids if len(ids) < 10 else 'a list of 60 ids'}, {pair}, {new})")
        before = list(ids)
        got = g.call(fn, ids, pair, new)
        if ids != before:
            g.fail("ids was changed: build and return a new list")
        if got is ids:
            g.fail(
                "it returned ids itself: build and return a new list, even with nothing to merge")
        ref = bpe_learn.merge(ids, pair, new)
        first = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair), None)
        once = ids[:first] + [new] + ids[first + 2:] if first is not None else ids
        text = " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(new)).split()
        got = g.ids(got)
        g.same("it", got, ref,
               hint=merge_hint(got, ref, ids, pair, new, once, [int(t) for t in text]))


def merge_hint(got, ref, ids, pair, new, once, as_text):
    """The mistake `got` is, where it is one; else where it first differs from `ref`."""
    if got == once:
        return "replace EVERY occurrence of the pair, not the first"
    if got == as_text:
        return (f"compare whole ids, not their digits: {' '.join(map(str, ids))!r} holds "
                f"'{pair[0]} {pair[1]}' across ids")
    if got == merge_overlapping(ids, pair, new):
        return MERGE_HINT
    if ref and got == ref[:-1]:
        return "the last id is lost: an id that starts no pair (the last one) is kept as it is"
    k = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
    return f"yours first differs at position {k} of the result"


def corpus_words(n_lines=200, seed=0):
    """A small Zipf-like corpus of syllable words (as in lesson 08), as word counts."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "te", "ri", "mo", "sun", "de", "la", "ö", "ß"]
    lexicon = ["".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(60)]
    weights = 1 / np.arange(1, 61)
    counts = {}
    for _ in range(n_lines):
        for w in rng.choice(lexicon, 8, p=weights / weights.sum()):
            counts[" " + w] = counts.get(" " + w, 0) + 1
    return counts


def check_learn_merges(fn, g):
    cases = [("the worked example, aaabdaaabac", {"aaabdaaabac": 1}, 10, 2, 3),
             ("abababa, min_frequency=1 (ties)", {"abababa": 1}, 10, 1, 3),
             ("word counts matter: xy x10, ab, abab", {"xy": 10, "ab": 1, "abab": 1}, 3, 1, 3),
             ("a tie of ' a' and 'bc', ids (35, 100) and (101, 102)", {"bc": 3, " a": 3}, 2, 1, 3),
             ("a syllable corpus, 40 merges, offset 4", corpus_words(), 40, 2, 4),
             ("the same corpus, min_frequency 30", corpus_words(), 100, 30, 3)]
    for case, words, num, min_freq, offset in cases:
        g.start(case)
        got = g.call(fn, dict(words), num, min_frequency=min_freq, offset=offset)
        try:
            got = [(int(a), int(b)) for a, b in got]
        except (TypeError, ValueError):
            g.fail(f"return a list of (left id, right id) pairs, got {type(got).__name__}")
        ref = bpe_learn.learn_merges_naive(words, num, min_freq, offset)
        if got != ref:
            g.fail(learn_merges_hint(words, num, got, ref, min_freq, offset))


def check_encode(fn, g):
    words = corpus_words(seed=1)
    words.update({" café": 5, " naïve": 5, " 日本": 4, "😀😀": 3})
    corpus = bpe_learn.learn_merges_naive(words, 60, 2, 3)
    # (b, c) learned before (a, b)
    rival = bpe_learn.learn_merges_naive({"bc": 10, "ab": 5}, 2, 2, 3)
    shifted = bpe_learn.learn_merges_naive(words, 60, 2, 4)                 # a fourth special token
    cases = [(word, corpus, "60 merges", 3)
             for word in (" kateri", " sunde", " café", " naïve", "😀😀", " 日本語",
                                                           "", "zzz", " molamo")]
    cases += [(word, rival, "(b, c) learned before (a, b): they compete", 3)
              for word in ("abc", "abcab", "aabcc")]
    cases += [(word, shifted, "60 merges learned at offset 4", 4) for word in (" kateri", " café")]
    for word, merges, what, offset in cases:
        g.start(f"encode({word!r}" + (f", offset={offset}" if offset != 3 else "")
                + f") with {what}")
        ref = encode_like(word, merges, offset)
        got = g.ids(g.call(fn, word, merges, offset=offset), f"encode({word!r})")
        if got != ref:                   # yours on every case: a mistake is named only if all agree
            found = []
            for other, other_merges, _, other_offset in cases:
                try:                             # (timed as yours; one that raised says nothing)
                    found.append((other, other_merges, other_offset,
                                  g.ids(g.call(fn, other, other_merges, offset=other_offset))))
                except Exception:
                    pass
            g.same(f"encode({word!r})", got, ref,
                   hint=encode_hint(got, word, merges, offset, found))


def encode_like(word, merges, offset=3, chars=False, leftmost=False, new_offset=True,
                byte_offset=True, replace=None):
    """encode as the exercise says (each learned merge in rank order), or with a mistake: from the
    characters' code points; the leftmost known pair first; new ids 256 + k, or bytes b,
    without the offset."""
    ids = [ord(c) + offset for c in word] if chars else [b + offset * byte_offset
                                                         for b in word.encode("utf-8")]
    new = {pair: (offset if new_offset else 0) + 256 + k for k, pair in enumerate(merges)}
    if not leftmost:
        for pair, made in new.items():
            ids = (replace or bpe_learn.merge)(ids, pair, made)
        return ids
    while True:
        i = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) in new), None)
        if i is None:
            return ids
        ids[i:i + 2] = [new[ids[i], ids[i + 1]]]


# -------------------------------------------------------------- known mistakes, and their hints
MERGE_HINT = "scan left to right and skip past both ids of a merged pair: [5, 5, 5] -> [6, 5]"


def encode_hint(yours, word, merges, offset=3, found=()):
    """The hint of the mistake that gives `yours` here and on every case of `found` ((word, merges,
    offset, your ids)), where at least two cases tell it from the rule; else where
    yours first differs."""
    for mistake, hint in (({"chars": True},
                           "start from the UTF-8 bytes, list(word.encode('utf-8')), not the "
                           "characters"),
                          ({"leftmost": True},
                           "that is the leftmost known pair first: apply the merge of the lowest "
                           "rank (learned earliest) first, wherever it is in the word"),
                          ({"replace": merge_first},
                           "each merge replaces EVERY occurrence of its pair in the word, not only "
                           "the first"),
                          ({"replace": merge_overlapping},
                           "after replacing a pair, skip past both of its ids"),
                          ({"new_offset": False}, "merge k makes the id offset + 256 + k"),
                          ({"byte_offset": False},
                           "byte b has id b + offset: ids 0 .. offset - 1 are the special tokens"),
                          ({"offset": 3}, f"use the offset given ({offset}), not 3: byte b has id "
                                          f"b + offset, merge k makes offset + 256 + k")):
        if yours != encode_like(word, merges, **{"offset": offset, **mistake}):
            continue
        wrong = [(ids, encode_like(w, m, **{"offset": o, **mistake}), encode_like(w, m, o))
                 for w, m, o, ids in found]
        telling = sum(mistaken != right for _, mistaken, right in wrong)
        if all(ids == mistaken for ids, mistaken, _ in wrong) and telling >= 2:
            return hint
    ref = encode_like(word, merges, offset)
    k = next((i for i, (a, b) in enumerate(zip(yours, ref)) if a != b), min(len(yours), len(ref)))
    where = f"yours first differs at id {k}"
    if offset != 3:
        return (f"{where}; with offset {offset}: byte b has id b + {offset}, and merge k makes "
                f"{offset} + 256 + k")
    return (f"{where}; apply the merge of the lowest rank first, again and again, until no learned "
            f"pair is left")


def merged(word, merges, offset):
    """The ids of `word` after `merges`, as learn_merges_naive has them."""
    ids = [b + offset for b in word.encode("utf-8")]
    for k, pair in enumerate(merges):
        ids = bpe_learn.merge(ids, pair, offset + 256 + k)
    return ids


def pair_counts(word_counts, merges, offset, weighted=True, once_per_word=False):
    """Pair counts after applying `merges` to every word, as learn_merges_naive sees them (or
    unweighted, or each pair counted once per word)."""
    counts = {}
    for w, f in word_counts.items():
        ids = merged(w, merges, offset)
        for pair in set(zip(ids, ids[1:])) if once_per_word else zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + (f if weighted else 1)
    return counts


def learn_once_per_word(word_counts, num_merges, min_frequency, offset):
    """The merges learned when each word counts a pair once, however often it holds it."""
    merges = []
    for _ in range(num_merges):
        counts = pair_counts(word_counts, merges, offset, once_per_word=True)
        best = min(counts, key=lambda p: (-counts[p], p), default=None)
        if best is None or counts[best] < max(1, min_frequency):
            break
        merges.append(best)
    return merges


def merge_first(ids, pair, new_id):
    i = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair), None)
    return list(ids) if i is None else ids[:i] + [new_id] + ids[i + 2:]


def merge_overlapping(ids, pair, new_id):
    return [new_id if (a, b) == pair else a for a, b in zip(ids, ids[1:] + [None])]


def unchanged(ids, pair, new_id):
    return ids


# how a wrong learner replaces the merged pair: (hint, replacement, skip learned pairs)
WRONG_REPLACEMENTS = [
    ("after each merge, replace the pair in every word (yours went on counting the words as they "
     "were)", unchanged, False),
    ("after each merge, replace the pair in every word by its new id (yours counted the words as "
     "they were, skipping pairs already learned)", unchanged, True),
    ("replace EVERY occurrence of the merged pair in a word, not only the first", merge_first,
     False),
    ("after replacing a pair, skip past both of its ids (yours kept the right one too)",
     merge_overlapping, False),
]


def learn_with(word_counts, num_merges, min_frequency, offset, replace, skip_learned=False):
    """The naive learner with another replacement of the merged pair (a wrong one of
    WRONG_REPLACEMENTS), and, with skip_learned, pairs already learned left out of the count."""
    words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]
    freqs = list(word_counts.values())
    merges = []
    for k in range(num_merges):
        counts = {}
        for w, f in zip(words, freqs):
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + f
        best = min((p for p in counts if not (skip_learned and p in merges)),
                   key=lambda p: (-counts[p], p), default=None)
        if best is None or counts[best] < max(1, min_frequency):
            break
        words = [replace(w, best, offset + 256 + k) for w in words]
        merges.append(best)
    return merges


def learn_merges_hint(word_counts, num_merges, yours, ref, min_frequency, offset):
    """Why the merges differ, from the first merge where they part."""
    k = next((i for i, (a, b) in enumerate(zip(yours, ref)) if a != b), min(len(yours), len(ref)))
    counts = pair_counts(word_counts, ref[:k], offset)
    for hint, replace, skip in WRONG_REPLACEMENTS:       # named only if it gives ALL of yours
        if yours == learn_with(word_counts, num_merges, min_frequency, offset, replace, skip):
            got = yours[k] if k < len(yours) else "missing"
            want = ref[k] if k < len(ref) else "none (stop there)"
            return f"merge {k} is {got}, expected {want}: {hint}"
    if yours == learn_once_per_word(word_counts, num_merges, min_frequency, offset):
        return (f"merge {k}: count every occurrence, times its word's count: a pair twice in a "
                f"word counts twice")
    if k == len(yours):
        return (f"you stopped after {k} merges, but {ref[k]} still occurs {counts[ref[k]]} times "
                f"(min_frequency {min_frequency})")
    if k == len(ref):
        best = max(counts.values(), default=0)
        return (f"{k} merges expected: stop when the best pair occurs fewer than min_frequency "
                f"({min_frequency}) times (here {best}) or no pair is left")
    mine, right = yours[k], ref[k]
    if offset != 3 and all(a == b - offset + 3 for a, b in zip(mine, right)):
        return (f"merge {k} is {mine}, expected {right}: use the offset given ({offset}), not 3: "
                f"byte b has id b + offset")
    if all(a in (b, b - offset) for a, b in zip(mine, right)):   # an offset left out
        which = ("merge j makes id offset + 256 + j" if max(right) >= offset + 256
                 else "byte b has id b + offset")
        return f"merge {k} is {mine}, expected {right}: {which} (offset {offset})"
    if any(i >= offset + 256 + k or i < offset for i in mine):
        return (f"merge {k} is {mine}, but only ids {offset} .. {offset + 255 + k} exist yet: "
                f"the k-th merge (from 0) makes id offset + 256 + k")
    ends = [(ids[-1], ids[0]) for ids in (merged(w, ref[:k], offset) for w in word_counts) if ids]
    if mine not in counts and any((a, b) == mine for a, _ in ends for _, b in ends):
        return (f"merge {k}: {mine} is no pair within a word, only the end of one word and the "
                f"start of another: count the pairs inside each word, never across two")
    if mine not in counts:
        return (f"merge {k}: {mine} does not occur in the words once merges 0 .. {k - 1} "
                f"({ref[:k]}) are applied, each to every word, every occurrence left to right, as "
                f"merge() does")
    if counts[mine] == counts[right]:
        return (f"merge {k}: {mine} and {right} both occur {counts[right]} times; a tie goes to "
                f"the smallest (left, right)")
    unweighted = pair_counts(word_counts, ref[:k], offset, weighted=False)
    if max(unweighted, key=lambda p: (unweighted[p], -p[0], -p[1])) == mine:
        return (f"merge {k}: count each pair once per occurrence times its word's count ({right} "
                f"wins)")
    return f"merge {k}: {mine} occurs {counts[mine]} times, {right} {counts[right]} times"


ITEMS = [("merge", check_merge), ("learn_merges", check_learn_merges), ("encode", check_encode)]
