"""Tests of bpe_learn.py: merge() on known answers, the fast learner against the naive one (random
corpora, runs of one letter, text), and the fast one's time growing linearly with a word's length."""
import random
import time

from hypothesis import given, settings, strategies as st

from minitransformer.text.bpe import BPE
from minitransformer.text.bpe_learn import learn_merges, learn_merges_naive, merge

from conftest import CORPUS


def test_merge_helper():
    assert merge([1, 2, 3, 1, 2], (1, 2), 4) == [4, 3, 4]
    assert merge([5, 5, 5], (5, 5), 6) == [6, 5]
    assert merge([5, 5, 5, 5], (5, 5), 6) == [6, 6]
    assert merge([], (1, 2), 3) == [] and merge([1], (1, 2), 3) == [1]


# ---- the fast learner equals the naive one ------------------------------------------------------

corpora = st.lists(st.text(alphabet="ab cé😀\n-'", max_size=24), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(corpora, st.integers(259, 300), st.integers(1, 3))
def test_fast_equals_naive(lines, vocab_size, min_frequency):
    words = BPE().count_words(lines)
    fast = learn_merges(words, vocab_size - 259, min_frequency, 3, progress=False)
    assert fast == learn_merges_naive(words, vocab_size - 259, min_frequency, 3)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.text(alphabet="aab", min_size=1, max_size=12), st.integers(1, 5), max_size=12))
def test_fast_equals_naive_on_runs(word_counts):
    # Runs of one letter stress overlapping pairs (aaaa -> ZZ).
    assert learn_merges(word_counts, 30, 1, 0, False) == learn_merges_naive(word_counts, 30, 1, 0)


def test_fast_equals_naive_on_text():
    words = BPE().count_words(CORPUS)
    assert learn_merges(words, 150, 1, 3, False) == learn_merges_naive(words, 150, 1, 3)


# ---- the fast learner's cost --------------------------------------------------------------------

def test_long_word_learns_in_linear_time():
    """The fast learner's time grows like a word's length n, not n^2: 141 merges of a word of 8n
    letters without a space take about 8 times the CPU time of n letters, where a quadratic learner
    takes 64 times.
    A word was listed once per occurrence of each pair, and scanned whole each time: 100,000 letters
    took 12 s, 200,000 took 49 s (ratio 4); now 0.12 s. The bound 8 * sqrt(8) = 23 (growth like
    n^1.5) leaves a factor 2.8 on either side. The ratio compares the machine with itself, so a slow one
    passes; CPU time (process_time) leaves out other processes' turns, and the best of 3 interleaved
    runs each leaves out a garbage collection or an interruption that lands in one."""
    word = "".join(random.Random(0).choices("abcdefghij", k=200_000))      # ten letters at random

    def cpu_seconds(n):
        start = time.process_time()
        learn_merges({word[:n]: 1}, 141, 1, 3)
        return time.process_time() - start
    small, large = zip(*((cpu_seconds(25_000), cpu_seconds(200_000)) for _ in range(3)))
    ratio = min(large) / min(small)
    assert ratio < 8 * 8 ** 0.5, f"8 times the letters took {ratio:.0f} times the CPU time: not linear"
    words = {word[:20_000]: 1, "abc": 3}
    assert learn_merges(words, 60, 1, 3) == learn_merges_naive(words, 60, 1, 3)


def test_learning_stops_before_a_token_longer_than_a_tokenizer_may_hold():
    """One letter repeated doubles its longest token at each merge: both learners stop at the first merge
    that would pass MAX_TOKEN_BYTES (a tokenizer file refuses such a token), with the same merges."""
    from minitransformer.text.bpe_learn import MAX_TOKEN_BYTES
    words = {"a" * (3 * MAX_TOKEN_BYTES): 1, "ab": 2}
    fast, naive = learn_merges(words, 40, 1, 3), learn_merges_naive(words, 40, 1, 3)
    assert fast == naive
    size = {}
    for k, (a, b) in enumerate(fast):
        size[3 + 256 + k] = size.get(a, 1) + size.get(b, 1)
    assert len(fast) < 40 and max(size.values()) == MAX_TOKEN_BYTES
