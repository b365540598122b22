"""The key/value cache of incremental decoding (cache.py): KVCache and DecoderCache on their own
(appending step by step attends as the whole sequence does, a memory set once, reorders that copy
only what beams do not share, moves planned once for all layers), in one attention layer
(MultiHeadAttention) and in a whole decoder (Transformer.decode): cached equals recomputed, before
and after reordering."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
from minitransformer import attention, backend
from minitransformer.attention import causal_mask, padding_mask
from minitransformer.cache import DecoderCache, KVCache
from minitransformer.multihead import MultiHeadAttention
from minitransformer.transformer import Transformer, TransformerConfig

from conftest import f32_tol, transformer_tol, random_ids

FAST = settings(max_examples=15, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
BOS = 1                                          # <s>, the first input of a target


# ------------------------------------------------------------------ KVCache and DecoderCache alone
def attend(q, k, v, mask):
    """Eq. (1) in float64 NumPy: softmax(q k^T / sqrt(d_k)) v with the scores -inf where mask is
    False (every query here sees at least one key)."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@FAST
@given(data=st.data())
def test_appending_step_by_step_attends_as_the_whole_sequence_does(xp_backend, data):
    """Keys and values appended a few positions at a time (past the first buffer of 16 positions,
    so that it grows, unless a capacity was reserved): each chunk of queries attending over what the
    cache holds, with the causal mask offset by what it held before, gives the rows of causal
    attention over the whole sequence, and the cache holds every key and value in order."""
    B, H, K = (data.draw(st.integers(1, n)) for n in (2, 3, 4))
    T = data.draw(st.integers(1, 40))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    q, k, v = (rng.standard_normal((B, H, T, K)) for _ in range(3))
    full = attend(q, k, v, np.tril(np.ones((T, T), bool)))             # (B, H, T, K)
    cache = KVCache(capacity=data.draw(st.sampled_from([0, T])))
    assert cache.empty and cache.k is None
    start = 0
    while start < T:
        n = data.draw(st.integers(1, T - start))
        keys, values = cache.append(backend.asarray(k[:, :, start:start + n]),
                                    backend.asarray(v[:, :, start:start + n]))
        assert len(cache) == start + n and keys.shape == (B, H, start + n, K)
        out, _, _ = attention.attention_forward(backend.asarray(q[:, :, start:start + n]), keys,
                                                values, causal_mask(n, offset=start), 0.0, False)
        # float64: sums of at most T + K terms of size O(1)
        np.testing.assert_allclose(backend.to_numpy(out), full[:, :, start:start + n], rtol=0,
                                   atol=1e-12)
        start += n
    np.testing.assert_array_equal(backend.to_numpy(cache.k), k)
    np.testing.assert_array_equal(backend.to_numpy(cache.v), v)


def test_a_memory_set_once_is_held_as_given_and_reordered_by_rows(xp_backend):
    """Encoder-decoder attention hands the memory's keys and values over once (set); a reorder keeps
    the rows asked for, repeats included, and a batch that grows gets rows of its own."""
    rng = np.random.default_rng(4)
    k, v = (rng.standard_normal((3, 2, 5, 4)).astype(np.float32) for _ in range(2))   # (B, H, S, K)
    cache = KVCache()
    cache.set(backend.asarray(k.copy()), backend.asarray(v.copy()))
    assert len(cache) == 5 and not cache.empty
    np.testing.assert_array_equal(backend.to_numpy(cache.k), k)
    np.testing.assert_array_equal(backend.to_numpy(cache.v), v)
    for index in ([2, 0], [1, 1, 0, 0]):                     # fewer rows, then more than before
        cache.reorder(np.array(index))
        k, v = k[index], v[index]
        np.testing.assert_array_equal(backend.to_numpy(cache.k), k)
        np.testing.assert_array_equal(backend.to_numpy(cache.v), v)
    cache.reorder(np.arange(4))                              # nothing moves
    np.testing.assert_array_equal(backend.to_numpy(cache.k), k)


