"""Text in, text out: encode lines with a tokenizer, batch sentences of similar length, search
(search.py), decode. What the translate subcommand and the examples call; and the evaluation of a
model on a validation set that the Trainer runs at every eval_every and at the end: the loss per
target token (without label smoothing), sacreBLEU and exact match of its translations.
Left out on purpose: streaming input, sentence splitting, detokenisation beyond tokenizer.decode,
other metrics than BLEU and exact match at evaluation (chrF: metrics.corpus_chrf).
"""
import os

import numpy as np
from tqdm import tqdm

from .. import backend
from ..checks import FileError, check_int
from ..config import SearchConfig, TransformerConfig
from ..text.corpus import most_characters
from ..search import beam_search, check_search, greedy_search
from ..text.bpe import BPE
from ..transformer import Transformer
from . import checkpoint
from .checkpoint import CheckpointError
from .metrics import corpus_bleu, exact_match, perplexity
from .rundir import BEST


def encode_lines(tokenizer, lines):
    """Token ids of each line: tokenizer.encode_batch where it has one (BPE), else encode."""
    encode_batch = getattr(tokenizer, "encode_batch", None)
    if encode_batch is not None:
        return encode_batch(list(lines))
    return [tokenizer.encode(x) for x in lines]


def one_line(text):
    """text with every line break (the ones str.splitlines knows: \\n, \\r, \\v, \\f, \\x85,
    \\u2028, \\u2029, ...) made a space, so that one line in gives one line out:
    one_line("a\\nb\\u2028c") -> "a b c"."""
    return " ".join(text.splitlines())


def encode_fitting(tokenizer, lines, max_len):
    """The ids of each line, if every line fits a model of max_len positions (x </s>), else a
    FileError naming the first line that does not (1-based; the caller names the file with
    in_file). Lines are measured in characters first (corpus.most_characters), so a huge line is
    refused before it costs any encoding."""
    longest = max_len - 1
    most = most_characters(tokenizer, longest)
    for n, line in enumerate(lines, 1):
        if len(line) > most:
            raise FileError(None, n, f"has {len(line):,} characters, more than {longest:,} tokens "
                                     f"can spell (max_len {max_len} with </s>): "
                                     "shorten or split it")
    ids = encode_lines(tokenizer, lines)
    for n, s in enumerate(ids, 1):
        if len(s) > longest:
            raise FileError(None, n, f"has {len(s):,} tokens, but the model's positions hold at "
                                     f"most {longest:,} (max_len {max_len} with </s>): "
                                     "shorten or split it")
    return ids


def translate_lines(model, tokenizer, lines, search=SearchConfig(), batch_size=64, progress=False):
    """Translate lines of text: encode with tokenizer.encode, batch sentences of similar length
    (batch_size sentences per batch), search with the settings of `search` (a SearchConfig),
    tokenizer.decode, every line break made a space (one_line). Returns a list of strings in the
    order of `lines`, or with search.nbest > 1 a list of n-best lists of strings. beam_size=1 with
    nbest=1 is greedy_search. Every argument and every line is checked before any search: a line
    longer than the model's positions is a checks.FileError naming it (1-based; the caller names
    the file with in_file). progress: a bar of the sentences translated (tqdm, on stderr).
    """
    check_search("translate_lines", search)
    check_int("translate_lines", "batch_size", batch_size, 1)
    ids = encode_fitting(tokenizer, list(lines), model.config.max_len)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [None] * len(ids)
    bar = tqdm(total=len(ids), disable=not progress, unit="sent", desc="translating",
               dynamic_ncols=True)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = [ids[i] for i in chunk]
        if search.beam_size == 1 and search.nbest == 1:
            hyps = [[h] for h in greedy_search(model, batch, search)]
        else:
            hyps = beam_search(model, batch, search)
        for i, hs in zip(chunk, hyps):
            texts = [one_line(tokenizer.decode(h.tokens)) for h in hs]
            out[i] = texts[0] if search.nbest == 1 else texts
        bar.update(len(chunk))
    bar.close()
    return out


# -------------------------------------------------------------------- a model to translate with
def check_scores(model, path):
    """A CheckpointError naming `path` when the model's scores of a one-word sentence are NaN or
    infinite: weights that are finite but so large that float32 overflows (a damaged or crafted
    file) would otherwise reach search as NaN."""
    with model.inference_mode(), np.errstate(all="ignore"):
        logits = backend.to_numpy(model([[model.config.eos_id]], [[model.config.bos_id]]).data)
    if not np.isfinite(logits).all():
        raise CheckpointError(f"{path}: its weights make the model's scores NaN or infinite "
                              "(they overflow float32): the file is damaged, or the run had "
                              "diverged when it was written")


