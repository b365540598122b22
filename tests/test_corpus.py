"""corpus.py: reading parallel corpora, encoding them with the skip report, and the check of the id
pairs (text not yet encoded, special ids inside a sentence) before any batch is made."""
import pytest

from minitransformer import backend
from minitransformer.text.corpus import EncodeReport, encode_pairs, load_pairs, read_parallel
from minitransformer.text.data import Batch, BatchIterator

from conftest import BOS, DATA, EOS, PAD


class WordTokenizer:
    """A tiny stand-in tokenizer: whitespace split, a new id for each new word (ids from 3)."""
    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self):
        self.vocab = {}

    def encode(self, text):
        return [self.vocab.setdefault(w, 3 + len(self.vocab)) for w in text.split()]


# ---------------------------------------------------------------- reading
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
    bpe = pytest.importorskip("minitransformer.text.bpe")
    src = ["ein Haus", "zwei Häuser", "ein Hund"] * 5
    tgt = ["a house", "two houses", "a dog"] * 5
    tok = bpe.BPE.train(src + tgt, vocab_size=300)
    pairs, report = encode_pairs(src, tgt, tok, max_len=50)
    assert report.kept == 15 and tok.decode(pairs[1][0]) == "zwei Häuser"
    batch = Batch(pairs[:3], tok.pad_id, tok.bos_id, tok.eos_id)
    assert tok.decode(backend.to_numpy(batch.tgt_out)[1][:len(pairs[1][1])].tolist()) == "two houses"


def test_a_line_too_long_for_max_len_is_dropped_unencoded():
    """A side of more characters than max_len tokens can spell (a 2 MB line without a space) is counted
    too long without being encoded, so its cost is reading it; a side just within the limit is encoded."""
    from minitransformer.text.bpe import BPE
    tok = BPE.train(["ab ab abc"], vocab_size=262, min_frequency=1)
    widest = max(map(len, tok.vocab))                      # "<pad>": 5 bytes
    encoded = []
    tok.encode_batch = lambda texts, **kw: encoded.extend(texts) or BPE.encode_batch(tok, texts, **kw)
    fits = "a" * (4 * widest)                              # 20 letters: at least 10 tokens, within max_len 4 * 5
    src, tgt = ["ab", "x" * 2_000_000, fits], ["ab", "ab", "ab"]
    pairs, report = encode_pairs(src, tgt, tok, max_len=4)
    assert (report.kept, report.too_long, report.empty) == (1, 2, 0)
    assert max(map(len, encoded)) == len(fits)             # the 2 MB line never reached the tokenizer
    assert pairs == [(tok.encode("ab"), tok.encode("ab"))]


def test_encode_pairs_refuses_a_string_and_a_senseless_max_len():
    for max_len in (0, -1, 2.5, "50", True):
        with pytest.raises(ValueError, match="encode_pairs: max_len must be an integer of at least 1"):
            encode_pairs(["a"], ["x"], WordTokenizer(), max_len=max_len)
    with pytest.raises(TypeError, match="takes lists of lines, not a string"):
        encode_pairs("a b\nc", "x y\nz", WordTokenizer())      # each character was a line


# ---------------------------------------------------------------- checking the pairs
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