def test_expanding_a_decoder_cache_into_beams_leaves_the_memory_alone(xp_backend):
    """reorder(repeat(arange(B), k), memory_rows=arange(B)): every self-attention cache holds k
    copies of each row, the memory's caches keep their B rows as they were (the beams of a sentence
    share them), and length counts the positions decoded."""
    rng = np.random.default_rng(5)
    B, beams, n_layers = 2, 3, 2
    dc = DecoderCache(n_layers)
    assert dc.length == 0
    kv = [rng.standard_normal((B, 2, 4, 3)).astype(np.float32) for _ in range(n_layers)]
    memory = [rng.standard_normal((B, 2, 6, 3)).astype(np.float32) for _ in range(n_layers)]
    for i in range(n_layers):
        c_self, c_cross = dc.layer(i)
        c_self.append(backend.asarray(kv[i]), backend.asarray(kv[i] * 2))
        c_cross.set(backend.asarray(memory[i].copy()), backend.asarray(memory[i].copy()))
    assert dc.length == 4
    index = np.repeat(np.arange(B), beams)
    dc.reorder(index, memory_rows=np.arange(B))
    for i in range(n_layers):
        c_self, c_cross = dc.layer(i)
        np.testing.assert_array_equal(backend.to_numpy(c_self.k), kv[i][index])
        np.testing.assert_array_equal(backend.to_numpy(c_self.v), kv[i][index] * 2)
        np.testing.assert_array_equal(backend.to_numpy(c_cross.k), memory[i])
    assert dc.length == 4


def test_cache_reorder_copies_only_what_beams_do_not_share(xp_backend):
    """KVCache.reorder(index, shared) skips the first shared[i] positions of row i, which search
    says already hold row index[i]'s keys and values (beams that agree on their first tokens): the
    result must equal a full copy. Keys and values here are a function of the token prefix, as in a
    decoder."""
    rng = np.random.default_rng(12)
    B, H, T, K = 6, 2, 5, 3
    table = {}
    def cache_of(tokens):                       # (B, H, T, K): one vector per (prefix, head)
        kv = [[table.setdefault(tuple(r[:p + 1]), rng.standard_normal((H, K))) for p in range(T)]
              for r in tokens]
        return np.asarray(kv, dtype=np.float32).transpose(0, 2, 1, 3)
    def shared_of(tokens, index):               # as select_rows: the first token that differs
        differ = tokens[index] != tokens[:len(index)]
        return np.where(differ.any(1), differ.argmax(1), T)
    for index in ([1, 1, 0, 5, 3, 3], [2, 0, 0, 1], [0, 1, 2, 3, 4, 5], [4, 5, 5, 3, 0, 0, 1, 2]):
        index = np.array(index)
        tokens = rng.integers(0, 2, size=(B, T))           # two tokens: rows share prefixes often
        kv = cache_of(tokens)
        for shared in (None, shared_of(tokens, index) if len(index) <= B else None):
            cache = KVCache()
            for t in range(T):                             # one position per step, as in decoding
                cache.append(backend.asarray(kv[:, :, t:t + 1]),
                             backend.asarray(-kv[:, :, t:t + 1]))
            cache.reorder(backend.asarray(index), shared)
            np.testing.assert_array_equal(backend.to_numpy(cache.k), kv[index])
            np.testing.assert_array_equal(backend.to_numpy(cache.v), -kv[index])
            more = rng.standard_normal((len(index), H, 1, K)).astype(np.float32)
            # the buffers still grow
            k, _ = cache.append(backend.asarray(more), backend.asarray(more))
            np.testing.assert_array_equal(backend.to_numpy(k),
                                          np.concatenate([kv[index], more], axis=2))


