"""Decoding: greedy search and beam search (section 6.1: beam 4, length penalty alpha = 0.6, output
length up to input length + 50, stop early when possible), batched over sentences and beams, with
the key/value cache of multihead.py (or, use_cache=False, by recomputing the whole prefix each
step). The settings come in one config.SearchConfig, checked when it was made; the plain forms, one
sentence at a time and without the cache, are plain.greedy_search and plain.beam_search (lesson 10).

Conventions, shared by greedy_search, beam_search, their plain forms and the tests:
  * Sources are lists of token ids WITHOUT </s>; search appends eos_id to each (as data.Batch does
    for training: the model was trained on `x </s>`) and pads the batch with pad_id.
  * The output may hold at most max_len = int(max_len_a * len(x) + max_len_b) tokens (len(x)
    without the appended </s>; clamped so positions stay within config.max_len); at that length
    </s> is forced (every other token gets -inf, </s> keeps its log-probability).
  * log p comes from functional's log-softmax core (log_softmax_array: on the GPU, the fused
    kernel) of the logits in the model's dtype (float32), over the full vocabulary; <pad> and <s>
    are then forbidden (-inf, not renormalised).
  * A hypothesis y_1 .. y_n </s> has log_prob = sum of the n + 1 log p, </s> included, and
    |Y| = n + 1 counts the tokens INCLUDING </s> (an empty translation has |Y| = 1). Beam search
    ranks finished hypotheses by score = log_prob / lp(|Y|), lp = ((5 + |Y|) / 6) ** alpha (GNMT).
Left out on purpose: sampling, constraints, diverse beams, repetition penalties.
"""
from dataclasses import dataclass

import numpy as np

from . import backend
from .attention import padding_mask
from .config import SearchConfig
from .text.data import encode_sources
from .functional import log_softmax_array
from .tensor import Tensor
from .viz import collect_attention


@dataclass
class Hypothesis:
    """One output: tokens (ids, without <s> and </s>), score = log_prob / lp(|Y|) (greedy:
    log_prob), log_prob (summed, </s> included), attention: the cross-attention
    (n_layers, H, |Y|, len(x) + 1) as a NumPy array when asked for
    (beam_search(..., return_attention=True), best hypothesis only)."""
    tokens: list
    score: float
    log_prob: float
    attention: object = None


def length_penalty(length, alpha):
    """lp(|Y|) = ((5 + |Y|) / 6) ** alpha (GNMT, Wu et al. 2016), |Y| counting </s>: lp(1) = 1."""
    return ((5.0 + length) / 6.0) ** alpha


def _max_lengths(model, lens, max_len_a, max_len_b):
    """Per sentence, the most output tokens before </s> is forced: a * len(x) + b, within the
    position table."""
    limit = model.config.max_len - 1  # decoder inputs sit at positions 0 (<s>) .. max_len
    return np.clip((max_len_a * lens + max_len_b).astype(np.int64), 0, limit)


