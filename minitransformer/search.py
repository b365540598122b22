"""Decoding: greedy search and beam search (section 6.1: beam 4, length penalty alpha = 0.6, output
length up to input length + 50, stop early when possible), batched over sentences and beams, with the
key/value cache of attention.py (or, use_cache=False, by recomputing the whole prefix each step).

Conventions, shared by greedy_search, beam_search and the tests:
  * Sources are lists of token ids WITHOUT </s>; search appends eos_id to each (as data.Batch does
    for training: the model was trained on `x </s>`) and pads the batch with pad_id.
  * The output may hold at most max_len = int(max_len_a * len(x) + max_len_b) tokens (len(x) without
    the appended </s>; clamped so positions stay within config.max_len); at that length </s> is forced
    (every other token gets -inf, </s> keeps its log-probability).
  * log p comes from log_softmax of the logits in the model's dtype (float32), over the full
    vocabulary; <pad> and <s> are then forbidden (-inf, not renormalised).
  * A hypothesis y_1 .. y_n </s> has log_prob = sum of the n + 1 log p, </s> included, and
    |Y| = n + 1 counts the tokens INCLUDING </s> (an empty translation has |Y| = 1). Beam search
    ranks finished hypotheses by score = log_prob / lp(|Y|), lp = ((5 + |Y|) / 6) ** alpha (GNMT).
Left out on purpose: sampling, constraints, diverse beams, repetition penalties.
"""
from dataclasses import dataclass

import numpy as np

from . import backend
from . import functional as F
from .attention import padding_mask
from .config import check_int, check_real
from .data import encode_sources
from .tensor import Tensor


@dataclass
class Hypothesis:
    """One output: tokens (ids, without <s> and </s>), score = log_prob / lp(|Y|) (greedy: log_prob),
    log_prob (summed, </s> included), attention: the cross-attention (n_layers, H, |Y|, len(x) + 1)
    as a NumPy array when asked for (beam_search(..., return_attention=True), best hypothesis only)."""
    tokens: list
    score: float
    log_prob: float
    attention: object = None


def length_penalty(length, alpha):
    """lp(|Y|) = ((5 + |Y|) / 6) ** alpha (GNMT, Wu et al. 2016), |Y| counting </s>: lp(1) = 1."""
    return ((5.0 + length) / 6.0) ** alpha


def _max_lengths(model, lens, max_len_a, max_len_b):
    """Per sentence, the most output tokens before </s> is forced: a * len(x) + b, within the position table."""
    limit = model.config.max_len - 1  # decoder inputs sit at positions 0 (<s>) .. max_len
    return np.clip((max_len_a * lens + max_len_b).astype(np.int64), 0, limit)


class _DecoderState:
    """The decoder side of a search: rows of prefixes (<s> y_1 .. y_t), their memory, and the cache.

    log_probs() gives log p of the next token for every row; select_rows(rows) reorders / drops rows
    (beam selection, finished sentences); append(tokens) extends every prefix by one token.
    """

    def __init__(self, model, src, use_cache):
        c = model.config
        self.model, self.pad_id, self.bos_id, self.eos_id = model, c.pad_id, c.bos_id, c.eos_id
        src = backend.asarray(src)
        self.src_mask = padding_mask(src, c.pad_id)                       # (R, 1, 1, S)
        self.memory = model.encode(src, self.src_mask)                    # (R, S, D), computed once
        self.cache = model.init_cache() if use_cache else None
        self.prefix = np.full((src.shape[0], 1), c.bos_id, dtype=np.int64)  # (R, t+1) on the host

    def log_probs(self, forced=None):
        """(R, V) log p of the next token; rows where `forced` (bool, (R,)) is True may only emit </s>."""
        xp = backend.xp
        if self.cache is None:  # recompute the whole prefix: (R, t+1, V), keep the last position
            logits = self.model.decode(self.prefix, self.memory, self.src_mask).data[:, -1]
        else:                   # one new position, the earlier keys and values come from the cache
            last = backend.asarray(self.prefix[:, -1:])
            logits = self.model.decode(last, self.memory, self.src_mask, cache=self.cache).data[:, -1]
        y = F.log_softmax(Tensor(logits)).data                            # (R, V), in the model's dtype
        y[:, [self.pad_id, self.bos_id]] = -xp.inf                        # never emitted
        if forced is not None and forced.any():
            rows = backend.asarray(np.flatnonzero(forced))
            eos = y[rows, self.eos_id]
            y[rows] = -xp.inf
            y[rows, self.eos_id] = eos
        return y

    def select_rows(self, rows, same_sentences=False):
        """Keep prefix rows `rows` (int array, repeats allowed) in that order. same_sentences=True
        promises that every new row i comes from a row of the same sentence as the old row i, so
        the memory, the mask and the encoder-decoder keys and values need not move."""
        self.prefix = self.prefix[rows]
        if self.cache is not None:
            self.cache.reorder(rows, include_memory=not same_sentences)
        if not same_sentences:
            idx = backend.asarray(rows)
            self.memory, self.src_mask = Tensor(self.memory.data[idx]), self.src_mask[idx]

    def append(self, tokens):
        self.prefix = np.concatenate([self.prefix, np.asarray(tokens, dtype=np.int64)[:, None]], axis=1)


