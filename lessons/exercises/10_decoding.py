"""Lesson 10, build it: the length penalty, and beam search on any next-token function.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 10

Beam search here needs no Transformer: a function `step(prefixes)` stands for the model. Given a
list of prefixes (tuples of token ids, never holding EOS), it returns an array (len(prefixes), V):
row r holds log p(next token | prefixes[r]) for each of the V ids (-inf where a token
is impossible). The ids are lesson 10's: 0 <pad> and 1 <s> (never emitted: always -inf), 2 EOS
(</s>, the end of the output), and the words 3 .. V-1. The grader runs your search on lesson 10's
examples, a tie, and random models (some chosen so that each usual mistake finds another output),
and compares with search.beam_search and, for a beam too wide to prune anything, with the best of
all outputs. The answers are in lessons/solutions/10_decoding.py; try first.
"""
import math

import numpy as np

EOS = 2   # id 2, </s>, ends an output (0 <pad> and 1 <s> are never emitted)


def length_penalty(length, alpha):
    """GNMT's lp(|Y|) = ((5 + |Y|) / 6) ** alpha, where |Y| counts the output's
    tokens and its EOS."""
    raise NotImplementedError("length_penalty: your turn")


def beam_search(step, beam_size, max_len, alpha=0.0):
    """(tokens, log_prob): the output that beam search with k = beam_size alive prefixes returns,
    under the rules of lesson 10 ("The rules": which candidates finish, which stay alive, ties, when
    the search stops).

    An output is y_1 .. y_n EOS with n <= max_len; tokens = [y_1, ..., y_n] (a list
    of ints, no EOS), log_prob = the sum of its n + 1 log-probabilities, EOS included. Finished
    outputs compete by score = log_prob / length_penalty(n + 1, alpha). step() is called only with
    prefixes of at most max_len words, never holding EOS.
    """
    raise NotImplementedError("beam_search: your turn")
