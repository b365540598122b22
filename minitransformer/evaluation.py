"""Evaluation of a model on a validation set: the loss per target token (without label smoothing)
and sacreBLEU of its translations. The Trainer calls it at every eval_every and at the end.
Left out on purpose: other metrics than BLEU and exact match (chrF: metrics.corpus_chrf).
"""
from .config import SearchConfig
from .metrics import corpus_bleu, exact_match, perplexity
from .search import check_search
from .translation import translate_lines


def validation_loss(model, batches):
    """The mean loss per target token over `batches` (data.Batch), label smoothing off."""
    total, count = 0.0, 0
    for b in batches:
        loss = model.loss(b.src, b.tgt_in, b.tgt_out, b.src_mask, b.tgt_mask, label_smoothing=0.0)
        total += float(loss.data) * b.n_tgt_tokens
        count += b.n_tgt_tokens
    if not count:
        raise ValueError("validation_loss: the batches hold no target token: there is nothing to evaluate on")
    return total / count


def evaluate(model, tokenizer, sources, references, batches=None, search=SearchConfig()):
    """{"valid_loss", "valid_ppl" (when `batches` are given), "bleu", "bleu_signature", "exact_match"}
    of the model in inference mode; `search`: the SearchConfig of translate_lines (nbest 1)."""
    check_search("evaluate", search)
    if isinstance(sources, str) or isinstance(references, str):
        raise TypeError("evaluate: sources and references must be lists of sentences, not one string")
    sources, references = list(sources), list(references)
    if len(sources) != len(references):   # before translating: the lengths would only differ after it
        raise ValueError(f"evaluate: {len(sources)} sources but {len(references)} references; they must pair up")
    if not sources:
        raise ValueError("evaluate: no sentences to evaluate on: sources and references are empty")
    if search.nbest != 1:
        raise ValueError(f"evaluate: BLEU scores one translation per sentence: nbest must be 1, got {search.nbest}")
    result = {}
    with model.inference_mode():
        if batches is not None:
            result["valid_loss"] = validation_loss(model, batches)
            result["valid_ppl"] = perplexity(result["valid_loss"])
        hyps = translate_lines(model, tokenizer, sources, search)
    bleu, signature = corpus_bleu(hyps, [references])
    return {**result, "bleu": bleu, "bleu_signature": signature, "exact_match": exact_match(hyps, references)}
