"""Metrics of translations and losses: corpus BLEU and chrF (through sacreBLEU), exact match,
perplexity.

Imports nothing of the package. Left out on purpose: BLEU of our own (sacreBLEU is the reference
implementation whose signature papers quote), TER and other metrics (sacrebleu.metrics has them).
"""
import math


def corpus_bleu(hypotheses, references, lowercase=False):
    """(score, signature) of sacreBLEU with its defaults (13a tokenization, exp smoothing) for
    detokenized hypotheses against one or more reference lists: corpus_bleu(h, [refs]).
    lowercase=True is sacreBLEU's -lc (the signature then says case:lc).

    corpus_bleu(["a cat sat on the mat"], [["a cat sat on the mat"]])
        -> (100.0, "nrefs:1|case:mixed|...")
    """
    import sacrebleu  # a second or so to import: only when BLEU is asked for
    hypotheses, references = _checked(hypotheses, references)
    bleu = sacrebleu.metrics.BLEU(lowercase=lowercase)
    score = bleu.corpus_score(hypotheses, references)
    return score.score, str(bleu.get_signature())


def corpus_chrf(hypotheses, references):
    """(score, signature) of sacreBLEU's chrF (character n-grams, its defaults), as corpus_bleu."""
    import sacrebleu
    hypotheses, references = _checked(hypotheses, references, "chrF")
    chrf = sacrebleu.metrics.CHRF()
    score = chrf.corpus_score(hypotheses, references)
    return score.score, str(chrf.get_signature())


def _checked(hypotheses, references, metric="BLEU"):
    """Lists of hypotheses and of reference lists, with a sentence when there is nothing to
    score, a reference list has another length, a single string stands where a list goes, or an
    entry is no string."""
    call = f"(corpus_{metric.lower()}(hypotheses, [references]))"
    if isinstance(hypotheses, str) or not hasattr(hypotheses, "__iter__"):
        raise TypeError(f"{metric}: hypotheses must be a list of strings, "
                        f"got {type(hypotheses).__name__}")
    if isinstance(references, str) or not hasattr(references, "__iter__"):
        raise TypeError(f"{metric}: references must be a list of reference lists {call}, "
                        f"got {type(references).__name__}")
    hypotheses = list(hypotheses)
    references = list(references)
    if any(isinstance(r, str) for r in references):
        raise TypeError(f"{metric}: references must be a list of reference lists {call}, "
                        f"not a list of strings")
    references = [list(r) for r in references]
    if not hypotheses:
        raise ValueError(f"{metric} of no sentences: the hypotheses are empty")
    if not references:
        raise ValueError(f"{metric}: no reference list is given {call}")
    for i, r in enumerate(references, 1):
        if len(r) != len(hypotheses):
            raise ValueError(f"{metric}: reference list {i} has {len(r)} sentences but there are "
                             f"{len(hypotheses)} hypotheses")
    named = [("hypothesis", hypotheses)]
    named += [(f"reference list {i}, sentence", r) for i, r in enumerate(references, 1)]
    for what, sentences in named:
        for n, text in enumerate(sentences, 1):
            if not isinstance(text, str):
                raise TypeError(f"{metric}: {what} {n} is {type(text).__name__}, not a string")
    return hypotheses, references


def exact_match(hypotheses, references):
    """The fraction of hypotheses equal to their reference, as strings:
    exact_match(["a", "b"], ["a", "c"]) -> 0.5."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("exact_match: hypotheses and references must be lists of strings, "
                        "not one string")
    hypotheses = list(hypotheses)
    references = list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"exact_match: {len(hypotheses)} hypotheses but "
                         f"{len(references)} references")
    return sum(h == r for h, r in zip(hypotheses, references)) / max(len(hypotheses), 1)


def perplexity(loss, limit=50.0):
    """exp(loss per token), with the loss clamped at `limit` so that a diverging run logs a large
    number instead of overflowing: perplexity(0.0) -> 1.0, perplexity(1e9) -> exp(50)."""
    return math.exp(min(loss, limit))
