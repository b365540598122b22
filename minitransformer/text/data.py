"""Batches: group sentence pairs (corpus.py makes them) by length into batches of about
`max_tokens` tokens (section 5.1), pad them and build the attention masks; and pad the sources
of a search.

Batches are planned on the host from lengths alone; each batch's arrays go to the device once.
The batch order is a pure function of (seed, epoch), so training resumes exactly from a position
(epoch, index). Left out on purpose: streaming corpora larger than memory, multiple workers.
"""
import itertools
import operator

import numpy as np

from .. import backend
from ..checks import check_max_tokens, fail
from .corpus import check_pairs


# ---------------------------------------------------------------- one batch
def pad(seqs, pad_id, length=None, start=None, end=None):
    """Stack int sequences into one (len(seqs), length) int64 array, filling with pad_id; `start` /
    `end` (ids) are put before / after each sequence when given.

    pad([[5, 6, 7], [8]], 0) -> [[5, 6, 7], [8, 0, 0]]
    pad([[5], [8, 9]], 0, end=2) -> [[5, 2, 0], [8, 9, 2]]
    """
    lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    first = int(start is not None)
    extra = first + int(end is not None)
    length = int(lens.max(initial=0)) + extra if length is None else length
    out = np.full((len(seqs), length), pad_id, dtype=np.int64)
    # one vectorised scatter instead of a Python loop over rows
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
    out[:, first:][np.arange(length - first) < lens[:, None]] = flat
    if start is not None:
        out[:, 0] = start
    if end is not None:
        out[np.arange(len(seqs)), lens + first] = end
    return out


def encode_sources(src, pad_id, eos_id):
    """Sources for search, encoded as Batch encodes them: a list of id lists (without </s>) ->
    (B, S) int64 NumPy array of `x </s>` padded with pad_id, and the lengths len(x) (without </s>).

    encode_sources([[5, 6], [7]], 0, 2) -> ([[5, 6, 2], [7, 2, 0]], [2, 1])
    """
    if isinstance(src, np.ndarray) and src.ndim == 2 or hasattr(src, "__cuda_array_interface__"):
        raise TypeError("search takes a list of source id lists (no padding, no </s>), "
                        "not a padded array")
    src = [src] if isinstance(src, str) else list(src)
    if any(isinstance(s, str) for s in src):
        raise TypeError("search takes token ids, not text: encode each sentence first (BPE.encode)")
    try:
        src = [list(map(operator.index, s)) for s in src]     # 3.0 or "3" is no token id
    except TypeError:
        raise TypeError("search takes a list of sentences, each a list of integer token ids "
                        f"([[5, 6, 7], [8]]), got {str(src)[:60]}") from None
    for i, s in enumerate(src):
        if pad_id in s or eos_id in s:
            fail("search", f"source {i} contains <pad> ({pad_id}) or </s> ({eos_id}): pass the ids "
                 "of the sentence alone; search appends </s> itself", "src")
    return pad(src, pad_id, end=eos_id), np.array([len(s) for s in src], dtype=np.int64)


