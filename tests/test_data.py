"""Reading corpora (every error path), encoding with its skip report, batches (shift, padding, masks),
batching by tokens (budget, coverage, shuffling by seed and epoch) and resuming the batch stream."""
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer import backend
from minitransformer.corpus import EncodeReport, encode_pairs, load_pairs, read_parallel
from minitransformer.data import Batch, BatchIterator, batch_by_tokens, pad
from minitransformer.fileio import read_lines

PAD, BOS, EOS = 0, 1, 2
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


class WordTokenizer:
    """A tiny stand-in tokenizer: whitespace split, a new id for each new word (ids from 3)."""
    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self):
        self.vocab = {}

    def encode(self, text):
        return [self.vocab.setdefault(w, 3 + len(self.vocab)) for w in text.split()]


def random_pairs(n, seed=0, max_len=30):
    rng = np.random.default_rng(seed)
    return [(rng.integers(3, 50, rng.integers(1, max_len + 1)).tolist(),
             rng.integers(3, 50, rng.integers(1, max_len + 1)).tolist()) for _ in range(n)]


# ---------------------------------------------------------------- reading
def test_read_lines_plain_and_gzip(tmp_path):
    text = "ein Haus\r\nzwei Häuser\n\nletzte\u2028Zeile\n"
    (tmp_path / "a.txt").write_bytes(text.encode("utf-8"))
    with gzip.open(tmp_path / "a.txt.gz", "wb") as f:
        f.write(text.encode("utf-8"))
    expected = ["ein Haus", "zwei Häuser", "", "letzte\u2028Zeile"]  # U+2028 does not end a line
    assert read_lines(tmp_path / "a.txt") == expected
    assert read_lines(str(tmp_path / "a.txt.gz")) == expected
    (tmp_path / "b.txt").write_bytes(b"no newline at the end")
    assert read_lines(tmp_path / "b.txt") == ["no newline at the end"]


def test_read_lines_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot read .*nowhere.de: no such file"):
        read_lines(tmp_path / "nowhere.de")


def test_read_lines_names_the_bad_utf8_line(tmp_path):
    path = tmp_path / "bad.en"
    path.write_bytes(b"fine\nstill fine\nbroken \xff here\nfine again\n")
    with pytest.raises(ValueError, match=r"bad.en: line 3 is not valid UTF-8 .*byte 8 of the line"):
        read_lines(path)
    gz = tmp_path / "bad.en.gz"
    with gzip.open(gz, "wb") as f:
        f.write(b"\xc3\n")
    with pytest.raises(ValueError, match=r"bad.en.gz: line 1 is not valid UTF-8"):
        read_lines(gz)


def test_read_lines_bad_gzip(tmp_path):
    path = tmp_path / "fake.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="fake.gz: cannot read the file"):
        read_lines(path)


def test_read_parallel(tmp_path):
    (tmp_path / "x.de").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "x.en").write_text("A\nB\n", encoding="utf-8")
    (tmp_path / "y.en").write_text("A\nB\nC\n", encoding="utf-8")
    assert read_parallel(tmp_path / "x.de", tmp_path / "x.en") == (["a", "b"], ["A", "B"])
    pairs, report = load_pairs(tmp_path / "x.de", tmp_path / "x.en", WordTokenizer())
    assert pairs == [([3], [5]), ([4], [6])] and report.kept == 2
    with pytest.raises(ValueError, match=r"x.de has 2 lines but .*y.en has 3"):
        read_parallel(tmp_path / "x.de", tmp_path / "y.en")


@pytest.mark.skipif(not (DATA / "multi30k").exists(), reason="/work/shared/data/multi30k is not present")
def test_read_parallel_on_multi30k():
    files = sorted((DATA / "multi30k").glob("*.de*"))
    pairs = [(f, f.with_name(f.name.replace(".de", ".en"))) for f in files]
    pairs = [(s, t) for s, t in pairs if t.exists()]
    if not pairs:
        pytest.skip("no .de/.en file pair found in multi30k")
    src, tgt = read_parallel(*pairs[0])
    assert len(src) == len(tgt) > 0 and all(isinstance(s, str) for s in src[:10])