def greedy_search(model, src, max_len_a=1, max_len_b=50, use_cache=True):
    """Translate each source (a list of id lists without </s>) by taking the most likely token at
    every step until </s>. Returns one Hypothesis per source, score = log_prob (no length penalty).

    Sentences are decoded as one batch; a finished sentence leaves the batch (its rows are dropped).
    """
    check_search_args("greedy_search", max_len_a=max_len_a, max_len_b=max_len_b)
    src_ids, lens = encode_sources(src, model.config.pad_id, model.config.eos_id)
    results = [None] * len(lens)
    if not len(lens):
        return results
    max_len = _max_lengths(model, lens, max_len_a, max_len_b)
    with model.inference_mode():
        step = _DecoderState(model, src_ids, use_cache)
        active = np.arange(len(lens))                                     # sentence of each row
        total, xp = None, backend.xp
        for t in range(int(max_len.max()) + 1):
            logp = step.log_probs(forced=t >= max_len[active])          # (R, V)
            token = xp.argmax(logp, axis=-1)                               # (R,)
            lp = backend.to_numpy(logp[xp.arange(len(active)), token])
            token = backend.to_numpy(token)
            total = lp if total is None else total + lp                   # summed in the model's dtype
            done = token == step.eos_id
            for r in np.flatnonzero(done):
                results[active[r]] = Hypothesis(step.prefix[r, 1:].tolist(), float(total[r]), float(total[r]))
            if done.all():
                break
            if done.any():
                rows = np.flatnonzero(~done)
                step.select_rows(rows)
                active, total, token = active[rows], total[rows], token[rows]
            step.append(token)
    return results


def beam_search(model, src, beam_size=4, alpha=0.6, max_len_a=1, max_len_b=50, nbest=1,
                use_cache=True, return_attention=False):
    """Translate each source (a list of id lists without </s>) by beam search; per source, a list of
    `nbest` Hypotheses, best score first.

    Every step extends the k = beam_size alive prefixes of each sentence by every token and keeps
    the 2k best candidates by log_prob. Of those:
      * the </s> candidates among the first k become finished hypotheses, scored log_prob / lp(|Y|);
        a sentence keeps its k best;
      * the first k that do not end in </s> are the new alive beams (2k candidates always hold k:
        each beam gives at most one </s>).
    A sentence is done when it has k finished hypotheses and no alive prefix can beat the worst of
    them: log p only falls as a prefix grows, so the best an alive prefix can reach is its log_prob
    divided by the largest lp over the lengths still open. At max_len, </s> is forced.
    Step 0 starts k beams per sentence from <s>, beam 0 with log_prob 0 and the others with -inf,
    so that the first step's candidates all come from one beam and every step has the same shape.
    Note: with alpha > 0, beam_size=1 may go on after greedy search would stop, when a longer
    output could score better under lp. return_attention=True adds the cross-attention of each
    sentence's best hypothesis (collect_attention).
    """
    check_search_args("beam_search", beam_size, nbest, alpha, max_len_a, max_len_b)
    config, k = model.config, beam_size
    src_ids, lens = encode_sources(src, config.pad_id, config.eos_id)
    finished = [[] for _ in lens]                         # per sentence: Hypotheses, best first, <= k
    if not len(lens):
        return []
    max_len = _max_lengths(model, lens, max_len_a, max_len_b)
    with model.inference_mode():
        step = _DecoderState(model, src_ids, use_cache)
        step.select_rows(np.repeat(np.arange(len(lens)), k))          # k rows per sentence
        active = np.arange(len(lens))                                  # the sentences still searched
        alive = np.full((len(lens), k), -np.inf)                       # (Ba, k) log_prob of the prefixes
        alive[:, 0] = 0.0
        for t in range(int(max_len.max()) + 1):
            logp = step.log_probs(forced=np.repeat(t >= max_len[active], k))        # (Ba*k, V)
            alive = alive.astype(logp.dtype, copy=False)                           # sums in the model's dtype
            scores, beam, token = _top_candidates(logp, alive, 2 * k)              # (Ba, 2k) each
            _finish(finished, active, step.prefix, k, scores[:, :k], beam[:, :k], token[:, :k],
                    t + 1, alpha, k, config.eos_id)
            # the alive beams: the first k candidates that do not end in </s>
            pick = np.argsort(token == config.eos_id, axis=1, kind="stable")[:, :k]  # (Ba, k)
            alive, beam, token = (np.take_along_axis(a, pick, 1) for a in (scores, beam, token))
            done = _done(finished, active, alive[:, 0], t, max_len, alpha, k)
            if done.all():
                break
            still_open = ~done
            rows = (np.arange(len(active))[:, None] * k + beam)[still_open].ravel()  # prefix rows kept
            step.select_rows(rows, same_sentences=still_open.all())
            step.append(token[still_open].ravel())
            alive, active = alive[still_open], active[still_open]
    results = [hyps[:nbest] for hyps in finished]
    if return_attention:
        for x, hyps in zip(src, results):
            hyps[0].attention = collect_attention(model, x, hyps[0].tokens)["cross"]
    return results


