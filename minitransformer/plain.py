"""The plain form of every fast path: the algorithms as a reader first meets them, in lesson order.

Each function is the shortest correct code for one idea, from the engine's elementary Tensor ops
(autograd gives the gradients) or plain NumPy. The fast versions (functional, attention,
multihead, optim, search) name their plain forms here, and the tests hold the two equal.
Left out on purpose: speed (no fused backward, no flat buffers, no cache, one sentence at a time).
"""
import math

import numpy as np

from . import backend
from .ops import where
from .tensor import Tensor, data_of


# ------------------------------------------------------------ softmax and friends (lesson 04)
def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) over `axis`; the max, a constant, only stops overflow.
    Fast form: functional.softmax (softmax_array: no graph)."""
    shifted = x - x.max(axis, keepdims=True).detach()
    e = shifted.exp()
    return e / e.sum(axis, keepdims=True)


def log_softmax(x, axis=-1):
    """(x - max) - log(sum(exp(x - max))) over `axis`: never log(0).
    Fast form: functional.log_softmax (log_softmax_array: no graph)."""
    s = x - x.max(axis, keepdims=True).detach()
    return s - s.exp().sum(axis, keepdims=True).log()


def cross_entropy(logits, target, ignore_index=None, label_smoothing=0.0):
    """mean over counted rows of -sum_j q_j log softmax(z)_j, q = (1 - eps) onehot(target) + eps/V;
    a row whose target is ignore_index is not counted. Fast form: functional.cross_entropy."""
    V = logits.shape[-1]
    eps = label_smoothing
    t = backend.to_numpy(data_of(target)).reshape(-1)              # (N,)
    if ignore_index is None:
        counted = np.ones(t.shape, bool)
    else:
        counted = t != ignore_index
    q = np.full((t.size, V), eps / V)                              # (N, V) the smoothed target
    q[np.flatnonzero(counted), t[counted]] += 1.0 - eps
    q *= counted[:, None] / max(counted.sum(), 1)                  # the mean; ignored rows weigh 0
    logp = log_softmax(logits.reshape(-1, V))                      # (N, V)
    return -(logp * q).sum()                                       # q takes the logits' dtype


def layer_norm(x, gamma, beta, eps=1e-6):
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis.
    Fast form: functional.layer_norm."""
    xc = x - x.mean(-1, keepdims=True)                             # (..., D) centred
    var = (xc * xc).mean(-1, keepdims=True)
    return xc / (var + eps).sqrt() * gamma + beta


def dropout(x, p, training=True):
    """x * keep / (1 - p), keep ~ Bernoulli(1 - p) drawn from backend.rng() as the fast form draws
    it; x when not training or p == 0. Fast form: functional.dropout."""
    if not training or p == 0:
        return x
    keep = backend.rng().random(x.shape, dtype=np.float32) >= p    # (...) True: kept
    return x * (keep / (1.0 - p))


def linear(x, w, b=None):
    """x W + b: (..., d_in) -> (..., d_out); b may be None. Fast form: functional.linear."""
    y = x @ w
    return y if b is None else y + b


# ------------------------------------------------------------ attention (lesson 06)
def attention(q, k, v, mask=None, dropout_p=0.0):
    """Eq. (1): softmax(q k^T / sqrt(d_k)) v, scores -1e9 where mask is False; a query that sees
    no key gets 0. Fast form: attention.scaled_dot_product_attention."""
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if mask is not None:
        scores = where(mask, scores, -1e9)                         # "minus infinity", finite
    p = softmax(scores)                                            # (B, H, Tq, Tk) weights
    if mask is not None:
        p = p * mask.any(axis=-1, keepdims=True)                   # no key to see: 0, not uniform
    return dropout(p, dropout_p) @ v                               # (B, H, Tq, d_k)