class Batch:
    """One padded batch of sentence pairs, ready for Transformer.forward, on the current backend.

    src     (B, S) ids of x </s>                 src_mask (B, 1, 1, S)  True at real source tokens
    tgt_in  (B, T) ids of <s> y  (decoder input) tgt_mask (B, 1, T, T)  real target token and causal
    tgt_out (B, T) ids of y </s> (to predict)
    Masks are boolean, True where attention is allowed, broadcastable to (B, H, T_q, T_k).
    Note: the source ends with </s>, as in tensor2tensor and fairseq; search must encode sources
    the same way (src_ids + [eos_id]). n_src_tokens / n_tgt_tokens count non-pad tokens of
    src / tgt_out (Python ints, known without a device sync); `ids`: the pairs' dataset positions.
    """

    def __init__(self, pairs, pad_id, bos_id, eos_id, ids=None):
        xs = [s for s, _ in pairs]
        ys = [t for _, t in pairs]
        src = pad(xs, pad_id, end=eos_id)                                    # (B, S)  x </s>
        tgt_in = pad(ys, pad_id, start=bos_id)                               # (B, T)  <s> y
        tgt_out = pad(ys, pad_id, end=eos_id)                                # (B, T)  y </s>
        self.n_src_tokens = sum(map(len, xs)) + len(xs)
        self.n_tgt_tokens = sum(map(len, ys)) + len(ys)
        # the masks of attention.py (padding_mask, causal_mask), made here on the host with NumPy
        src_real = src != pad_id
        tgt_real = tgt_in != pad_id
        # a <pad> inside a sentence: check_pairs names the pair
        if src_real.sum() != self.n_src_tokens or tgt_real.sum() != self.n_tgt_tokens:
            check_pairs(pairs, pad_id, bos_id, eos_id, ids)
        causal = np.tril(np.ones((tgt_in.shape[1],) * 2, dtype=bool))     # (T, T): key j <= query i
        src_mask = src_real[:, None, None, :]                               # (B, 1, 1, S)
        tgt_mask = tgt_real[:, None, None, :] & causal                      # (B, 1, T, T)
        self.src = backend.asarray(src)
        self.tgt_in = backend.asarray(tgt_in)
        self.tgt_out = backend.asarray(tgt_out)
        self.src_mask = backend.asarray(src_mask)
        self.tgt_mask = backend.asarray(tgt_mask)
        self.ids = None if ids is None else np.asarray(ids)

    def __len__(self):
        return self.src.shape[0]

    def __repr__(self):
        return (f"Batch(B={len(self)}, S={self.src.shape[1]}, T={self.tgt_in.shape[1]}, "
                f"src_tokens={self.n_src_tokens}, tgt_tokens={self.n_tgt_tokens})")


# ---------------------------------------------------------------- batching by tokens
def _lengths(pairs):
    """Padded lengths per pair: source x </s> and target <s> y (= y </s>), as int64 arrays."""
    src = np.fromiter((len(s) + 1 for s, _ in pairs), dtype=np.int64, count=len(pairs))
    tgt = np.fromiter((len(t) + 1 for _, t in pairs), dtype=np.int64, count=len(pairs))
    return src, tgt


def count_over_budget(pairs, max_tokens):
    """How many pairs are longer than max_tokens padded on either side (each is a batch alone)."""
    src_len, tgt_len = _lengths(pairs)
    return int((np.maximum(src_len, tgt_len) > max_tokens).sum())


def _cut(order, src_len, tgt_len, max_tokens):
    """Cut `order` into consecutive runs where
    len(run) * max(padded length, either side) <= max_tokens.

    _cut([0, 1, 2], src_len=[2, 2, 3], tgt_len=[2, 2, 2], max_tokens=6) -> [[0, 1], [2]]
    (all three would pad to length 3: 3 * 3 = 9 > 6)
    """
    lengths = np.maximum(src_len[order], tgt_len[order]).tolist()
    batches = []
    start = 0
    longest = 0
    for i, n in enumerate(lengths):
        longest_with = max(longest, n)
        if i > start and (i - start + 1) * longest_with > max_tokens:
            batches.append(order[start:i])
            start = i
            longest_with = n
        longest = longest_with
    if len(lengths) > start:
        batches.append(order[start:])
    return batches


def batch_by_tokens(pairs, max_tokens, seed=0, shuffle=True, epoch=0):
    """Plan one epoch: a list of index arrays into `pairs`, each batch within `max_tokens`.

    Pairs are sorted by (source length, target length) with a random tie-break, so that a batch
    holds pairs of similar lengths and little padding (section 5.1: "batched together by
    approximate sequence length"), then cut so that batch_size * longest padded length (x </s> or
    <s> y) <= max_tokens on each side; padding counts. A single pair longer than max_tokens becomes
    a batch of its own (over the budget: it is never dropped). With shuffle, the batch order and the
    tie-break come from np.random.default_rng((seed, epoch)): each epoch differs, and is
    reproducible. Without shuffle the batches come sorted by length, ties in corpus order.
    """
    check_max_tokens("batch_by_tokens", max_tokens)
    src_len, tgt_len = _lengths(pairs)
    rng = np.random.default_rng((seed, epoch)) if shuffle else None
    tie = rng.permutation(len(pairs)) if shuffle else np.arange(len(pairs))
    order = np.lexsort((tie, tgt_len, src_len))  # last key sorts first
    batches = _cut(order, src_len, tgt_len, max_tokens)
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