def _top_candidates(logp, alive, width):
    """The `width` best extensions per sentence, best first, as host arrays (Ba, width): their
    log_prob, the beam they extend and their token. Too few candidates: padded with (-inf, beam 0, <pad>)."""
    xp = backend.xp
    Ba, n = alive.shape
    V = logp.shape[1]
    cand = (logp.reshape(Ba, n, V) + backend.asarray(alive)[:, :, None]).reshape(Ba, n * V)  # (Ba, n*V)
    w = min(width, n * V)
    if w < n * V:
        top = xp.argpartition(cand, n * V - w, axis=1)[:, n * V - w:]              # (Ba, w) unordered
    else:
        top = xp.broadcast_to(xp.arange(n * V), (Ba, n * V))
    top_scores = xp.take_along_axis(cand, top, axis=1)
    order = xp.argsort(-top_scores, axis=1)
    scores = backend.to_numpy(xp.take_along_axis(top_scores, order, axis=1))      # (Ba, w)
    idx = backend.to_numpy(xp.take_along_axis(top, order, axis=1))
    if w < width:
        scores = np.pad(scores, ((0, 0), (0, width - w)), constant_values=-np.inf)
        idx = np.pad(idx, ((0, 0), (0, width - w)), constant_values=0)            # beam 0, token 0 = <pad>
    return scores, idx // V, idx % V


def _finish(finished, active, prefix, n, scores, beam, token, length, alpha, k, eos_id):
    """Set aside the candidates that end in </s>: hypothesis of |Y| = length tokens, </s> included."""
    lp = length_penalty(length, alpha)
    for i, j in zip(*np.nonzero((token == eos_id) & np.isfinite(scores))):
        hyps, log_prob = finished[active[i]], float(scores[i, j])
        score = log_prob / lp
        if len(hyps) == k and score <= hyps[-1].score:
            continue
        at = next((p for p, h in enumerate(hyps) if h.score < score), len(hyps))   # ties: first found first
        hyps.insert(at, Hypothesis(prefix[i * n + beam[i, j], 1:].tolist(), score, log_prob))
        del hyps[k:]


def _done(finished, active, best_alive, t, max_len, alpha, k):
    """(Ba,) bool: at the maximum length, out of alive beams, or k finished that no alive one can beat."""
    worst = np.array([h[-1].score if len(h) == k else -np.inf for h in (finished[s] for s in active)])
    lp_max = np.maximum(length_penalty(t + 2, alpha), length_penalty(max_len[active] + 1, alpha))
    best_possible = best_alive / lp_max                 # best_alive <= 0: a larger lp only raises it
    return (t >= max_len[active]) | ~np.isfinite(best_alive) | (best_possible <= worst)