class _DecoderState:
    """The decoder side of a search: rows of prefixes (<s> y_1 .. y_t), their memory, and the cache;
    next_logits() for every row, select_rows() to reorder / drop rows, append() to extend each
    prefix.

    With the cache, memory and src_mask hold one row per sentence, shared by that sentence's rows
    (its beams: consecutive rows, as many for each sentence; cache.DecoderCache); without it, one
    per row."""

    def __init__(self, model, src, use_cache, max_len):
        c = model.config
        self.model = model
        self.pad_id = c.pad_id
        self.bos_id = c.bos_id
        self.eos_id = c.eos_id
        src = backend.asarray(src)
        self.src_mask = padding_mask(src, c.pad_id)                       # (R, 1, 1, S)
        self.memory = model.encode(src, self.src_mask)                    # (R, S, D), computed once
        # <s> y_1 .. y_max
        self.cache = model.init_cache(capacity=int(max_len.max()) + 1) if use_cache else None
        self.prefix = np.full((src.shape[0], 1), c.bos_id, dtype=np.int64)  # (R, t+1) on the host

    def next_logits(self, forced):
        """log p of the next token, (R, V) on the device: functional's log-softmax of the last
        logits, in place, then -inf for <pad>, <s>, and for all but </s> in the rows where `forced`
        (bool, (R,)). Plain form: plain.next_log_probs."""
        xp = backend.xp
        if self.cache is None:  # recompute the whole prefix: (R, t+1, V), keep the last position
            x = self.model.decode(self.prefix, self.memory, self.src_mask).data[:, -1]
        else:                   # one new position, the earlier keys and values come from the cache
            last = backend.asarray(self.prefix[:, -1:])
            x = self.model.decode(last, self.memory, self.src_mask,
                                  cache=self.cache).data[:, -1]       # (R, V)
        logp = log_softmax_array(x, out=x)                    # a new array: overwritten
        logp[:, [self.pad_id, self.bos_id]] = -xp.inf         # never emitted (not renormalised)
        rows = backend.asarray(np.flatnonzero(forced))        # only </s> may come there
        logp[rows] = xp.where(xp.arange(logp.shape[1]) == self.eos_id, logp[rows], -xp.inf)
        return logp

    def select_rows(self, rows, sentences=None, same=None):
        """Keep prefix rows `rows` (int array, repeats allowed) in that order. sentences: the memory
        rows kept (default: rows, one row per sentence); with the cache, the new rows form
        len(sentences) equal groups of consecutive rows, group i decoding sentence sentences[i].
        same (bool per new row): True where rows[i] and the old row i are beams of one sentence:
        the cache copies only the positions from the first token where their prefixes differ."""
        sentences = rows if sentences is None else sentences
        if self.cache is not None:
            shared = None
            if same is not None and same.any():       # (R', t+1): where prefixes differ
                differ = self.prefix[rows] != self.prefix[:len(rows)]
                shared = np.where(differ.any(1), differ.argmax(1), differ.shape[1]) * same
            self.cache.reorder(rows, memory_rows=sentences, shared=shared)
        else:
            sentences = rows                          # a memory row per prefix row
        self.prefix = self.prefix[rows]
        if len(sentences) != len(self.src_mask) or (sentences != np.arange(len(sentences))).any():
            idx = backend.asarray(sentences)
            self.memory = Tensor(self.memory.data[idx])
            self.src_mask = self.src_mask[idx]

    def append(self, tokens):
        self.prefix = np.concatenate([self.prefix, np.asarray(tokens, dtype=np.int64)[:, None]],
                                     axis=1)


def check_search(owner, search):
    """search is a SearchConfig (config.py checked its values when it was made): else one
    sentence."""
    if not isinstance(search, SearchConfig):
        raise TypeError(f"{owner}: search must be a SearchConfig, got {type(search).__name__} "
                        f"{search!r} (e.g. search=SearchConfig(beam_size=4, alpha=0.6))")


def greedy_search(model, src, search=SearchConfig(), *, use_cache=True):
    """Translate each source (a list of id lists without </s>) by taking the most likely token at
    every step until </s>. Returns one Hypothesis per source, score = log_prob (no length penalty).
    Of `search` it reads the length limits (max_len_a, max_len_b); the rest is beam search's.

    Sentences are decoded as one batch; a finished sentence leaves the batch (its rows are dropped).
    Plain form: plain.greedy_search (one sentence, no cache).
    """
    check_search("greedy_search", search)
    src_ids, lens = encode_sources(src, model.config.pad_id, model.config.eos_id)
    results = [None] * len(lens)
    if not len(lens):
        return results
    max_len = _max_lengths(model, lens, search.max_len_a, search.max_len_b)
    with model.inference_mode():
        step = _DecoderState(model, src_ids, use_cache, max_len)
        active = np.arange(len(lens))                                 # sentence of each row
        total = None
        xp = backend.xp
        for t in range(int(max_len.max()) + 1):
            logp = step.next_logits(forced=t >= max_len[active])      # (R, V)
            token = xp.argmax(logp, axis=-1)                          # (R,)
            lp = backend.to_numpy(logp[xp.arange(len(active)), token])
            _refuse_nan("greedy_search", backend.to_numpy(logp[:, step.eos_id]), t, active)
            token = backend.to_numpy(token)
            total = lp if total is None else total + lp               # summed in the model's dtype
            done = token == step.eos_id
            for r in np.flatnonzero(done):
                results[active[r]] = Hypothesis(step.prefix[r, 1:].tolist(), float(total[r]),
                                                float(total[r]))
            if done.all():
                break
            if done.any():
                rows = np.flatnonzero(~done)
                step.select_rows(rows)
                active = active[rows]
                total = total[rows]
                token = token[rows]
            step.append(token)
    return results


