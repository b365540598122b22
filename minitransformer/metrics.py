"""Metrics of translations and losses: corpus BLEU and chrF through sacreBLEU, exact match, perplexity.

Imports nothing of the package. Left out on purpose: BLEU of our own (sacreBLEU is the reference
implementation whose signature papers quote), TER and other metrics (sacrebleu.metrics has them).
"""
import math


def corpus_bleu(hypotheses, references, lowercase=False):
    """(score, signature) of sacreBLEU with its defaults (13a tokenization, exp smoothing) for
    detokenized hypotheses against one or more reference lists: corpus_bleu(h, [refs]).
    lowercase=True is sacreBLEU's -lc (the signature then says case:lc).

    corpus_bleu(["a cat sat on the mat"], [["a cat sat on the mat"]]) -> (100.0, "nrefs:1|case:mixed|...")
    """
    import sacrebleu  # a second or so to import: only when BLEU is asked for
    hypotheses, references = _checked(hypotheses, references)
    bleu = sacrebleu.metrics.BLEU(lowercase=lowercase)
    score = bleu.corpus_score(hypotheses, references)
    return score.score, str(bleu.get_signature())


def corpus_chrf(hypotheses, references):
    """(score, signature) of sacreBLEU's chrF (character n-grams, default settings), as corpus_bleu."""
    import sacrebleu
    hypotheses, references = _checked(hypotheses, references)
    chrf = sacrebleu.metrics.CHRF()
    score = chrf.corpus_score(hypotheses, references)
    return score.score, str(chrf.get_signature())


def _checked(hypotheses, references):
    """Lists of hypotheses and of reference lists, with a sentence when there is nothing to score
    or a reference list has another length."""
    hypotheses, references = list(hypotheses), [list(r) for r in references]
    if not hypotheses:
        raise ValueError("BLEU of no sentences: the hypotheses are empty")
    for i, r in enumerate(references, 1):
        if len(r) != len(hypotheses):
            raise ValueError(f"BLEU: reference list {i} has {len(r)} sentences but there are {len(hypotheses)} hypotheses")
    return hypotheses, references


def exact_match(hypotheses, references):
    """The fraction of hypotheses equal to their reference, as strings: exact_match(["a", "b"], ["a", "c"]) -> 0.5."""
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"exact_match: {len(hypotheses)} hypotheses but {len(references)} references")
    return sum(h == r for h, r in zip(hypotheses, references)) / max(len(hypotheses), 1)


def perplexity(loss, limit=50.0):
    """exp(loss per token), with the loss clamped at `limit` so that a diverging run logs a large
    number instead of overflowing: perplexity(0.0) -> 1.0, perplexity(1e9) -> exp(50)."""
    return math.exp(min(loss, limit))
