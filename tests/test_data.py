"""data.py: batches (shift, padding, masks), batching by tokens (budget, coverage, shuffling by seed and
epoch) and the resumable batch stream."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer import backend
from minitransformer.text.data import Batch, BatchIterator, batch_by_tokens, count_over_budget, pad

from conftest import BOS, EOS, PAD


def random_pairs(n, seed=0, max_len=30):
    rng = np.random.default_rng(seed)
    return [(rng.integers(3, 50, rng.integers(1, max_len + 1)).tolist(),
             rng.integers(3, 50, rng.integers(1, max_len + 1)).tolist()) for _ in range(n)]


# ---------------------------------------------------------------- one batch
def test_pad():
    np.testing.assert_array_equal(pad([[5, 6, 7], [8]], 0), [[5, 6, 7], [8, 0, 0]])
    np.testing.assert_array_equal(pad([[5]], 9, length=3), [[5, 9, 9]])
    np.testing.assert_array_equal(pad([[5], [8, 9]], 0, end=2), [[5, 2, 0], [8, 9, 2]])
    np.testing.assert_array_equal(pad([[5], [8, 9]], 0, start=1), [[1, 5, 0], [1, 8, 9]])
    np.testing.assert_array_equal(pad([[], [4]], 0, start=1, end=2), [[1, 2, 0], [1, 4, 2]])


def test_batch_shift_padding_and_masks(xp_backend):
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])]
    b = Batch(pairs, PAD, BOS, EOS, ids=[4, 2])
    src, tgt_in, tgt_out = (backend.to_numpy(a) for a in (b.src, b.tgt_in, b.tgt_out))
    assert backend.device_of(b.src) == backend.device_of(b.tgt_mask) == backend.device
    np.testing.assert_array_equal(src, [[5, 6, 7, EOS], [10, EOS, PAD, PAD]])
    np.testing.assert_array_equal(tgt_in, [[BOS, 8, 9, PAD, PAD], [BOS, 11, 12, 13, 14]])
    np.testing.assert_array_equal(tgt_out, [[8, 9, EOS, PAD, PAD], [11, 12, 13, 14, EOS]])
    real = tgt_in[:, 1:] != PAD  # the shift: the input at t + 1 is the output at t
    np.testing.assert_array_equal(tgt_in[:, 1:][real], tgt_out[:, :-1][real])
    assert (b.n_src_tokens, b.n_tgt_tokens) == (6, 8) and len(b) == 2
    assert np.issubdtype(src.dtype, np.integer)

    src_mask, tgt_mask = backend.to_numpy(b.src_mask), backend.to_numpy(b.tgt_mask)
    assert src_mask.dtype == bool and tgt_mask.dtype == bool
    assert src_mask.shape == (2, 1, 1, 4) and tgt_mask.shape == (2, 1, 5, 5)
    np.testing.assert_array_equal(src_mask[:, 0, 0], [[1, 1, 1, 1], [1, 1, 0, 0]])
    lower = np.tril(np.ones((5, 5), dtype=bool))
    np.testing.assert_array_equal(tgt_mask[1, 0], lower)                      # no padding: causal only
    np.testing.assert_array_equal(tgt_mask[0, 0], lower & [1, 1, 1, 0, 0])    # causal and key padding
    assert tgt_mask[0, 0, 4].tolist() == [True, True, True, False, False]     # a padded query still sees keys
    # broadcastable to (B, H, T_q, T_k) for self-attention and encoder-decoder attention
    assert np.broadcast_shapes(tgt_mask.shape, (2, 4, 5, 5)) == (2, 4, 5, 5)
    assert np.broadcast_shapes(src_mask.shape, (2, 4, 5, 4)) == (2, 4, 5, 4)
    assert b.ids.tolist() == [4, 2] and "B=2" in repr(b)


# ---------------------------------------------------------------- batching by tokens
def padded_sizes(pairs, idx):
    S = max(len(pairs[i][0]) + 1 for i in idx)
    T = max(len(pairs[i][1]) + 1 for i in idx)
    return len(idx) * S, len(idx) * T


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 120), st.integers(1, 400), st.integers(0, 10 ** 6), st.booleans())
def test_batches_respect_budget_and_cover_every_pair_once(n, max_tokens, seed, shuffle):
    pairs = random_pairs(n, seed % 1000)
    batches = batch_by_tokens(pairs, max_tokens, seed=seed, shuffle=shuffle, epoch=seed % 3)
    allidx = np.concatenate(batches)
    assert sorted(allidx.tolist()) == list(range(n))       # every pair exactly once
    for idx in batches:
        src_tokens, tgt_tokens = padded_sizes(pairs, idx)   # padding counted, both sides
        # over budget only as a lone pair that alone exceeds it
        assert max(src_tokens, tgt_tokens) <= max_tokens or len(idx) == 1


def test_batches_are_greedy_and_grouped_by_length():
    pairs = random_pairs(300, 1)
    batches = batch_by_tokens(pairs, 200, seed=0, shuffle=False)
    # unshuffled: in length order, and no batch could have taken the next pair within the budget
    for a, b in zip(batches, batches[1:]):
        s, t = padded_sizes(pairs, np.concatenate([a, b[:1]]))
        assert max(s, t) > 200
    keys = [(len(pairs[i][0]), len(pairs[i][1])) for i in np.concatenate(batches)]
    assert keys == sorted(keys)


def test_oversized_pair_is_its_own_batch():
    pairs = [([3] * 50, [4] * 5), ([3], [4]), ([3, 3], [4])]
    batches = batch_by_tokens(pairs, max_tokens=10, shuffle=False)
    assert [b.tolist() for b in batches] == [[1, 2], [0]]


def test_shuffling_reproducible_by_seed_and_differs_across_epochs():
    pairs = random_pairs(400, 2)
    plan = lambda seed, epoch: [b.tolist() for b in batch_by_tokens(pairs, 150, seed=seed, epoch=epoch)]
    assert plan(7, 0) == plan(7, 0)
    assert plan(7, 0) != plan(7, 1)
    assert plan(7, 0) != plan(8, 0)
    assert plan(0, 1) != plan(1, 0)  # (seed, epoch) seeds the generator, not seed + epoch
    assert len(plan(7, 0)) == len(plan(7, 3))  # the number of batches does not change


# ---------------------------------------------------------------- the batch stream
def test_iterator_streams_epochs():
    pairs = random_pairs(60, 3)
    it = BatchIterator(pairs, 100, PAD, BOS, EOS, seed=5)
    n = len(it)
    first = [next(it).ids.tolist() for _ in range(n)]
    assert it.state_dict()["epoch"] == 0 and it.state_dict()["index"] == n
    second = next(it)
    assert it.epoch == 1 and it.index == 1
    assert sorted(sum(first, [])) == list(range(60))
    assert [b.ids.tolist() for b in it.epoch_batches(0)] == first          # one pass, position untouched
    assert it.epoch == 1 and second.ids.tolist() == it.plan(1)[0].tolist()


def test_iterator_resume_gives_identical_remaining_batches():
    pairs = random_pairs(80, 4)
    it = BatchIterator(pairs, 120, PAD, BOS, EOS, seed=11)
    for _ in range(len(it) + 3):  # into the second epoch
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    rest = [next(it) for _ in range(2 * len(it))]

    it2 = BatchIterator(pairs, 120, PAD, BOS, EOS, seed=11)
    it2.load_state_dict(state)
    rest2 = [next(it2) for _ in range(2 * len(it2))]
    for a, b in zip(rest, rest2):
        assert a.ids.tolist() == b.ids.tolist()
        np.testing.assert_array_equal(backend.to_numpy(a.src), backend.to_numpy(b.src))
        np.testing.assert_array_equal(backend.to_numpy(a.tgt_out), backend.to_numpy(b.tgt_out))

    other = BatchIterator(pairs, 120, PAD, BOS, EOS, seed=12)
    with pytest.raises(ValueError, match="saved with seed=11 but this one has seed=12"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="n_pairs=80 but this one has n_pairs=79"):
        BatchIterator(pairs[:79], 120, PAD, BOS, EOS, seed=11).load_state_dict(state)


def test_iterator_refuses_text_pairs_and_senseless_max_tokens():
    with pytest.raises(TypeError, match=r"pairs must be \(source ids, target ids\) .* is \('ein', 'a'\)"):
        BatchIterator([("ein", "a")], 100, PAD, BOS, EOS)     # text not encoded yet
    for max_tokens in (0, 2.5, None):                          # 2.5 was cut to 2 without a word
        with pytest.raises(ValueError, match="max_tokens must be an integer of at least 1"):
            BatchIterator([([5], [6])], max_tokens, PAD, BOS, EOS)


def test_count_over_budget_counts_the_pairs_batched_alone():
    # padded lengths: x </s> and <s> y, the longer side counts
    pairs = [([5, 6], [7]), ([5], [7, 8, 9, 10]), ([5, 6, 7], [8, 9])]      # padded 3, 5, 4
    assert [count_over_budget(pairs, m) for m in (2, 3, 4, 5)] == [3, 2, 1, 0]
    assert sum(len(b) == 1 for b in batch_by_tokens(pairs, 3, shuffle=False)) >= count_over_budget(pairs, 3)