def beam_search(model, src, search=SearchConfig(), *, use_cache=True, return_attention=False):
    """Translate each source (a list of id lists without </s>) by beam search with the settings of
    `search` (k = beam_size, alpha, max_len_a, max_len_b, nbest, stop); per source, a list of
    `nbest` Hypotheses, best score first. Plain form: plain.beam_search (one sentence, no cache, no
    early stop).

    Every step extends the k alive prefixes of each sentence by every token and keeps
    the 2k best candidates by log_prob. Of those:
      * the </s> candidates among the first k become finished hypotheses, scored log_prob / lp(|Y|);
        a sentence keeps its k best;
      * the first k that do not end in </s> are the new alive beams (2k candidates always hold k:
        each beam gives at most one </s>).
    A sentence is done when no alive prefix can enter its `nbest` best finished hypotheses (the list
    returned; a later tie goes after them): log p only falls as a prefix grows, so an alive prefix
    can reach at best its log_prob over the largest lp of the lengths still open (stop="exact":
    tensor2tensor's bound, the list is final). stop="fast" waits for k finished and divides by the
    next length's lp, as if the prefix ended there (Hugging Face's way): sooner done, but with
    alpha > 0 it can miss a longer, better hypothesis (lesson 10). At max_len, </s> is forced.
    Step 0 runs one row per sentence (its k beams would all be <s>), later steps k rows per
    sentence.
    Note: with alpha > 0, beam_size=1 may go on after greedy search would stop, when a longer output
    could score better under lp. return_attention=True adds each best hypothesis's cross-attention
    (viz.collect_attention).
    """
    check_search("beam_search", search)
    config = model.config
    k = search.beam_size
    alpha = search.alpha
    nbest = search.nbest
    src_ids, lens = encode_sources(src, config.pad_id, config.eos_id)
    finished = [[] for _ in lens]  # per sentence: Hypotheses, best first, <= k
    if not len(lens):
        return []
    max_len = _max_lengths(model, lens, search.max_len_a, search.max_len_b)
    exact = search.stop == "exact"
    with model.inference_mode():
        step = _DecoderState(model, src_ids, use_cache, max_len)
        active = np.arange(len(lens))                          # the sentences still searched
        alive = np.zeros((len(lens), 1))                       # (Ba, n) log_prob of the prefixes
        for t in range(int(max_len.max()) + 1):
            n = alive.shape[1]                                 # beams per sentence: 1, then k
            logp = step.next_logits(np.repeat(t >= max_len[active], n))  # (Ba*n, V)
            alive = alive.astype(logp.dtype, copy=False)                 # sums in the model's dtype
            _refuse_nan("beam_search", backend.to_numpy(logp[:, step.eos_id]), t, active.repeat(n))
            scores, beam, token = _top_candidates(logp, alive, 2 * k)    # (Ba, 2k) each
            _finish(finished, active, step.prefix, n, scores[:, :k], beam[:, :k], token[:, :k],
                    t + 1, alpha, k, config.eos_id)
            # the alive beams: the first k candidates that do not end in </s>
            pick = np.argsort(token == config.eos_id, axis=1, kind="stable")[:, :k]  # (Ba, k)
            alive, beam, token = (np.take_along_axis(a, pick, 1) for a in (scores, beam, token))
            done = _done(finished, active, alive[:, 0], t, max_len, alpha,
                         nbest if exact else k, exact)
            if done.all():
                break
            # open sentences keep their rows; those past the new end move into the rows of
            # sentences done
            order = np.arange(len(done) - done.sum())          # (Ba',) new place -> old place
            order[done[:len(order)]] = len(order) + np.flatnonzero(~done[len(order):])
            # rows of the same sentence
            same = np.repeat((order == np.arange(len(order))) & (n == k), k)
            step.select_rows((order[:, None] * n + beam[order]).ravel(), order, same)
            step.append(token[order].ravel())
            alive = alive[order]
            active = active[order]
    results = [hyps[:nbest] for hyps in finished]
    if return_attention:
        for x, hyps in zip(src, results):
            hyps[0].attention = collect_attention(model, x, hyps[0].tokens)["cross"]
    return results


