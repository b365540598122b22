"""metrics.py: corpus BLEU and chrF through sacreBLEU (scores, signatures, lowercasing), the refusal of
misshapen input, and the README's reported scores recomputed from the committed translations."""
import re
from pathlib import Path

import pytest

from minitransformer.text.fileio import read_lines
from minitransformer.run.metrics import corpus_bleu, corpus_chrf

from conftest import DATA


def test_bleu_of_a_perfect_and_a_disjoint_hypothesis():
    refs = ["the cat sat on the mat", "a dog ran in the park today"]
    score, signature = corpus_bleu(refs, [refs])
    assert score == pytest.approx(100.0) and "tok:13a" in signature
    assert corpus_bleu(["x y z w"], [["a b c d"]])[0] == pytest.approx(0.0)


def test_chrf_and_lowercased_bleu_come_with_their_signatures():
    hyps, refs = ["A man rides a horse ."], ["a man rides a horse ."]
    cased, _ = corpus_bleu(hyps, [refs])
    lower, signature = corpus_bleu(hyps, [refs], lowercase=True)
    assert lower == pytest.approx(100.0) and cased < 100.0 and "case:lc" in signature
    chrf, chrf_signature = corpus_chrf(refs, [refs])
    assert chrf == pytest.approx(100.0) and chrf_signature.startswith("nrefs:1")


def test_bleu_of_nothing_is_an_error_not_an_index_error():
    with pytest.raises(ValueError, match="hypotheses are empty"):
        corpus_bleu([], [[]])
    with pytest.raises(ValueError, match="reference list 1 has 1 sentences but there are 2"):
        corpus_bleu(["a", "b"], [["a"]])


def test_bleu_refuses_flat_references_single_strings_and_non_strings():
    hyps = ["ab", "cd"]
    for fn, metric in ((corpus_bleu, "BLEU"), (corpus_chrf, "chrF")):
        with pytest.raises(TypeError, match=rf"{metric}: references must be a list of reference lists .*not a list of"):
            fn(hyps, ["xy", "zw"])                                   # was scored against characters
        with pytest.raises(TypeError, match=f"{metric}: hypotheses must be a list of strings, got str"):
            fn("a b", [["a b"]])
        with pytest.raises(ValueError, match=f"{metric}: no reference list is given"):
            fn(hyps, [])
        with pytest.raises(TypeError, match=f"{metric}: reference list 1, sentence 2 is NoneType, not a string"):
            fn(hyps, [["ab", None]])
        with pytest.raises(TypeError, match=f"{metric}: hypothesis 1 is int, not a string"):
            fn([1, 2], [["1", "2"]])


@pytest.mark.skipif(not (DATA / "multi30k").exists(), reason="../shared/data/multi30k is not present")
def test_the_committed_multi30k_hypotheses_give_the_scores_the_record_reports():
    """Each table row of docs/experiments.md that links a results/ folder holding test translations:
    scoring them again against the references must give the BLEU the row reports."""
    from minitransformer.run.metrics import corpus_bleu
    root = Path(__file__).resolve().parents[1]
    ref = [read_lines(DATA / "multi30k" / "test_2016_flickr.en.gz")]
    rows = [line for line in (root / "docs/experiments.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and re.search(r"\b\d\d\.\d\d\b", line)]   # rows with scores
    checked = 0
    for row in rows:
        for folder in re.findall(r"\]\(\.\./(results/[^)]+?)/?\)", row):
            hyp_file = root / folder / "test_2016_flickr.hyp.en"
            if not hyp_file.exists():
                continue
            score = corpus_bleu(read_lines(hyp_file), ref)[0]
            assert f"{score:.2f}" in row, f"{folder}: {score:.2f} is not in its row"
            checked += 1
    assert checked >= 5, "the record's rows link no results folder with test translations"