def test_a_decoder_cache_works_out_its_moves_once_for_all_layers(monkeypatch):
    """DecoderCache.reorder plans the copies once for the self-attention caches and once for the
    memory's, whatever the number of layers (they all move alike), and every layer ends up holding
    the same rows."""
    from minitransformer import cache as cache_module
    plans = []
    moves = cache_module.moves
    monkeypatch.setattr(cache_module, "moves", lambda *a: plans.append(a) or moves(*a))
    rng = np.random.default_rng(3)
    dc = cache_module.DecoderCache(n_layers=4)
    # (B, H, T, K) per layer
    kv = [rng.standard_normal((5, 2, 3, 4)).astype(np.float32) for _ in range(4)]
    for layer, (c_self, c_cross) in enumerate(dc.layer(i) for i in range(4)):
        c_self.append(backend.asarray(kv[layer]), backend.asarray(-kv[layer]))
        c_cross.set(backend.asarray(kv[layer][:, :, :2].copy()),
                    backend.asarray(kv[layer][:, :, :2].copy()))
    index = np.array([4, 0, 0, 2])
    dc.reorder(index, memory_rows=index)
    assert len(plans) == 2
    for layer, (c_self, c_cross) in enumerate(dc.layer(i) for i in range(4)):
        np.testing.assert_array_equal(backend.to_numpy(c_self.k), kv[layer][index])
        np.testing.assert_array_equal(backend.to_numpy(c_self.v), -kv[layer][index])
        np.testing.assert_array_equal(backend.to_numpy(c_cross.k), kv[layer][index][:, :, :2])



# -------------------------------------------------------------------- in one attention layer
def mha_tol(m, T):
    """The float32 tolerance of a MultiHeadAttention's output computed two ways (cached or not): the
    dot products on the way are the projections in and out (d_model terms each), the scores (d_k),
    the softmax's sum and the weighted sum (T keys each); inputs and weights O(1)."""
    return f32_tol(2 * m.d_model + m.d_model // m.n_heads + 2 * T)


def test_cache_self_attention_matches_full_recomputation(xp_backend):
    rng = np.random.default_rng(0)
    m = MultiHeadAttention(16, 4).eval()
    x = mt.tensor(rng.standard_normal((3, 7, 16)).astype(np.float32))
    with mt.no_grad():
        full = m(x, mask=causal_mask(7)).numpy()
        cache = KVCache()
        steps = [m(x[:, t:t + 1], cache=cache).numpy() for t in range(7)]
        assert len(cache) == 7
        np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=mha_tol(m, 7))
        # several positions at once, with the causal mask offset by what the cache holds
        cache = KVCache()
        a = m(x[:, :3], mask=causal_mask(3), cache=cache).numpy()
        b = m(x[:, 3:], mask=causal_mask(4, offset=3), cache=cache).numpy()
        np.testing.assert_allclose(np.concatenate([a, b], axis=1), full, atol=mha_tol(m, 7))


def test_cache_encoder_decoder_attention_reuses_memory(xp_backend):
    rng = np.random.default_rng(1)
    m = MultiHeadAttention(16, 2, self_attention=False).eval()
    y = mt.tensor(rng.standard_normal((2, 4, 16)).astype(np.float32))
    memory = mt.tensor(rng.standard_normal((2, 6, 16)).astype(np.float32))
    mask = padding_mask(np.array([[3, 3, 3, 3, 0, 0], [3, 3, 3, 3, 3, 3]]))
    with mt.no_grad():
        full = m(y, memory, mask=mask).numpy()
        cache = KVCache()
        steps = [m(y[:, t:t + 1], memory, mask=mask, cache=cache).numpy() for t in range(4)]
        np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=mha_tol(m, 6))
        assert len(cache) == 6
        # after the first step the memory is not read again
        steps = m(y[:, :1], memory * 0.0, mask=mask, cache=cache).numpy()
        np.testing.assert_allclose(steps, full[:, :1], atol=mha_tol(m, 6))


def test_cache_reorder_matches_recomputing_selected_rows(xp_backend):
    rng = np.random.default_rng(2)
    m = MultiHeadAttention(8, 2).eval()
    x = mt.tensor(rng.standard_normal((3, 6, 8)).astype(np.float32))
    index = np.array([2, 2, 0, 1])              # rows may repeat (beams) and the batch may grow
    with mt.no_grad():
        cache = KVCache()
        for t in range(3):
            m(x[:, t:t + 1], cache=cache)
        cache.reorder(index)
        picked = x.numpy()[index]
        later = [m(mt.tensor(picked[:, t:t + 1]), cache=cache).numpy() for t in range(3, 6)]
        full = m(mt.tensor(picked), mask=causal_mask(6)).numpy()
    np.testing.assert_allclose(np.concatenate(later, axis=1), full[:, 3:], atol=mha_tol(m, 6))