def collect_attention(model, src_ids, tgt_ids):
    """The attention weights of every layer for one sentence pair, from one teacher-forced forward pass.

    src_ids: source ids WITHOUT </s> (appended, as in search.py); tgt_ids: output ids without <s> and
    </s> (a translation's Hypothesis.tokens). With S = len(src_ids) + 1, T = len(tgt_ids) + 1, returns
    NumPy arrays: "encoder" (n_layers, H, S, S), "decoder" (n_layers, H, T, T), "cross" (n_layers, H, T, S),
    and the ids on their axes: "src" (x </s>), "tgt_in" (<s> y, the decoder's queries and its
    self-attention keys) and "tgt_out" (y </s>: query i predicts tgt_out[i]).
    """
    c = model.config
    src, _ = encode_sources([src_ids], c.pad_id, c.eos_id)                 # (1, S)
    tgt_in = np.array([[c.bos_id] + [int(i) for i in tgt_ids]], dtype=np.int64)  # (1, T)
    groups = {"encoder": [layer.self_attn for layer in model.encoder.layers],
              "decoder": [layer.self_attn for layer in model.decoder.layers],
              "cross": [layer.cross_attn for layer in model.decoder.layers]}
    modules = [m for group in groups.values() for m in group]
    for m in modules:
        m.recorded = []                                                    # the recording switch: on
    try:
        with model.inference_mode():
            model(backend.asarray(src), backend.asarray(tgt_in))
        weights = {name: np.stack([backend.to_numpy(m.recorded[0][0]) for m in group])  # (n_layers, H, Tq, Tk)
                   for name, group in groups.items()}
    finally:
        for m in modules:
            m.recorded = None                                              # ... and off
    return {**weights, "src": src[0].tolist(), "tgt_in": tgt_in[0].tolist(),
            "tgt_out": tgt_in[0, 1:].tolist() + [c.eos_id]}


def check_search_args(owner, beam_size=1, nbest=1, alpha=0.0, max_len_a=1.0, max_len_b=50, batch_size=1):
    """Refuse, in one sentence naming the argument, search settings that make no sense."""
    check_int(owner, "beam_size", beam_size, 1)
    check_int(owner, "nbest", nbest, 1)
    if nbest > beam_size:
        raise ValueError(f"{owner}: nbest ({nbest}) cannot exceed beam_size ({beam_size})")
    check_real(owner, "alpha", alpha, 0.0)
    check_real(owner, "max_len_a", max_len_a, 0.0)
    check_int(owner, "max_len_b", max_len_b, 0)
    if max_len_a == 0 and max_len_b == 0:
        raise ValueError(f"{owner}: max_len_a and max_len_b are both 0: every translation would be empty")
    check_int(owner, "batch_size", batch_size, 1)


def translate_lines(model, tokenizer, lines, beam_size=4, alpha=0.6, max_len_a=1, max_len_b=50, nbest=1,
                    batch_size=64):
    """Translate lines of text: encode with tokenizer.encode, batch sentences of similar length
    (batch_size sentences per batch), search, tokenizer.decode. Returns a list of strings in the order
    of `lines`, or with nbest > 1 a list of n-best lists of strings. beam_size=1 with nbest=1 is
    greedy_search. Every argument and every line is checked before any search: a line longer than
    the model's positions is a ValueError naming it (1-based).
    """
    check_search_args("translate_lines", beam_size, nbest, alpha, max_len_a, max_len_b, batch_size)
    encode = getattr(tokenizer, "encode_batch", None) or (lambda xs: [tokenizer.encode(x) for x in xs])
    ids = encode(list(lines))
    longest = model.config.max_len - 1                                  # x </s> must fit the positions
    for n, s in enumerate(ids, 1):
        if len(s) > longest:
            raise ValueError(f"line {n} has {len(s):,} tokens, but the model's positions hold at most "
                             f"{longest:,} (max_len {model.config.max_len} with </s>): shorten or split it")
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [None] * len(ids)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = [ids[i] for i in chunk]
        if beam_size == 1 and nbest == 1:
            hyps = [[h] for h in greedy_search(model, batch, max_len_a, max_len_b)]
        else:
            hyps = beam_search(model, batch, beam_size, alpha, max_len_a, max_len_b, nbest)
        for i, hs in zip(chunk, hyps):
            texts = [tokenizer.decode(h.tokens) for h in hs]
            out[i] = texts[0] if nbest == 1 else texts
    return out