def multi_head_attention(q, k, v, w_q, w_k, w_v, w_o, n_heads, mask=None, biases=(None,) * 4):
    """Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i), the W^Q_i
    the column blocks of one (D, D) w_q. Fast form: multihead.MultiHeadAttention."""
    B, Tq, D = q.shape
    b_q, b_k, b_v, b_o = biases

    def heads(x, w, b):                                            # (B, T, D) -> (B, H, T, d_k)
        y = linear(x, w, b).reshape(B, x.shape[1], n_heads, D // n_heads)
        return y.transpose(0, 2, 1, 3)
    o = attention(heads(q, w_q, b_q), heads(k, w_k, b_k), heads(v, w_v, b_v), mask)
    side_by_side = o.transpose(0, 2, 1, 3).reshape(B, Tq, D)       # the heads' outputs: (B, Tq, D)
    return linear(side_by_side, w_o, b_o)


# ------------------------------------------------------------ Adam and the schedule (lesson 09)
def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0):
    """One Adam step (Kingma & Ba, Algorithm 1; t from 1) on arrays: the new (p, m, v);
    weight_decay as AdamW's. Fast form: optim.Adam (one flat buffer, in place)."""
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g                                      # the running mean of g
    v = b2 * v + (1 - b2) * g * g                                  # the running mean of g^2
    m_hat = m / (1 - b1 ** t)                                      # bias corrections: m and v
    v_hat = v / (1 - b2 ** t)                                      # start at 0
    p = p * (1 - lr * weight_decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, m, v


def noam_schedule(step, d_model, warmup_steps=4000):
    """Eq. (3): d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step >= 1."""
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


# ------------------------------------------------------------ decoding (lesson 10)
def next_log_probs(model, memory, prefix, forced=False):
    """log p (V,) of the token after `prefix` (ids without <s>), on the host; <pad> and <s> get
    -inf, and so does all but </s> when `forced`. memory: (1, S, D) of `x </s>`."""
    c = model.config
    tgt_in = backend.asarray(np.array([[c.bos_id] + list(prefix)]))  # (1, t+1): <s> y_1 .. y_t
    z = model.decode(tgt_in, memory).data[0, -1]                   # (V,) the last logits
    logp = backend.to_numpy(log_softmax(Tensor(z)).data)
    logp[[c.pad_id, c.bos_id]] = -np.inf
    if forced:
        logp[np.arange(len(logp)) != c.eos_id] = -np.inf
    return logp


def encode_source(model, src_ids):
    """model.encode of one source, ids without </s>: the memory (1, S, D) of `x </s>`."""
    return model.encode(backend.asarray(np.array([list(src_ids) + [model.config.eos_id]])))


def greedy_search(model, src_ids, max_len):
    """(tokens, log_prob): the most likely token at each step until </s> (forced after max_len),
    log_prob with </s>. Fast form: search.greedy_search (batched, with the cache)."""
    with model.inference_mode():
        memory = encode_source(model, src_ids)
        tokens = []
        log_prob = 0
        while True:
            logp = next_log_probs(model, memory, tokens, forced=len(tokens) == max_len)
            token = int(np.argmax(logp))                           # the first of equal maxima
            log_prob = log_prob + logp[token]
            if token == model.config.eos_id:
                return tokens, float(log_prob)
            tokens.append(token)


def top_candidates(logp, alive, width):
    """The `width` best (log_prob, beam, token) per sentence, each (Ba, width), log_prob =
    alive[beam] + logp[beam, token], stable-sorted; past n*V: (-inf, 0, 0). logp (Ba*n, V),
    alive (Ba, n). Fast form: search._top_candidates."""
    Ba, n = alive.shape
    V = logp.shape[1]
    full = (logp + alive.reshape(-1, 1)).reshape(Ba, n * V)        # (Ba, n*V) beam-major
    idx = np.argsort(-full, axis=1, kind="stable")[:, :width]      # (Ba, <= width)
    pad = ((0, 0), (0, width - idx.shape[1]))
    scores = np.pad(np.take_along_axis(full, idx, 1), pad, constant_values=-np.inf)
    idx = np.pad(idx, pad)
    return scores, idx // V, idx % V


def beam_search(model, src_ids, beam_size, alpha, max_len, nbest=1):
    """The `nbest` best (tokens, score, log_prob), score = log_prob / ((5 + |Y|) / 6) ** alpha:
    of the 2k best extensions, </s> among the first k finish, the first k others stay alive.
    Fast form: search.beam_search (batched, with the cache, stops early)."""
    eos = model.config.eos_id
    k = beam_size
    finished = []                                                  # (tokens, score, log_prob)
    with model.inference_mode():
        memory = encode_source(model, src_ids)
        alive = [[]]
        alive_logp = np.zeros((1, 1))
        for t in range(max_len + 1):                               # t tokens in each prefix
            forced = t == max_len
            logp = np.stack([next_log_probs(model, memory, y, forced) for y in alive])  # (n, V)
            best = top_candidates(logp, alive_logp.astype(logp.dtype), 2 * k)
            scores, beam, token = (a[0] for a in best)
            ok = np.isfinite(scores)                               # (2k,) probability 0: none
            for j in np.flatnonzero(ok[:k] & (token[:k] == eos)):
                log_prob = float(scores[j])
                lp = ((5 + t + 1) / 6) ** alpha                    # |Y| = t + 1, with </s>
                finished.append((alive[beam[j]], log_prob / lp, log_prob))
            keep = np.flatnonzero(ok & (token != eos))[:k]         # the new alive prefixes
            if not len(keep):
                break
            alive = [alive[beam[j]] + [int(token[j])] for j in keep]
            alive_logp = scores[keep][None]                        # (1, n)
    return sorted(finished, key=lambda h: -h[1])[:nbest]          # stable: ties in order found