# ---------------------------------------------------------------- encoding
def test_encode_pairs_skip_report():
    src = ["a b c", "", "a", "a b c d e", "b", "   "]
    tgt = ["x y", "x", "", "x", "x y z w v u", "y"]
    tok = WordTokenizer()
    pairs, report = encode_pairs(src, tgt, tok, max_len=4)
    assert isinstance(report, EncodeReport)
    assert (report.total, report.kept, report.empty, report.too_long) == (6, 1, 3, 2)
    assert report.indices == [0]
    assert pairs == [([tok.vocab["a"], tok.vocab["b"], tok.vocab["c"]], [tok.vocab["x"], tok.vocab["y"]])]
    assert str(report) == "kept 1 of 6 pairs (3 empty, 2 longer than 4 tokens)"
    _, report = encode_pairs(src, tgt, tok)  # no length limit
    assert report.summary() == "kept 3 of 6 pairs (3 empty)"
    big = EncodeReport(29000, 28950, 12, 38, 100)
    assert str(big) == "kept 28,950 of 29,000 pairs (12 empty, 38 longer than 100 tokens)"
    with pytest.raises(ValueError, match="2 source lines but 1 target lines"):
        encode_pairs(["a", "b"], ["x"], tok)


def test_encode_pairs_with_bpe():
    bpe = pytest.importorskip("minitransformer.bpe")
    src = ["ein Haus", "zwei Häuser", "ein Hund"] * 5
    tgt = ["a house", "two houses", "a dog"] * 5
    tok = bpe.BPE.train(src + tgt, vocab_size=300)
    pairs, report = encode_pairs(src, tgt, tok, max_len=50)
    assert report.kept == 15 and tok.decode(pairs[1][0]) == "zwei Häuser"
    batch = Batch(pairs[:3], tok.pad_id, tok.bos_id, tok.eos_id)
    assert tok.decode(backend.to_numpy(batch.tgt_out)[1][:len(pairs[1][1])].tolist()) == "two houses"


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


def test_atomic_writes_follow_the_umask_for_checkpoints_and_tokenizers(tmp_path):
    import os
    import stat
    from minitransformer import checkpoint
    from minitransformer.bpe import BPE
    previous = os.umask(0o027)
    try:
        checkpoint.save(tmp_path / "ck.npz", {"w": np.ones(2, np.float32)}, {"step": 1})
        BPE().save(tmp_path / "tok.json")
    finally:
        os.umask(previous)
    for name in ("ck.npz", "tok.json"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640, name       # 0o666 & ~0o027
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]


def test_an_atomic_write_through_a_symbolic_link_replaces_the_file_and_keeps_the_link(tmp_path):
    from minitransformer.fileio import atomic_write
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "out.txt").write_text("old")
    link = tmp_path / "out.txt"
    link.symlink_to(tmp_path / "real" / "out.txt")
    assert atomic_write(link, lambda f: f.write("new"), mode="w") == str(link)
    assert link.is_symlink() and (tmp_path / "real" / "out.txt").read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["out.txt"]   # no temporary left