def _top_candidates(logp, alive, width):
    """The `width` best extensions per sentence, best first (ties: lower beam, then lower token), as
    host arrays (Ba, width): log_prob, beam, token; padded with (-inf, beam 0, <pad>) if too few.
    Plain form: plain.top_candidates (a stable sort of all n*V candidates).

    log_prob = logp + alive (logp (Ba*n, V) from next_logits, alive (Ba, n)), rounded as always, but
    made only where needed: each row is cut into nb blocks of tokens, and only the `width` blocks of
    a sentence with the best maxima are searched (rounding keeps the order: the best log_prob of a
    block is its best logp + alive). Nothing is lost: a candidate elsewhere is beaten by those
    `width` maxima (better, or equal and in a lower block: a lower index). Of the kept blocks'
    tokens, only those at least as good as the least kept maximum are sorted: each kept block holds
    one, so the best `width` are among them (usually a few dozen of the width * V / nb).
    """
    xp = backend.xp
    Ba, n = alive.shape
    V = logp.shape[1]
    nb = max(d for d in range(1, 33) if V % d == 0)  # blocks per row, of bs tokens each
    bs = V // nb
    alive = backend.asarray(alive).ravel()                        # (Ba*n,), per row
    blocks = logp.reshape(Ba * n * nb, bs)                        # (Ba*n*nb, bs)
    best = (blocks.max(axis=1).reshape(Ba * n, nb)
            + alive[:, None]).reshape(Ba, n * nb)                 # each block's best
    # (Ba, w), w <= width: in order
    keep = xp.sort(xp.argsort(-best, axis=1, kind="stable")[:, :width], axis=1)
    row = (xp.arange(Ba)[:, None] * n + keep // nb)[:, :, None]   # (Ba, w, 1)
    cand = (blocks[xp.arange(Ba)[:, None] * (n * nb) + keep]
            + alive[row]).reshape(Ba, -1)                         # (Ba, w*bs)
    # each kept block holds a candidate >= the least kept maximum, so the best ww are among those
    # >= it
    ww = min(width, cand.shape[1])
    theta = (xp.take_along_axis(best, keep, 1).min(axis=1, keepdims=True)
             if keep.shape[1] >= ww else -xp.inf)
    r, c = xp.nonzero(cand >= theta)               # (P,) each: by sentence, then index (a few each)
    by_score = xp.argsort(-cand[r, c], kind="stable")  # best first; ties keep the lower index first
    order = by_score[xp.argsort(r[by_score], kind="stable")]      # then by sentence
    first = xp.searchsorted(r[order], xp.arange(Ba))              # each sentence's first
    top = c[order][first[:, None] + xp.arange(ww)]                # (Ba, ww), best first
    scores = backend.to_numpy(xp.take_along_axis(cand, top, 1))   # (Ba, ww)
    idx = backend.to_numpy(xp.take_along_axis(keep, top // bs, 1) * bs
                           + top % bs)                            # beam * V + token
    if ww < width:                                 # too few candidates: -inf, beam 0, <pad>
        pad = ((0, 0), (0, width - ww))
        scores = np.pad(scores, pad, constant_values=-np.inf)
        idx = np.pad(idx, pad)
    return scores, idx // V, idx % V


def _refuse_nan(owner, values, t, active):
    """Refuse, in one sentence, a NaN among `values` (host; each row's log p of </s>; active: each
    row's source) at output position t: nothing could be ranked. A NaN or infinite logit makes
    its whole row of log p NaN (the row's sum of exponentials is NaN), </s>'s entry too, which
    next_logits never overwrites."""
    bad = np.flatnonzero(np.isnan(values))
    if bad.size:
        raise ValueError(f"{owner}: the model's log-probabilities are NaN at output position {t} "
                         f"of src[{int(active[bad[0]])}]: its weights or activations are not "
                         f"finite (a diverged training?), so nothing can be ranked")


def _finish(finished, active, prefix, n, scores, beam, token, length, alpha, k, eos_id):
    """Set aside the candidates that end in </s>: hypothesis of |Y| = length tokens, </s>
    included."""
    lp = length_penalty(length, alpha)
    for i, j in zip(*np.nonzero((token == eos_id) & np.isfinite(scores))):
        hyps = finished[active[i]]
        log_prob = float(scores[i, j])
        score = log_prob / lp
        if len(hyps) == k and score <= hyps[-1].score:
            continue
        # ties: first found first
        at = next((p for p, h in enumerate(hyps) if h.score < score), len(hyps))
        hyps.insert(at, Hypothesis(prefix[i * n + beam[i, j], 1:].tolist(), score, log_prob))
        del hyps[k:]


def _done(finished, active, best_alive, t, max_len, alpha, n, exact=True):
    """(Ba,) bool: at the maximum length, out of alive beams, or n finished hypotheses that no alive
    one can beat (exact: at any length still open; else ending at the next one, as beam_search's
    stop="fast")."""
    nth = np.array([h[n - 1].score if len(h) >= n else -np.inf
                    for h in (finished[s] for s in active)])
    lp_max = np.maximum(length_penalty(t + 2, alpha),
                        length_penalty(max_len[active] + 1, alpha) if exact else 0)
    best_possible = best_alive / lp_max             # best_alive <= 0: a larger lp only raises it
    return (t >= max_len[active]) | ~np.isfinite(best_alive) | (best_possible <= nth)
