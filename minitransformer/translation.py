"""Text in, text out: encode lines with a tokenizer, batch sentences of similar length, search
(search.py), decode. What evaluation, the translate subcommand and the examples call.
Left out on purpose: streaming input, sentence splitting, detokenisation beyond tokenizer.decode.
"""
from tqdm import tqdm

from .search import beam_search, check_search_args, greedy_search


def encode_lines(tokenizer, lines):
    """Token ids of each line: tokenizer.encode_batch when it has one (BPE), else encode per line."""
    encode = getattr(tokenizer, "encode_batch", None) or (lambda xs: [tokenizer.encode(x) for x in xs])
    return encode(list(lines))


def translate_lines(model, tokenizer, lines, beam_size=4, alpha=0.6, max_len_a=1, max_len_b=50, nbest=1,
                    batch_size=64, stop="exact", progress=False):
    """Translate lines of text: encode with tokenizer.encode, batch sentences of similar length
    (batch_size sentences per batch), search, tokenizer.decode. Returns a list of strings in the order
    of `lines`, or with nbest > 1 a list of n-best lists of strings. beam_size=1 with nbest=1 is
    greedy_search. Every argument and every line is checked before any search: a line longer than
    the model's positions is a ValueError naming it (1-based). stop: beam_search's. progress: a bar
    of the sentences translated (tqdm, on stderr).
    """
    check_search_args("translate_lines", beam_size, nbest, alpha, max_len_a, max_len_b, batch_size, stop)
    ids = encode_lines(tokenizer, lines)
    longest = model.config.max_len - 1                                  # x </s> must fit the positions
    for n, s in enumerate(ids, 1):
        if len(s) > longest:
            raise ValueError(f"line {n} has {len(s):,} tokens, but the model's positions hold at most "
                             f"{longest:,} (max_len {model.config.max_len} with </s>): shorten or split it")
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [None] * len(ids)
    bar = tqdm(total=len(ids), disable=not progress, unit="sent", desc="translating", dynamic_ncols=True)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = [ids[i] for i in chunk]
        if beam_size == 1 and nbest == 1:
            hyps = [[h] for h in greedy_search(model, batch, max_len_a, max_len_b)]
        else:
            hyps = beam_search(model, batch, beam_size, alpha, max_len_a, max_len_b, nbest, stop=stop)
        for i, hs in zip(chunk, hyps):
            texts = [tokenizer.decode(h.tokens) for h in hs]
            out[i] = texts[0] if nbest == 1 else texts
        bar.update(len(chunk))
    bar.close()
    return out