def test_cache_with_grad_mode_on_raises():
    m = MultiHeadAttention(8, 2)
    x = mt.tensor(np.zeros((1, 1, 8), np.float32))
    with pytest.raises(RuntimeError, match="no_grad"):
        m(x, cache=KVCache())


# -------------------------------------------------------------------- in a whole decoder
def make_model(dropout=0.1):
    """A small random Transformer (d_model 16, 2 + 2 layers, 23 ids) from seed 0."""
    mt.seed(0)
    return Transformer(TransformerConfig.tiny(vocab_size=23, d_model=16, n_heads=2, d_ff=32,
                                              n_layers=2, max_len=64, dropout=dropout))


def micro(**overrides):
    """A model small enough to check element by element: D 8, 2 heads, F 16, 1 + 1 layers, V 11."""
    return TransformerConfig.tiny(**{**dict(vocab_size=11, d_model=8, n_heads=2, d_ff=16,
                                            n_layers=1, max_len=32, dropout=0.0), **overrides})


def test_cached_logits_equal_recomputation_at_every_step(xp_backend):
    model = make_model(dropout=0.3)
    rng = np.random.default_rng(1)
    src = np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])                    # x </s>, padded
    tgt = np.concatenate([[[BOS], [BOS]], rng.integers(3, 23, size=(2, 9))], axis=1)  # (2, 10)
    with model.inference_mode():
        mask = padding_mask(backend.asarray(src))
        memory = model.encode(backend.asarray(src), mask)
        cache = model.init_cache()
        for t in range(tgt.shape[1]):
            step = model.decode(backend.asarray(tgt[:, t:t + 1]), memory, mask,
                                cache=cache).data[:, -1]
            full = model.decode(backend.asarray(tgt[:, :t + 1]), memory, mask).data[:, -1]
            # other shapes (one position against t + 1): other BLAS calls, rounded apart
            np.testing.assert_allclose(backend.to_numpy(step), backend.to_numpy(full), rtol=0,
                                       atol=transformer_tol(model))


def test_reordered_cache_equals_recomputing_the_selected_beams(xp_backend):
    model = make_model()
    rng = np.random.default_rng(2)
    src = np.array([[5, 6, 7, 2], [8, 9, 2, 0], [10, 2, 0, 0]])
    prefix = np.concatenate([np.full((3, 1), BOS), rng.integers(3, 23, size=(3, 4))],
                            axis=1)                                              # (3, 5)
    with model.inference_mode():
        src_d = backend.asarray(src)
        mask = padding_mask(src_d)
        memory = model.encode(src_d, mask)
        for index in ([2, 0, 0, 1, 2], [0, 0, 2, 1]):
            cache = model.init_cache()
            model.decode(backend.asarray(prefix), memory, mask, cache=cache)  # fills 5 positions
            cache.reorder(np.array(index))
            new = rng.integers(3, 23, size=(len(index), 1))
            mem_i, mask_i = (mt.tensor(memory.data[backend.asarray(index)]),
                             mask[backend.asarray(index)])
            step = model.decode(backend.asarray(new), mem_i, mask_i, cache=cache).data[:, -1]
            full = model.decode(backend.asarray(np.concatenate([prefix[index], new], 1)), mem_i,
                                mask_i).data[:, -1]
            np.testing.assert_allclose(backend.to_numpy(step), backend.to_numpy(full), rtol=0,
                                       atol=transformer_tol(model))
        # beams in groups that share one memory row: 3 sentences -> 2 beams each, reordered within
        # their sentence (the memory stays), then sentence 0 leaves (its memory row goes)
        cache = model.init_cache()
        model.decode(backend.asarray(prefix), memory, mask, cache=cache)
        rows = prefix
        for index, sentences in (([0, 0, 1, 1, 2, 2], [0, 1, 2]), ([1, 0, 3, 3, 4, 5], [0, 1, 2]),
                                 ([2, 3, 4, 4], [1, 2])):
            cache.reorder(np.array(index), memory_rows=np.array(sentences))
            memory, mask = (mt.tensor(memory.data[backend.asarray(sentences)]),
                            mask[backend.asarray(sentences)])
            rows = np.concatenate([rows[index], rng.integers(3, 23, size=(len(index), 1))], 1)
            step = model.decode(backend.asarray(rows[:, -1:]), memory, mask,
                                cache=cache).data[:, -1]
            # the memory row of each beam
            each = backend.asarray(np.repeat(np.arange(len(sentences)), 2))
            full = model.decode(backend.asarray(rows), mt.tensor(memory.data[each]),
                                mask[each]).data[:, -1]
            np.testing.assert_allclose(backend.to_numpy(step), backend.to_numpy(full),
                                       atol=transformer_tol(model), rtol=0)
        with pytest.raises(ValueError, match="4 query rows cannot share 3 key/value rows"):
            cache.reorder(np.array([0, 1, 2, 3]), memory_rows=np.array([0, 1, 0]))
            model.decode(backend.asarray(rows[:, -1:]), memory, mask, cache=cache)


