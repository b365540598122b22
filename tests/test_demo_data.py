"""The demo task (demo_task.py): number_to_words against hand-written answers, determinism by seed, disjoint
splits, every argument checked; and cli/demo.py's loss curve."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer.checks import SettingError
from minitransformer.text.demo_task import generate, make_splits, number_to_words, split

KNOWN = {
    0: "zero", 7: "seven", 10: "ten", 13: "thirteen", 19: "nineteen", 20: "twenty", 40: "forty",
    45: "forty five", 99: "ninety nine", 100: "one hundred", 101: "one hundred one",
    110: "one hundred ten", 115: "one hundred fifteen", 999: "nine hundred ninety nine",
    1000: "one thousand", 1001: "one thousand one", 1010: "one thousand ten",
    1100: "one thousand one hundred", 3417: "three thousand four hundred seventeen",
    9999: "nine thousand nine hundred ninety nine", 20000: "twenty thousand",
    100100: "one hundred thousand one hundred",
    999999: "nine hundred ninety nine thousand nine hundred ninety nine",
}


@pytest.mark.parametrize("n,words", sorted(KNOWN.items()))
def test_number_to_words_known_answers(n, words):
    assert number_to_words(n) == words


def test_number_to_words_range():
    for bad, says in ((-1, "an integer of at least 0"), (1_000_000, "at most 999,999"), (12.0, "an integer")):
        with pytest.raises(SettingError, match=f"number_to_words: n must be {says}"):
            number_to_words(bad)
    assert number_to_words(np.int64(12)) == "twelve"


def test_number_to_words_is_one_to_one():
    words = [number_to_words(n) for n in range(10000)]
    assert len(set(words)) == 10000
    assert all("  " not in w and w == w.strip() for w in words)


def test_generate_lines():
    src, tgt = generate(200, seed=3)
    assert len(src) == len(tgt) == 200 and len(set(src)) == 200
    for s, t in zip(src, tgt):
        numbers = [int(x.replace(" ", "")) for x in s.split(" , ")]
        assert 1 <= len(numbers) <= 3 and all(0 <= x <= 9999 for x in numbers)
        assert t == " , ".join(number_to_words(x) for x in numbers)
        assert all(len(tok) == 1 for tok in s.split())           # spaced: one digit per token
    lengths = {len(x.split(" , ")[0].replace(" ", "")) for x in src}
    assert lengths == {1, 2, 3, 4}                                 # short numbers are not rare
    src2, _ = generate(50, seed=3, spaced=False, max_numbers=2)
    assert all(len(s.split(", ")) <= 2 and " , " not in s for s in src2)


def test_generate_deterministic_by_seed():
    assert generate(100, seed=1) == generate(100, seed=1)
    assert generate(100, seed=1) != generate(100, seed=2)


def test_generate_fails_when_too_few_distinct_lines():
    assert len(generate(10, seed=0, max_numbers=1, max_digits=1)[0]) == 10  # all ten digits
    with pytest.raises(SettingError, match="cannot draw 11 distinct lines") as e:
        generate(11, seed=0, max_numbers=1, max_digits=1)
    assert e.value.setting == ("n", "max_numbers", "max_digits") and e.value.value == 11


@pytest.mark.parametrize("kwargs,says", [
    (dict(max_digits=7), "max_digits must be at most 6"), (dict(max_digits=0), "max_digits must be an integer of at"),
    (dict(max_numbers=0), "max_numbers must be an integer"), (dict(n=2.5), "n must be an integer")])
def test_generate_refuses_bad_sizes(kwargs, says):
    with pytest.raises(SettingError, match=f"^generate: {says}"):
        generate(**{"n": 5, **kwargs})


def test_split_refuses_what_cannot_be_split():
    with pytest.raises(SettingError, match="src and tgt must pair up, got 2 sources and 1 targets"):
        split(["a", "b"], ["x"], 1)
    with pytest.raises(SettingError, match="n_heldout must be at most 1, got 2"):   # nothing left to train on
        split(["a", "b", "a"], ["x", "y", "x"], 2)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(1, 40))
def test_split_is_disjoint(seed, n_heldout):
    src, tgt = generate(60, seed=seed % 100, max_numbers=1, max_digits=2)
    src, tgt = src + src[:10], tgt + tgt[:10]                      # duplicates go to one side
    (tr_s, tr_t), (ho_s, ho_t) = split(src, tgt, n_heldout, seed=seed)
    assert not set(tr_s) & set(ho_s)
    assert len(set(ho_s)) == n_heldout and len(tr_s) + len(ho_s) == 70
    assert sorted(zip(tr_s + ho_s, tr_t + ho_t)) == sorted(zip(src, tgt))


def test_make_splits_disjoint():
    train, valid, test = make_splits(300, 50, 50, seed=0)
    assert (len(train[0]), len(valid[0]), len(test[0])) == (300, 50, 50)
    assert not (set(train[0]) & set(valid[0]) or set(train[0]) & set(test[0]) or set(valid[0]) & set(test[0]))
    assert make_splits(300, 50, 50, seed=0) == (train, valid, test)


def test_loss_curve_draws_the_falling_loss_in_text():
    from minitransformer.cli.demo import loss_curve
    assert loss_curve([4.0, 2.0, 1.0], width=3, height=2) == ["  4.00 |#  ", "  1.00 |###", "        step 1 .. 3"]
    rows = loss_curve([float(10 - i) for i in range(100)], width=10, height=5)    # 10 steps per column
    assert rows[0] == "  5.50 |##        " and rows[4] == "-84.50 |" + "#" * 10     # each column a mean
    assert [r.count("#") for r in rows[:5]] == [2, 4, 6, 8, 10]                      # a staircase down
    flat = loss_curve([2.0, 2.0])
    assert flat[0].count("#") == 0 and flat[-2] == "  2.00 |##"                      # flat: the bottom row
