"""Lesson 08, answers: byte-pair encoding, the naive learner and the encoder.

Graded by `python lessons/check.py 08 --solutions`; your own go in lessons/exercises/08_bpe.py.

Answers to the lesson's questions:
1. 1000 - (4 special tokens + 256 bytes) = 740 merges; the byte `a` (97) has id 97 + 4 = 101.
2. abababa: ab and ba occur 3 times, a tie won by ab (a < b): Z = 259, ZZZa. Then ZZ (twice) becomes
   Y = 260: YZa. YZ and Za occur once: (Z, a) = (259, 100) < (Y, Z) = (260, 259), so Za becomes X = 261:
   YX, and YX a last token: four merges, the word ends as one token.
3. decode joins the tokens' bytes and decodes them with errors="replace": half a character becomes
   U+FFFD, so the first byte of "é" alone decodes to "\ufffd".
4. a (bc): lowest rank first, (b, c) is merged, then no learned pair is left. The leftmost pair gives
   (ab) c. Training merged (b, c) in every word before (a, b) existed, so in a word abc the pair (a, b)
   never formed: encoding must replay training's order, or text is cut into pieces training never saw.
5. One: merge scans left to right and skips both symbols it merges, so aaa becomes Z a. Occurrences of a
   pair can overlap; replacements cannot.
6. At most n, one per byte: every byte has an id, so nothing is unknown, and a merge only shortens. At
   least one per pre-tokenized word, since merges never cross words (and 0 for the empty text).
7. Nearly twice as long: every word would be followed by a space token, and attention's cost grows with
   the square of the length. Kept with the word, the space costs nothing once " Mann" is one token.
"""
from minitransformer.text.bpe import BPE


def merge(ids, pair, new_id):
    """A new list: every occurrence of `pair` in `ids`, scanned left to right, replaced by new_id."""
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
    """Each step, count every adjacent pair (weighted by its word's count), merge the most frequent one,
    ties to the smallest (left, right); merge k makes id offset + 256 + k. O(merges x corpus)."""
    words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]   # byte b has id b + offset
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
    """The word's UTF-8 bytes as ids, then the learned merge of the lowest rank, again and again, until
    no learned pair is left: exactly what training did to this word."""
    rank = {pair: k for k, pair in enumerate(merges)}
    ids = [b + offset for b in word.encode("utf-8")]
    while len(ids) > 1:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, len(merges)))
        if pair not in rank:
            break
        ids = merge(ids, pair, offset + 256 + rank[pair])
    return ids


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    t = BPE.train(["a b"], vocab_size=1000, special_tokens=["<mask>"])
    assert t.offset == 4 and 1000 - t.offset - 256 == 740 and t.token_to_id("a") == 97 + 4
    A, B = ord("a") + 3, ord("b") + 3
    assert learn_merges({"abababa": 1}, 10, 1) == [(A, B), (259, 259), (259, A), (260, 261)]
    t = BPE.train(["abababa"], vocab_size=300, min_frequency=1)
    assert len(t.encode("abababa")) == 1 and t.decode(["é".encode("utf-8")[0] + 3]) == "\ufffd"
    a, b, c = (ord(ch) + 3 for ch in "abc")                                                       # 4
    assert encode("abc", [(b, c), (a, b)]) == [a, 259]
    assert merge(["a"] * 3, ("a", "a"), "Z") == ["Z", "a"]                                         # 5
    tok = BPE.train(["kate kate rima"] * 5, vocab_size=300)                                       # 6
    for text in ("kate", "unseen words 😀"):
        assert len(text.split()) <= len(tok.encode(text)) <= len(text.encode("utf-8"))
