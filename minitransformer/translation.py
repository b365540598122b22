"""Text in, text out: encode lines with a tokenizer, batch sentences of similar length, search
(search.py), decode. What evaluation, the translate subcommand and the examples call.
Left out on purpose: streaming input, sentence splitting, detokenisation beyond tokenizer.decode.
"""
from tqdm import tqdm

from .checks import FileError, check_int
from .config import SearchConfig
from .corpus import most_characters
from .search import beam_search, check_search, greedy_search


def encode_lines(tokenizer, lines):
    """Token ids of each line: tokenizer.encode_batch when it has one (BPE), else encode per line."""
    encode = getattr(tokenizer, "encode_batch", None) or (lambda xs: [tokenizer.encode(x) for x in xs])
    return encode(list(lines))


def one_line(text):
    """text with every line break (the ones str.splitlines knows: \\n, \\r, \\v, \\f, \\x85, \\u2028, \\u2029, ...)
    made a space, so that one line in gives one line out: one_line("a\\nb\\u2028c") -> "a b c"."""
    return " ".join(text.splitlines())


def encode_fitting(tokenizer, lines, max_len):
    """The ids of each line, if every line fits a model of max_len positions (x </s>), else a FileError
    naming the first line that does not (1-based; the caller names the file with in_file). Lines are
    measured in characters first (corpus.most_characters), so a huge line is refused before it costs
    any encoding."""
    longest = max_len - 1
    most = most_characters(tokenizer, longest)
    for n, line in enumerate(lines, 1):
        if len(line) > most:
            raise FileError(None, n, f"has {len(line):,} characters, more than {longest:,} tokens can spell "
                                     f"(max_len {max_len} with </s>): shorten or split it")
    ids = encode_lines(tokenizer, lines)
    for n, s in enumerate(ids, 1):
        if len(s) > longest:
            raise FileError(None, n, f"has {len(s):,} tokens, but the model's positions hold at most {longest:,} "
                                     f"(max_len {max_len} with </s>): shorten or split it")
    return ids


def translate_lines(model, tokenizer, lines, search=SearchConfig(), batch_size=64, progress=False):
    """Translate lines of text: encode with tokenizer.encode, batch sentences of similar length
    (batch_size sentences per batch), search with the settings of `search` (a SearchConfig),
    tokenizer.decode, every line break made a space (one_line). Returns a list of strings in the order of `lines`, or with search.nbest > 1 a
    list of n-best lists of strings. beam_size=1 with nbest=1 is greedy_search. Every argument and
    every line is checked before any search: a line longer than the model's positions is a
    checks.FileError naming it (1-based; the caller names the file with in_file). progress: a bar
    of the sentences translated (tqdm, on stderr).
    """
    check_search("translate_lines", search)
    check_int("translate_lines", "batch_size", batch_size, 1)
    ids = encode_fitting(tokenizer, list(lines), model.config.max_len)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [None] * len(ids)
    bar = tqdm(total=len(ids), disable=not progress, unit="sent", desc="translating", dynamic_ncols=True)
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