class BatchIterator:
    """An endless stream of Batches over `pairs`, epoch after epoch, that can be saved and resumed.

    it = BatchIterator(pairs, max_tokens=4096, pad_id=0, bos_id=1, eos_id=2, seed=1)
    batch = next(it)                 # epoch 0, batch 0; after the last batch of an epoch, epoch + 1
    state = it.state_dict()          # {"epoch": 0, "index": 1, ...}: JSON-able
    it2 = BatchIterator(pairs, ...)
    it2.load_state_dict(state)       # the same batches from here on
    For one ordered pass (evaluation), use it.epoch_batches(), ideally with shuffle=False.
    """

    def __init__(self, pairs, max_tokens, pad_id, bos_id, eos_id, seed=0, shuffle=True):
        if not isinstance(pairs, list):  # a generator, a tuple, an array of pairs
            pairs = list(pairs)
        if not pairs:
            fail("BatchIterator", "no sentence pairs to train on: the corpus is empty, "
                 "or every pair was empty or too long", "pairs")
        check_pairs(pairs, pad_id, bos_id, eos_id)
        check_max_tokens("BatchIterator", max_tokens)
        self.pairs = pairs
        self.max_tokens = int(max_tokens)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.epoch = 0  # the position of the next batch: epoch and index
        self.index = 0
        self._plan = None
        self._plan_epoch = None

    def plan(self, epoch=None):
        """The index arrays of one epoch's batches (cached for the current epoch)."""
        epoch = self.epoch if epoch is None else epoch
        if self._plan_epoch != epoch:
            self._plan = batch_by_tokens(self.pairs, self.max_tokens, self.seed, self.shuffle,
                                         epoch)
            self._plan_epoch = epoch
        return self._plan

    def __len__(self):
        """Batches per epoch (the same every epoch: cuts depend on the sorted lengths only)."""
        return len(self.plan())

    def make_batch(self, idx):
        return Batch([self.pairs[i] for i in idx], self.pad_id, self.bos_id, self.eos_id, ids=idx)

    def __iter__(self):
        return self

    def __next__(self):
        return self.make_batch(self.next_indices())

    def next_indices(self):
        """The pair indices of the next batch, moving the stream on, without building the batch
        (a data-parallel rank builds only its own batches of an update, but counts the tokens of
        all of them)."""
        plan = self.plan()
        if self.index >= len(plan):
            self.epoch += 1
            self.index = 0
            plan = self.plan()
        self.index += 1
        return plan[self.index - 1]

    def target_tokens(self, idx):
        """make_batch(idx).n_tgt_tokens without building it: each pair's target ids plus </s>."""
        return sum(len(self.pairs[i][1]) for i in idx) + len(idx)

    def epoch_batches(self, epoch=None):
        """The Batches of one whole epoch, in order, without moving the stream's position."""
        for idx in self.plan(epoch):
            yield self.make_batch(idx)

    def state_dict(self):
        """The position (epoch, index of the next batch) and what the plan depends on; JSON-able."""
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed,
                "max_tokens": self.max_tokens, "shuffle": self.shuffle, "n_pairs": len(self.pairs)}

    def load_state_dict(self, state):
        """Resume at a saved position; the data and the batching settings must be the same."""
        mine = self.state_dict()
        for key in ("seed", "max_tokens", "shuffle", "n_pairs"):
            if state[key] != mine[key]:
                raise ValueError("cannot resume the batch stream: it was saved with "
                                 f"{key}={state[key]!r} but this one has {key}={mine[key]!r}")
        batches = len(self.plan(int(state["epoch"])))
        if not 0 <= int(state["index"]) <= batches:
            raise ValueError(f"cannot resume the batch stream: its batch index {state['index']:,} "
                             f"is past the {batches:,} batches of an epoch")
        self.epoch = int(state["epoch"])
        self.index = int(state["index"])