def load_model(path, tokenizer_path=None):
    """(model in eval mode on the current backend, tokenizer, Checkpoint) from a checkpoint file.

    The tokenizer is the one embedded in the checkpoint, unless tokenizer_path is given: then it
    must be that same tokenizer (merges, special tokens, pattern), or a CheckpointError names
    what differs. A checkpoint that embeds none is taken at its word, as long as the vocabulary
    sizes agree.
    """
    ck = checkpoint.load(path)
    if "config" not in ck.meta:
        raise CheckpointError(f"{ck.path} holds no model config")
    try:
        model = Transformer(TransformerConfig.from_dict(ck.meta["config"]))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{ck.path}: its model config is damaged ({e})") from None
    try:
        model.load_state_dict(ck.model)
    except ValueError as e:
        raise CheckpointError(f"{ck.path}: {e}") from None
    model.eval()
    check_scores(model, ck.path)
    own = None
    if ck.meta.get("tokenizer"):
        own = checkpoint.tokenizer_from_json(ck.meta["tokenizer"], ck.path)
    if tokenizer_path is not None:
        tokenizer = BPE.load(tokenizer_path)
    elif own is not None:
        tokenizer = own
    else:
        raise CheckpointError(f"{ck.path} embeds no tokenizer: give one with --tokenizer")
    if tokenizer.vocab_size != model.config.vocab_size:
        source = tokenizer_path or f"the tokenizer embedded in {ck.path}"
        raise CheckpointError(f"{source} has {tokenizer.vocab_size:,} ids but the model in "
                              f"{ck.path} was built for {model.config.vocab_size:,}: "
                              "they do not belong together")
    differ = [what for what in ("merges", "special_tokens", "pattern")
              if own is not None and getattr(own, what) != getattr(tokenizer, what)]
    if differ:
        parts = " and ".join(differ).replace("_", " ")
        raise CheckpointError(f"{tokenizer_path} is not the tokenizer {ck.path} was trained with: "
                              f"they differ in their {parts}, so its ids would mean other tokens "
                              "(leave out --tokenizer to use the checkpoint's own)")
    return model, tokenizer, ck


# -------------------------------------------------------------------- evaluation

def use_best_weights(model, out_dir, log=print):
    """Load into `model` the weights the validation lines judged best (out_dir's
    checkpoint_best.npz), so that a late jump of the loss costs nothing: their path, or None where
    the run evaluated nothing."""
    path = os.path.join(out_dir, BEST)
    if not os.path.isfile(path):
        return None
    best = checkpoint.load(path)
    model.load_state_dict(best.model)
    log(f"translating with the weights of step {best.step}, the best validation BLEU")
    return path


def validation_loss(model, batches):
    """The mean loss per target token over `batches` (data.Batch), label smoothing off."""
    total = 0.0
    count = 0
    for b in batches:
        loss = model.loss(b.src, b.tgt_in, b.tgt_out, b.src_mask, b.tgt_mask, label_smoothing=0.0)
        total += float(loss.data) * b.n_tgt_tokens
        count += b.n_tgt_tokens
    if not count:
        raise ValueError("validation_loss: the batches hold no target token: "
                         "there is nothing to evaluate on")
    return total / count


def evaluate(model, tokenizer, sources, references, batches=None, search=SearchConfig()):
    """{"valid_loss", "valid_ppl" (when `batches` are given), "bleu", "bleu_signature",
    "exact_match"} of the model in inference mode; `search`: the SearchConfig of
    translate_lines (nbest 1)."""
    check_search("evaluate", search)
    if isinstance(sources, str) or isinstance(references, str):
        raise TypeError("evaluate: sources and references must be lists of sentences, "
                        "not one string")
    sources = list(sources)
    references = list(references)
    # before translating: the lengths would only differ after it
    if len(sources) != len(references):
        raise ValueError(f"evaluate: {len(sources)} sources but {len(references)} references; "
                         "they must pair up")
    if not sources:
        raise ValueError("evaluate: no sentences to evaluate on: sources and references are empty")
    if search.nbest != 1:
        raise ValueError("evaluate: BLEU scores one translation per sentence: "
                         f"nbest must be 1, got {search.nbest}")
    result = {}
    with model.inference_mode():
        if batches is not None:
            result["valid_loss"] = validation_loss(model, batches)
            result["valid_ppl"] = perplexity(result["valid_loss"])
        hyps = translate_lines(model, tokenizer, sources, search)
    bleu, signature = corpus_bleu(hyps, [references])
    return {**result, "bleu": bleu, "bleu_signature": signature,
            "exact_match": exact_match(hyps, references)}
