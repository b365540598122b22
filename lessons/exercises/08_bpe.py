"""Lesson 08, build it: byte-pair encoding, the naive learner and the encoder.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 08

Ids, as in lesson 08: the byte b of a word's UTF-8 encoding has id b + offset (offset = the number
of special tokens, 3 by default), and merge k (counting from 0) makes the new id offset + 256 + k.
The grader compares with minitransformer.text.bpe_learn (merge, learn_merges_naive) on worked
examples, ties, and a small corpus. The answers are in lessons/solutions/08_bpe.py; try first.
"""


def merge(ids, pair, new_id):
    """A NEW list: `ids` with every occurrence of the adjacent `pair` (a tuple of two ids), found
    left to right, replaced by new_id. merge([1, 2, 3, 1, 2], (1, 2), 4) -> [4, 3, 4]; what does
    merge([5, 5, 5], (5, 5), 6) give?"""
    raise NotImplementedError("merge: your turn")


def learn_merges(word_counts, num_merges, min_frequency=2, offset=3):
    """The naive BPE learner: a list of up to num_merges pairs (left id, right id), in the order
    learned.

    word_counts: {word (a str): how often it occurs}. Start from every word's byte ids. Each step,
    count every adjacent pair in every word, each occurrence weighted by its word's count; take the
    most frequent pair, ties going to the smallest (left, right); stop when it occurs fewer than
    min_frequency times (or no pair is left); else replace it in every word by the next id and go
    on.
    """
    raise NotImplementedError("learn_merges: your turn")


def encode(word, merges, offset=3):
    """The ids of one word (a str, no pre-tokenization) under the learned `merges`: start from its
    UTF-8 bytes, then apply the learned merge of the lowest rank (learned earliest) present in the
    word, again and again, until no learned pair is left."""
    raise NotImplementedError("encode: your turn")
