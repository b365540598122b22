"""A parallel corpus: read it (two files, line i of one translating line i of the other), encode
both sides to token ids with one tokenizer, and check the id pairs before anything is batched.
Left out on purpose: streaming corpora larger than memory, alignment or filtering beyond empty and
too-long pairs.
"""
import itertools
from dataclasses import dataclass, field

import numpy as np

from .bpe import BPE
from ..checks import check_int, fail
from .fileio import read_lines


# ---------------------------------------------------------------- reading corpora
def read_parallel(src_path, tgt_path):
    """(source lines, target lines) of a parallel corpus of two files with as many lines each."""
    src = read_lines(src_path)
    tgt = read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"parallel files differ in length: {src_path} has {len(src):,} lines but "
                         f"{tgt_path} has {len(tgt):,}; "
                         "line i of one must translate line i of the other")
    return src, tgt


@dataclass
class EncodeReport:
    """What encode_pairs kept and skipped; str() gives a one-line summary."""
    total: int
    kept: int
    empty: int
    too_long: int
    max_len: int = None
    # the kept pairs' line numbers (0-based)
    indices: list = field(default_factory=list, repr=False)

    def summary(self):
        long = ""
        if self.max_len is not None:
            long = f", {self.too_long:,} longer than {self.max_len} tokens"
        return f"kept {self.kept:,} of {self.total:,} pairs ({self.empty:,} empty{long})"

    __str__ = summary


def most_characters(tokenizer, n_tokens):
    """The most characters a line spelled by n_tokens tokens can have: a byte-level BPE's token
    holds at most its longest token's bytes, and a character is at least one byte; no bound (inf)
    for another tokenizer. A longer line is too long before it is encoded (a 2 MB line costs no
    encoding time)."""
    if not isinstance(tokenizer, BPE):
        return float("inf")
    return n_tokens * max(map(len, tokenizer.vocab))


def encode_pairs(src_lines, tgt_lines, tokenizer, max_len=None):
    """Encode both sides with one joint tokenizer; drop pairs with an empty side, and pairs with a
    side longer than max_len tokens (counted without <s> and </s>; None: no limit). A side with
    more characters than max_len tokens can spell is dropped unencoded, so the time stays linear in
    the corpus.

    Returns (pairs, report): pairs is a list of (src_ids, tgt_ids) lists of ints.
    encode_pairs(["a b", ""], ["x", "y"], tok) -> ([([a, b], [x])], "kept 1 of 2 pairs (1 empty)")
    """
    if isinstance(src_lines, str) or isinstance(tgt_lines, str):
        raise TypeError("encode_pairs takes lists of lines, not a string: "
                        "split the text into lines first")
    check_int("encode_pairs", "max_len", max_len, 1, allow_none=True)             # None: no limit
    if len(src_lines) != len(tgt_lines):
        fail("encode_pairs", f"src_lines and tgt_lines must pair up, got {len(src_lines):,} "
             f"source lines but {len(tgt_lines):,} target lines", ("src_lines", "tgt_lines"))
    encode_batch = getattr(tokenizer, "encode_batch", None)
    if encode_batch is None:
        encode_batch = lambda xs: [tokenizer.encode(x) for x in xs]
    limit = most_characters(tokenizer, max_len) if max_len is not None else float("inf")
    fits = [len(s) <= limit and len(t) <= limit for s, t in zip(src_lines, tgt_lines)]
    src_ids = encode_batch([s if ok else "" for s, ok in zip(src_lines, fits)])
    tgt_ids = encode_batch([t if ok else "" for t, ok in zip(tgt_lines, fits)])
    pairs = []
    indices = []
    empty = 0
    too_long = 0
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        if not src_lines[i].strip() or not tgt_lines[i].strip():
            empty += 1
        elif not fits[i] or (max_len is not None and (len(s) > max_len or len(t) > max_len)):
            too_long += 1
        elif not s or not t:  # text that the tokenizer turned into no id
            empty += 1
        else:
            pairs.append((list(s), list(t)))
            indices.append(i)
    return pairs, EncodeReport(len(src_ids), len(pairs), empty, too_long, max_len, indices)


def load_pairs(src_path, tgt_path, tokenizer, max_len=None):
    """read_parallel then encode_pairs: (pairs, report) for a corpus on disk."""
    src, tgt = read_parallel(src_path, tgt_path)
    return encode_pairs(src, tgt, tokenizer, max_len)


def check_pairs(pairs, pad_id, bos_id, eos_id, ids=None):
    """Refuse, naming the first bad pair (ids[i] for pair i when given), what a Batch would get
    silently wrong: <pad> sharing an id with <s> or </s>; a side that is text, or holds other than
    integer ids >= 0; <pad>, <s> or </s> inside a sentence (Batch adds <s> and </s>, and takes
    <pad> for padding). One vectorised pass when all is well; the pairs are searched one by one
    only to name a fault."""
    for name, value in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer token id, got {value!r}")
    if pad_id in (bos_id, eos_id):
        other = "bos_id" if pad_id == bos_id else "eos_id"
        fail("check_pairs", f"pad_id {pad_id} is also the {other}: padding is masked out of "
             "attention and of the loss, so that token would be too; give <pad> its own id",
             "pad_id", pad_id)
    specials = {pad_id: "<pad>", bos_id: "<s>", eos_id: "</s>"}
    bad = next((i for i, p in enumerate(pairs) if not _is_pair(p)), None)
    if bad is not None:
        shown = " ".join(str(pairs[bad]).split())[:60]
        raise TypeError("pairs must be (source ids, target ids) pairs of token id lists, as "
                        f"encode_pairs makes them; pair {bad if ids is None else ids[bad]} "
                        f"is {shown}")
    flat = list(itertools.chain.from_iterable(s for p in pairs for s in p))
    if all(issubclass(t, (int, np.integer)) and t is not bool for t in set(map(type, flat))):
        values = np.array(flat, dtype=np.int64)
        if not ((values < 0) | np.isin(values, list(specials))).any():
            return
    for i, pair in enumerate(pairs):  # something is wrong: find the first, to name it
        for side, sentence in zip(("source", "target"), pair):
            for k, v in enumerate(sentence):
                an_id = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                where = f"pair {i if ids is None else ids[i]}'s {side} holds"
                if an_id and v in specials:
                    raise ValueError(f"{where} {specials[v]} ({v}) at position {k}: a pair holds "
                                     "the ids of its sentences alone (Batch adds <s> and </s>, "
                                     "and takes <pad> for padding)")
                if not an_id or v < 0:
                    raise ValueError(f"{where} {repr(v)[:30]} at position {k}, which is no token "
                                     "id (an integer of at least 0)")


def _is_pair(p):
    """p is two sequences (neither a str), as a pair of token id lists is."""
    if not (isinstance(p, (tuple, list)) and len(p) == 2):
        return False
    return not any(isinstance(s, str) or not hasattr(s, "__len__") for s in p)
