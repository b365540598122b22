"""The plain form of every fast path: the algorithms as a reader first meets them, in lesson order.

Each function here is the shortest correct code for one idea, built only from the engine's elementary
Tensor ops (autograd gives its gradients) or plain NumPy, never from a fast path. Each fast version in
functional.py, attention.py, multihead.py, optim.py and search.py names its plain form here, and the test suite holds
the two equal. Read this page first; read the fast code when you want to know where the time went.
Left out on purpose: speed (no fused backward, no flat buffers, no cache, one sentence at a time).
"""
import math

import numpy as np

from . import backend
from .ops import where
from .tensor import Tensor, data_of


# -------------------------------------------------------------------- softmax and friends (lesson 04)
def softmax(x, axis=-1):
    """softmax(x) over `axis`: exp(x - max) / sum(exp(x - max)), from elementary Tensor ops.

    Subtracting the maximum changes nothing (it cancels in the quotient) and keeps exp from overflowing;
    it is a constant, so it is detached. Fast form: functional.softmax (and softmax_array, no graph)."""
    e = (x - x.max(axis, keepdims=True).detach()).exp()
    return e / e.sum(axis, keepdims=True)


def log_softmax(x, axis=-1):
    """log softmax(x) over `axis`: (x - max) - log(sum(exp(x - max))); never log(0) for a tiny probability.
    Fast form: functional.log_softmax (and log_softmax_array, no graph)."""
    s = x - x.max(axis, keepdims=True).detach()
    return s - s.exp().sum(axis, keepdims=True).log()


def cross_entropy(logits, target, ignore_index=None, label_smoothing=0.0):
    """The mean over counted rows of -sum_j q_j log softmax(z)_j, with q = (1 - eps) onehot(target) + eps/V.

    logits z (..., V), target integer ids (...); a row whose target is ignore_index counts for nothing.
    The dense (N, V) q, divided by the number of counted rows, is built in NumPy. Fast form:
    functional.cross_entropy (one pass, no (N, V) q)."""
    V, eps = logits.shape[-1], label_smoothing
    t = backend.to_numpy(data_of(target)).reshape(-1)                  # (N,)
    counted = t != ignore_index if ignore_index is not None else np.ones(t.shape, bool)
    q = np.full((t.size, V), eps / V)                                  # (N, V) the smoothed target
    q[np.flatnonzero(counted), t[counted]] += 1.0 - eps
    q *= counted[:, None] / max(counted.sum(), 1)                      # the mean; ignored rows weigh 0
    return -(log_softmax(logits.reshape(-1, V)) * q).sum()            # q takes the logits' dtype