def test_cached_decoding_equals_full_recomputation_at_every_step(xp_backend):
    rng = np.random.default_rng(7)
    for overrides in ({}, dict(norm_first=True, positional="learned")):
        model = Transformer(TransformerConfig.tiny(vocab_size=30, **overrides)).eval()
        src = random_ids(rng, 3, 6, 30, [6, 4, 2])
        tgt = random_ids(rng, 3, 8, 30, first=1)
        with mt.no_grad():
            src_mask = padding_mask(src)
            memory = model.encode(src, src_mask)
            cache = model.init_cache()
            for t in range(8):
                # (B, 1, V) and (B, t+1, V)
                step = model.decode(tgt[:, t:t + 1], memory, src_mask, cache=cache).numpy()
                full = model.decode(tgt[:, :t + 1], memory, src_mask).numpy()
                assert step.shape == (3, 1, 30) and cache.length == t + 1
                # other shapes (one position against t + 1): other BLAS calls, rounded apart
                np.testing.assert_allclose(step[:, 0], full[:, -1], atol=transformer_tol(model))
            # a prefix of several tokens at once, then one more
            cache = model.init_cache()
            a = model.decode(tgt[:, :5], memory, src_mask, cache=cache).numpy()
            b = model.decode(tgt[:, 5:6], memory, src_mask, cache=cache).numpy()
            np.testing.assert_allclose(np.concatenate([a, b], 1),
                                       model.decode(tgt[:, :6], memory, src_mask).numpy(),
                                       atol=transformer_tol(model))


def test_cache_reorder_matches_recomputing_the_selected_rows(xp_backend):
    rng = np.random.default_rng(8)
    model = Transformer(TransformerConfig.tiny(vocab_size=30)).eval()
    src = random_ids(rng, 2, 5, 30, [5, 3])
    tgt = random_ids(rng, 6, 6, 30, first=1)
    with mt.no_grad():
        src_mask = padding_mask(src)
        memory = model.encode(src, src_mask)
        cache = model.init_cache()
        expand = backend.asarray(np.repeat(np.arange(2), 3))  # batch of 2 -> 2 sentences x 3 beams
        cache.reorder(expand)
        memory, src_mask = memory[expand], src_mask[expand]
        for t in range(3):
            model.decode(tgt[:, t:t + 1], memory, src_mask, cache=cache)
        index = np.array([2, 0, 0, 5, 3, 4])                  # beams survive within their sentence
        cache.reorder(index)
        memory, src_mask = memory[backend.asarray(index)], src_mask[backend.asarray(index)]
        new = tgt.copy()
        new[:, :3] = tgt[index, :3]
        for t in range(3, 6):
            step = model.decode(new[:, t:t + 1], memory, src_mask, cache=cache).numpy()
            full = model.decode(new[:, :t + 1], memory, src_mask).numpy()
            np.testing.assert_allclose(step[:, 0], full[:, -1], atol=transformer_tol(model))


def test_cache_needs_no_grad():
    model = Transformer(micro())
    src, tgt = np.array([[4, 5]]), np.array([[1]])
    memory = model.encode(src)
    with pytest.raises(RuntimeError, match="no_grad"):
        model.decode(tgt, memory, padding_mask(src), cache=model.init_cache())