@pytest.mark.skipif(not (DATA / "multi30k").exists(), reason="../shared/data/multi30k is not present")
def test_the_committed_multi30k_hypotheses_give_the_scores_the_readme_reports():
    """Each results table row of the README that links a results/ folder holding test translations:
    scoring them again against the references must give the row's BLEU, lowercased BLEU and chrF."""
    from minitransformer.metrics import corpus_bleu, corpus_chrf
    root = Path(__file__).resolve().parents[1]
    ref = [read_lines(DATA / "multi30k" / "test_2016_flickr.en.gz")]
    rows = [line for line in (root / "README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and "test_2016_flickr sacreBLEU" in line]
    checked = 0
    for row in rows:
        for folder in re.findall(r"\]\((results/[^)]+?)/?\)", row):
            hyp_file = root / folder / "test_2016_flickr.hyp.en"
            if not hyp_file.exists():
                continue
            hyp = read_lines(hyp_file)
            scores = [corpus_bleu(hyp, ref)[0], corpus_bleu(hyp, ref, lowercase=True)[0], corpus_chrf(hyp, ref)[0]]
            for score in scores:
                assert f"{score:.2f}" in row, f"{folder}: {score:.2f} is not in its README row"
            checked += 1
    assert checked >= 2, "no README row links the recipe's results folders"


def test_iterator_refuses_text_pairs_and_senseless_max_tokens():
    with pytest.raises(TypeError, match=r"pairs must be \(source ids, target ids\) .* is \('ein', 'a'\)"):
        BatchIterator([("ein", "a")], 100, PAD, BOS, EOS)     # text not encoded yet
    for max_tokens in (0, 2.5, None):                          # 2.5 was cut to 2 without a word
        with pytest.raises(ValueError, match="max_tokens must be an integer of at least 1"):
            BatchIterator([([5], [6])], max_tokens, PAD, BOS, EOS)


def test_special_ids_inside_a_pair_are_refused_naming_the_pair():
    """A <pad> inside a sentence was masked out as padding without a word; <s> or </s> inside one, or a
    <pad> sharing the id of either, trained the model on something else than the sentence."""
    ok = ([5, 6], [7])
    cases = [([ok, ([5, 6], [7, 8, PAD])], r"pair 1's target holds <pad> \(0\) at position 2"),
             ([ok, ok, ([5, EOS], [7])], r"pair 2's source holds </s> \(2\) at position 1"),
             ([([BOS, 5], [7])], r"pair 0's source holds <s> \(1\) at position 0"),
             ([ok, ([5, -1], [7])], r"pair 1's source holds -1 at position 1, which is no token id"),
             ([ok, ([5, 3.7], [7])], r"pair 1's source holds 3.7 at position 1, which is no token id")]
    for pairs, message in cases:       # refused when the stream is made, before any batch
        with pytest.raises(ValueError, match=message):
            BatchIterator(pairs, 100, PAD, BOS, EOS)
    with pytest.raises(TypeError, match=r"pair 1 is \('ab', 'cd'\)"):        # not only the first pair
        BatchIterator([ok, ("ab", "cd")], 100, PAD, BOS, EOS)
    for pad_id in (BOS, EOS):
        with pytest.raises(ValueError, match=f"pad_id {pad_id} is also the (bos|eos)_id"):
            BatchIterator([ok], 100, pad_id, BOS, EOS)
    with pytest.raises(TypeError, match="pad_id must be an integer token id, got None"):
        BatchIterator([ok], 100, None, BOS, EOS)
    with pytest.raises(ValueError, match=r"pair 20's source holds <pad> \(0\) at position 1"):
        Batch([ok, ([5, PAD, 6], [7])], PAD, BOS, EOS, ids=[10, 20])    # Batch itself, named by its ids
    with pytest.raises(ValueError, match="pad_id 2 is also the eos_id"):
        Batch([ok], EOS, BOS, EOS)
    assert len(BatchIterator((p for p in [ok]), 100, PAD, BOS, EOS)) == 1   # a generator of pairs is fine


def test_encode_pairs_refuses_a_string_and_a_senseless_max_len():
    for max_len in (0, -1, 2.5, "50", True):
        with pytest.raises(ValueError, match="encode_pairs: max_len must be an integer of at least 1"):
            encode_pairs(["a"], ["x"], WordTokenizer(), max_len=max_len)
    with pytest.raises(TypeError, match="takes lists of lines, not a string"):
        encode_pairs("a b\nc", "x y\nz", WordTokenizer())      # each character was a line


def test_gzip_data_under_a_plain_name_is_named_as_such(tmp_path):
    (tmp_path / "train.de").write_bytes(gzip.compress("ein Haus\n".encode("utf-8")))
    with pytest.raises(ValueError, match="train.de holds gzip-compressed data, not text"):
        read_lines(tmp_path / "train.de")