def layer_norm(x, gamma, beta, eps=1e-6):
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis (var: the mean square of x - mean).
    Fast form: functional.layer_norm."""
    xc = x - x.mean(-1, keepdims=True)                                 # (..., D) centred
    return xc / ((xc * xc).mean(-1, keepdims=True) + eps).sqrt() * gamma + beta


def dropout(x, p, training=True):
    """x * keep / (1 - p), keep ~ Bernoulli(1 - p) drawn from backend.rng() as functional.dropout draws
    it (inverted dropout: E[y] = x); x itself when not training or p == 0. Fast form: functional.dropout."""
    if not training or p == 0:
        return x
    keep = backend.rng().random(x.shape, dtype=np.float32) >= p        # (...) True: kept
    return x * (keep / (1.0 - p))


def linear(x, w, b=None):
    """x W + b: x (..., d_in), W (d_in, d_out), b (d_out,) or None -> (..., d_out). Fast form: functional.linear."""
    y = x @ w
    return y if b is None else y + b


# -------------------------------------------------------------------- attention (lesson 06)
def attention(q, k, v, mask=None, dropout_p=0.0):
    """Eq. (1): softmax(q k^T / sqrt(d_k)) v, with the scores -1e9 where mask is False.

    q (B, H, Tq, d_k), k and v (B, H, Tk, d_k) -> (B, H, Tq, d_k); mask: boolean, True where a query may see
    a key, broadcastable to (B, H, Tq, Tk). A query whose keys are all masked gets 0 (its softmax would
    be uniform). dropout_p > 0 drops attention weights as the fast op does. Fast form:
    attention.scaled_dot_product_attention."""
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])           # (B, H, Tq, Tk) scores
    if mask is not None:
        s = where(mask, s, -1e9)                                       # "minus infinity", finite: no NaN
    p = softmax(s)                                                     # (B, H, Tq, Tk) weights
    if mask is not None:
        p = p * mask.any(axis=-1, keepdims=True)                       # no key to see: 0, not uniform
    return dropout(p, dropout_p) @ v                                   # (B, H, Tq, d_k)


def multi_head_attention(q, k, v, w_q, w_k, w_v, w_o, n_heads, mask=None, biases=(None,) * 4):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    q (B, Tq, D), k and v (B, Tk, D) -> (B, Tq, D); w_q, w_k, w_v, w_o (D, D); biases (b_q, b_k, b_v,
    b_o), each (D,) or None. The h projections W^Q_i are the column blocks of one (D, D) w_q, so the
    heads are a reshape of one product. Fast form: multihead.MultiHeadAttention (fused projections)."""
    B, Tq, D = q.shape
    b_q, b_k, b_v, b_o = biases

    def heads(x, w, b):                                                # (B, T, D) -> (B, H, T, d_k)
        return linear(x, w, b).reshape(B, x.shape[1], n_heads, D // n_heads).transpose(0, 2, 1, 3)
    o = attention(heads(q, w_q, b_q), heads(k, w_k, b_k), heads(v, w_v, b_v), mask)  # (B, H, Tq, d_k)
    return linear(o.transpose(0, 2, 1, 3).reshape(B, Tq, D), w_o, b_o)  # heads side by side: (B, Tq, D)


# -------------------------------------------------------------------- Adam and the schedule (lesson 09)
def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0):
    """One Adam step (Kingma & Ba, Algorithm 1) of one parameter p with gradient g: the new (p, m, v).

    Arrays in, arrays out; t counts this parameter's updates from 1. The paper's betas and eps (section
    5.3) are the defaults; weight_decay shrinks p by lr * weight_decay * p (decoupled, as AdamW).
    Fast form: optim.Adam (one flat buffer of all parameters, in place)."""
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g                                          # the running mean of g
    v = b2 * v + (1 - b2) * g * g                                      # the running mean of g^2
    m_hat = m / (1 - b1 ** t)                                          # bias corrections: m and v
    v_hat = v / (1 - b2 ** t)                                          # start at 0
    p = p * (1 - lr * weight_decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, m, v


def noam_schedule(step, d_model, warmup_steps=4000):
    """Eq. (3): lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), for step >= 1.
    optim.noam_schedule (step 0 taken as 1, a scale factor) and optim.WarmupSchedule call it."""
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


# -------------------------------------------------------------------- decoding (lesson 10)
def next_log_probs(model, memory, prefix, forced=False):
    """log p of the token after `prefix` (output ids, without <s>), (V,) on the host: the log-softmax of
    the model's last logits in its dtype, then <pad> and <s> forbidden (-inf, not renormalised), and
    every token but </s> when `forced`. memory: model.encode of the source `x </s>`, (1, S, D)."""
    c = model.config
    tgt_in = backend.asarray(np.array([[c.bos_id] + list(prefix)]))    # (1, t+1): <s> y_1 .. y_t
    z = model.decode(tgt_in, memory).data[0, -1]                       # (V,) the last position's logits
    logp = backend.to_numpy(log_softmax(Tensor(z)).data)
    logp[[c.pad_id, c.bos_id]] = -np.inf
    if forced:
        logp[np.arange(len(logp)) != c.eos_id] = -np.inf
    return logp


def encode_source(model, src_ids):
    """model.encode of one source, ids without </s>: the memory (1, S, D) of `x </s>`."""
    return model.encode(backend.asarray(np.array([list(src_ids) + [model.config.eos_id]])))


def greedy_search(model, src_ids, max_len):
    """The output of one source (ids without </s>) by taking the most likely token at every step until
    </s>, which is forced after max_len tokens: (tokens, log_prob), log_prob summed in the model's
    dtype, </s> included. Fast form: search.greedy_search (batched, with the cache)."""
    with model.inference_mode():
        memory, tokens, log_prob = encode_source(model, src_ids), [], 0
        while True:
            logp = next_log_probs(model, memory, tokens, forced=len(tokens) == max_len)
            token = int(np.argmax(logp))                                # the first of equal maxima
            log_prob = log_prob + logp[token]
            if token == model.config.eos_id:
                return tokens, float(log_prob)
            tokens.append(token)


def top_candidates(logp, alive, width):
    """The `width` best extensions per sentence, best first: every candidate's log_prob = logp[row, token]
    + alive of its prefix, ranked by a stable sort (ties: the lower beam, then the lower token), as
    (Ba, width) arrays log_prob, beam, token, padded with (-inf, beam 0, token 0) past n*V candidates.
    logp (Ba*n, V): the next token's log p after each of the n prefixes of Ba sentences; alive (Ba, n):
    the prefixes' log_prob. Fast form: search._top_candidates (sorts only the most promising blocks)."""
    (Ba, n), V = alive.shape, logp.shape[1]
    full = (logp + alive.reshape(-1, 1)).reshape(Ba, n * V)            # (Ba, n*V) beam-major
    idx = np.argsort(-full, axis=1, kind="stable")[:, :width]          # (Ba, <= width)
    pad = ((0, 0), (0, width - idx.shape[1]))
    scores, idx = np.pad(np.take_along_axis(full, idx, 1), pad, constant_values=-np.inf), np.pad(idx, pad)
    return scores, idx // V, idx % V


def beam_search(model, src_ids, beam_size, alpha, max_len, nbest=1):
    """The `nbest` best outputs of one source (ids without </s>) by beam search, best first, as
    (tokens, score, log_prob): score = log_prob / lp(|Y|), lp = ((5 + |Y|) / 6) ** alpha, |Y| with </s>.

    Each step extends the k = beam_size alive prefixes by every token and ranks the candidates
    (top_candidates); of the first 2k, the </s> ones among the first k finish, and the first k others
    stay alive. At max_len only </s> may follow. It runs until no prefix is alive; search.beam_search
    stops a sentence once no alive prefix can still win, which returns the same list. Fast form:
    search.beam_search (batched, with the cache, stops early)."""
    eos, k = model.config.eos_id, beam_size
    finished = []                                                      # (tokens, score, log_prob)
    with model.inference_mode():
        memory, alive, alive_logp = encode_source(model, src_ids), [[]], np.zeros((1, 1))
        for t in range(max_len + 1):                                   # t tokens so far in each prefix
            logp = np.stack([next_log_probs(model, memory, y, forced=t == max_len) for y in alive])  # (n, V)
            scores, beam, token = (a[0] for a in top_candidates(logp, alive_logp.astype(logp.dtype), 2 * k))
            ok = np.isfinite(scores)                                   # (2k,) probability 0: no candidate
            for j in np.flatnonzero(ok[:k] & (token[:k] == eos)):
                finished.append((alive[beam[j]], float(scores[j]) / ((5 + t + 1) / 6) ** alpha, float(scores[j])))
            keep = np.flatnonzero(ok & (token != eos))[:k]             # the new alive prefixes
            if not len(keep):
                break
            alive = [alive[beam[j]] + [int(token[j])] for j in keep]
            alive_logp = scores[keep][None]                            # (1, n)
    return sorted(finished, key=lambda h: -h[1])[:nbest]              # stable: ties in the order found
