"""Decoding: search with the cache against search by recomputation, greedy against beam search,
beam search against brute-force enumeration of every output (with and without the length penalty),
early stopping against searching to the end, batch invariance, EOS handling, maximum lengths, the
cache reserved for the longest output, and beam search's top-2k selection against a full sort.
The key/value cache itself: test_cache.py; translate_lines: test_translation.py."""
import contextlib
import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
from minitransformer import backend, plain, search
from minitransformer.cache import KVCache
from minitransformer.config import STOPS, SearchConfig
from minitransformer.text.data import encode_sources
from minitransformer.search import beam_search, greedy_search, length_penalty
from minitransformer.run.translation import translate_lines
from minitransformer.transformer import Transformer, TransformerConfig

from conftest import f32_tol, transformer_tol, WordTokenizer

FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PAD, BOS, EOS = 0, 1, 2


def make_model(vocab_size=23, d_model=16, n_layers=2, seed=0, dropout=0.1, float64=False, scale=1.0):
    """A small random Transformer; scale > 1 sharpens its output distributions (embeddings scaled)."""
    mt.seed(seed)
    cfg = TransformerConfig.tiny(vocab_size=vocab_size, d_model=d_model, n_heads=2, d_ff=2 * d_model,
                                 n_layers=n_layers, max_len=64, dropout=dropout)
    model = Transformer(cfg)
    model.src_embed.weight.data *= scale
    if float64:
        for p in model.parameters():
            p.data = p.data.astype(np.float64)
    return model


def random_sources(rng, n, V, lo=1, hi=7):
    return [rng.integers(3, V, size=rng.integers(lo, hi + 1)).tolist() for _ in range(n)]


def sequence_log_prob(model, src, y):
    """log p(y </s> | x) by one full forward pass (teacher forcing), in the model's dtype."""
    x = np.array([src + [EOS]])
    tgt_in, tgt_out = np.array([[BOS] + y]), y + [EOS]
    with model.inference_mode():
        z = backend.to_numpy(model(x, tgt_in).data)[0].astype(np.float64)     # (T, V)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    return float(sum(logp[i, t] for i, t in enumerate(tgt_out)))


def score_tol(model, *hyps):
    """How far two float32 computations (other batch shapes, cache or not, another BLAS) may put the
    log_prob (and score = log_prob / lp, lp >= 1) of the same tokens apart: each of the |Y| summed
    log-probabilities carries the logits' error twice (the logit and the log-sum-exp), and the sum
    rounds |Y| times, relative to its size."""
    n = max(len(h.tokens) + 1 for h in hyps)
    return n * 2 * transformer_tol(model) + f32_tol(n, max(1.0, max(abs(h.log_prob) for h in hyps)))


# -------------------------------------------------------------------- small pieces
def test_length_penalty_and_source_encoding():
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 1.0) == 2.0 and length_penalty(10, 0.0) == 1.0
    ids, lens = encode_sources([[5, 6], [7], []], PAD, EOS)
    assert ids.tolist() == [[5, 6, 2], [7, 2, 0], [2, 0, 0]] and lens.tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="appends </s>"):
        encode_sources([[5, 2]], PAD, EOS)
    with pytest.raises(TypeError, match="list of source id lists"):
        encode_sources(np.array([[5, 2]]), PAD, EOS)
    for bad in ([[5.7, 6.2]], [5, 6], [np.array([5.0])]):    # floats were truncated silently
        with pytest.raises(TypeError, match="a list of sentences, each a list of integer token ids"):
            encode_sources(bad, PAD, EOS)
    for text in ("ein Hund", ["ein Hund"]):
        with pytest.raises(TypeError, match="token ids, not text"):
            encode_sources(text, PAD, EOS)
    assert greedy_search(make_model(), []) == [] and beam_search(make_model(), []) == []


@pytest.mark.parametrize("field, value, message", [
    ("beam_size", 0, "beam_size must be an integer of at least 1, got 0"),
    ("beam_size", 2.0, "beam_size must be an integer"), ("nbest", 0, "nbest must be an integer"),
    ("nbest", 5, r"nbest \(5\) cannot exceed beam_size \(4\)"),
    ("alpha", -0.5, r"alpha must be a finite number in \[0.0, 10.0\], got -0.5"), ("alpha", 10.5, "alpha must"),
    ("alpha", float("nan"), "alpha must"),
    ("max_len_a", 1000.5, r"max_len_a must be a finite number in \[0.0, 1000.0\]"),
    ("max_len_b", 1_000_001, "max_len_b must be at most 1,000,000"), ("max_len_b", -1, "max_len_b must"),
    ("stop", "soon", "stop must be one of 'exact', 'fast', not 'soon'"),
])
def test_search_config_refuses_settings_that_make_no_sense(field, value, message):
    """One SearchConfig for search, translation, evaluation and the command line: a bad value fails when
    it is made (SettingError, its setting the field), and so does a variant made by replace()."""
    with pytest.raises(ValueError, match="SearchConfig: " + message) as e:
        SearchConfig(**{field: value})
    assert e.value.setting == field or field in e.value.setting
    with pytest.raises(ValueError, match="SearchConfig: " + message):
        replace(SearchConfig(), **{field: value})


def test_search_config_bounds_and_the_search_argument():
    with pytest.raises(ValueError, match="max_len_a and max_len_b are both 0: every translation would be empty"):
        SearchConfig(max_len_a=0, max_len_b=0)
    SearchConfig(beam_size=4, nbest=4, alpha=10, max_len_a=1000, max_len_b=1_000_000, stop="fast")  # the bounds
    for run in (greedy_search, beam_search):                 # the old positional settings are refused
        with pytest.raises(TypeError, match=f"{run.__name__}: search must be a SearchConfig, got int 4"):
            run(make_model(), [[3]], 4)


def test_search_restores_modes_and_ignores_dropout():
    model = make_model(dropout=0.5)
    model.decoder.eval()                                  # a mixed state must come back as it was
    src = random_sources(np.random.default_rng(0), 3, 23)
    first = [h[0].tokens for h in beam_search(model, src, SearchConfig(max_len_b=8))]
    assert [h[0].tokens for h in beam_search(model, src, SearchConfig(max_len_b=8))] == first  # eval: no dropout
    assert model.training and model.encoder.training and not model.decoder.training
    assert mt.tensor([1.0], requires_grad=True).exp().requires_grad  # grad mode is back on


# -------------------------------------------------------------------- the cache
@pytest.mark.parametrize("beam", [1, 4])
def test_search_with_cache_equals_search_by_recomputation(beam):
    model = make_model(seed=3, scale=3.0)
    src = random_sources(np.random.default_rng(3), 5, 23)
    cfg = SearchConfig(beam_size=beam, alpha=0.6, max_len_b=6, nbest=beam)
    a, b = beam_search(model, src, cfg), beam_search(model, src, cfg, use_cache=False)
    assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]
    np.testing.assert_allclose([h.score for hs in a for h in hs], [h.score for hs in b for h in hs], rtol=0,
                               atol=score_tol(model, *(h for hs in a for h in hs)))
    g, g2 = greedy_search(model, src, cfg), greedy_search(model, src, cfg, use_cache=False)
    assert [h.tokens for h in g] == [h.tokens for h in g2]


# -------------------------------------------------------------------- the plain forms
@pytest.mark.parametrize("seed", range(4))
def test_greedy_and_beam_search_equal_their_plain_forms(seed, monkeypatch):
    """search.greedy_search and beam_search (batched, cached or not, stopped early by the exact bound,
    or by the fast one where it must agree: alpha = 0) return what plain.greedy_search and
    plain.beam_search return one sentence at a time, recomputing every prefix and never stopping early:
    the same tokens, the scores within the rounding of other batch shapes."""
    model = make_model(vocab_size=11, seed=seed, scale=3.0, dropout=0.0)
    eos_likelier(model, [], monkeypatch)                     # outputs of many lengths, early stops
    src = random_sources(np.random.default_rng(seed), 6, 11, hi=5)
    cfg = SearchConfig(beam_size=3, alpha=0.6, max_len_a=1, max_len_b=4, nbest=3)
    max_len = search._max_lengths(model, np.array([len(x) for x in src]), cfg.max_len_a, cfg.max_len_b)
    for x, n, h in zip(src, max_len, greedy_search(model, src, cfg)):
        tokens, log_prob = plain.greedy_search(model, x, int(n))
        assert h.tokens == tokens and h.log_prob == pytest.approx(log_prob, abs=score_tol(model, h))
    for c, use_cache in ((cfg, True), (cfg, False), (replace(cfg, alpha=0.0, stop="fast"), True),
                         (replace(cfg, beam_size=4, alpha=1.0, nbest=1), True)):
        for x, n, hyps in zip(src, max_len, beam_search(model, src, c, use_cache=use_cache)):
            want = plain.beam_search(model, x, c.beam_size, c.alpha, int(n), c.nbest)
            assert [h.tokens for h in hyps] == [tokens for tokens, _, _ in want]
            np.testing.assert_allclose([h.score for h in hyps], [score for _, score, _ in want], rtol=0,
                                       atol=score_tol(model, *hyps))


@pytest.mark.parametrize("seed", range(6))
def test_top_candidates_equal_the_plain_full_sort(xp_backend, seed):
    """_top_candidates searches only the blocks of tokens with the best maxima: it must return what
    plain.top_candidates, a stable sort of all n*V candidates, returns, ties included (made on purpose:
    values on a coarse grid, so that sums are exact), and -inf: forbidden tokens, dead beams, rows that
    may only emit one token."""
    rng = np.random.default_rng(seed)
    for V, n, width in ((8000, 4, 8), (23, 1, 8), (64, 4, 8), (5, 3, 64), (97, 3, 6), (60, 2, 4)):
        Ba = 5
        logp = rng.integers(-6, 3, size=(Ba * n, V)).astype(np.float32) / 2       # many exact ties
        logp[rng.random(logp.shape) < 0.3] = -np.inf                               # forbidden tokens
        logp[rng.random(Ba * n) < 0.2, 1:] = -np.inf                               # forced rows: only token 0
        alive = rng.integers(-4, 1, size=(Ba, n)).astype(np.float32)
        alive[rng.random((Ba, n)) < 0.2] = -np.inf                                 # dead beams
        if seed == 0:                                                              # and a smooth case
            logp = rng.standard_normal((Ba * n, V)).astype(np.float32)
        got = search._top_candidates(backend.asarray(logp), alive, width)
        want = plain.top_candidates(logp, alive, width)
        for g, w in zip(got, want):
            assert isinstance(g, np.ndarray) and g.shape == (Ba, width)
            np.testing.assert_array_equal(g, w)


def test_next_logits_are_the_plain_log_probabilities(xp_backend):
    """next_logits, batched, padded and cached, step by step: each row's log-softmax with <pad> and <s>
    forbidden, and only </s> in a forced row, as plain.next_log_probs gives it for one sentence and
    its whole prefix: the same -inf exactly, the rest within the rounding of other batch shapes."""
    model = make_model(vocab_size=24, dropout=0.0)
    sources, outputs = [[5, 6, 7], [8, 9], [10, 11, 12, 13]], np.array([[4, 17, 3], [9, 9, 20], [3, 5, 8]])
    src, _ = encode_sources(sources, PAD, EOS)
    with model.inference_mode():
        state = search._DecoderState(model, src, True, np.array([5, 5, 5]))
        memory = [plain.encode_source(model, x) for x in sources]
        for t in range(outputs.shape[1] + 1):
            forced = np.array([False, t == 2, t == 3])
            logp = backend.to_numpy(state.next_logits(forced))                     # (3, V)
            want = np.stack([plain.next_log_probs(model, m, outputs[i, :t].tolist(), forced[i])
                             for i, m in enumerate(memory)])
            assert np.isneginf(logp[:, [PAD, BOS]]).all() and np.isfinite(logp[:, EOS]).all()
            assert np.isfinite(logp).sum() == (3 - forced.sum()) * 22 + forced.sum()     # a forced row: </s> alone
            np.testing.assert_array_equal(np.isneginf(logp), np.isneginf(want))
            ok = np.isfinite(want)
            np.testing.assert_allclose(logp[ok], want[ok], rtol=0, atol=2 * transformer_tol(model) +
                                       f32_tol(2, np.abs(want[ok]).max()))
            if t < outputs.shape[1]:
                state.append(outputs[:, t])


def test_a_reserved_cache_never_grows_and_search_reserves_the_longest_output(xp_backend, monkeypatch):
    cache = KVCache(capacity=20)
    k = backend.xp.ones((2, 1, 1, 3), dtype=np.float32)              # (B, H, 1 position, K)
    cache.append(k, k)
    buffer = cache._k
    for t in range(2, 21):
        cache.append(k * t, k * t)
        assert cache._k is buffer and len(cache) == t                 # written in place, no new buffer
    np.testing.assert_array_equal(backend.to_numpy(cache.k[0, 0, :, 0]), np.arange(1, 21))
    cache.append(k, k)                                                # past the reservation: it grows
    assert cache._k is not buffer and len(cache) == 21
    # greedy and beam search reserve the longest output + 1 (<s>): no step grows a buffer
    grown = []
    append = KVCache.append
    def spy(self, k, v):
        grown.append(self._k is None or self.length + k.shape[2] > self._k.shape[0])
        return append(self, k, v)
    monkeypatch.setattr(KVCache, "append", spy)
    model = make_model()
    cfg = SearchConfig(beam_size=3, max_len_b=5)
    for run in (lambda s: greedy_search(model, s, cfg), lambda s: beam_search(model, s, cfg)):
        grown.clear()
        run([[5, 6, 7], [8, 9]])
        assert grown and sum(grown) == model.config.n_decoder_layers  # the first append of each layer only


# -------------------------------------------------------------------- greedy against beam
@FAST
@given(seed=st.integers(0, 10_000))
def test_beam_size_1_equals_greedy(seed):
    """With alpha = 0, beam 1 keeps the best token each step and stops at the first </s>: greedy."""
    model = make_model(vocab_size=9, seed=seed % 7, scale=4.0, dropout=0.0)
    src = random_sources(np.random.default_rng(seed), 4, 9)
    cfg = SearchConfig(beam_size=1, alpha=0.0, max_len_a=1, max_len_b=3)
    greedy, beam = greedy_search(model, src, cfg), beam_search(model, src, cfg)
    assert [hs[0].tokens for hs in beam] == [h.tokens for h in greedy]
    # bit for bit on purpose: both decode the same rows in the same batch shapes (a sentence leaves
    # both batches at the same step) and add the same float32 log-probabilities in the same order
    assert [hs[0].score for hs in beam] == [h.score for h in greedy]      # summed the same way, bit for bit


@pytest.mark.parametrize("seed", range(6))
def test_beam_with_alpha_0_scores_at_least_greedy(seed):
    """A sanity check on random models (for a pruned beam it is typical, not a theorem: the greedy
    path can fall out of the beam; the exact guarantee is the brute-force test below)."""
    model = make_model(vocab_size=9, seed=seed, scale=4.0, dropout=0.0)
    src = random_sources(np.random.default_rng(seed), 6, 9)
    greedy = greedy_search(model, src, SearchConfig(max_len_b=5))
    beam = beam_search(model, src, SearchConfig(beam_size=4, alpha=0.0, max_len_b=5))
    for g, b in zip(greedy, beam):
        # the same tokens scored by two code paths (batches of different shapes) may round apart:
        # each of the len + 1 float32 log-probabilities carries a relative error of a few epsilon,
        # and the logits themselves differ by the rounding of the network (score_tol)
        tol = score_tol(model, g, b[0])
        assert b[0].tokens == g.tokens or b[0].score >= g.score - tol, (b[0], g)


# -------------------------------------------------------------------- exactness
def all_outputs(V, max_len):
    """Every output y </s> over the words 3 .. V-1 with len(y) <= max_len (no <pad>, <s> or </s> inside)."""
    words = range(3, V)
    return [list(y) for n in range(max_len + 1) for y in itertools.product(words, repeat=n)]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_wide_beam_finds_the_best_of_all_outputs(alpha):
    """V = 5 (two words), outputs of at most 4 words: 31 of them, all enumerated in float64 and scored
    log p(y </s> | x) / lp(len(y) + 1). A beam of 32 prunes nothing, so it must return exactly that
    ranking: the best, and the whole n-best list. Sources of different lengths set different maxima."""
    model = make_model(vocab_size=5, d_model=16, seed=4, scale=3.0, dropout=0.0, float64=True)
    src = [[3], [4, 3, 3], [3, 4]]
    max_len = [2, 4, 3]                                                   # max_len_a=1, max_len_b=1
    beams = beam_search(model, src, SearchConfig(beam_size=32, alpha=alpha, max_len_a=1, max_len_b=1, nbest=31))
    for x, m, hyps in zip(src, max_len, beams):
        scored = sorted(((sequence_log_prob(model, x, y) / length_penalty(len(y) + 1, alpha), y)
                         for y in all_outputs(5, m)), key=lambda s: -s[0])
        assert hyps[0].tokens == scored[0][1]
        assert [h.tokens for h in hyps] == [y for _, y in scored]
        np.testing.assert_allclose([h.score for h in hyps], [s for s, _ in scored], rtol=1e-9, atol=1e-9)
        for h in hyps:
            assert h.log_prob == pytest.approx(h.score * length_penalty(len(h.tokens) + 1, alpha), abs=1e-9)
    # the float32 model agrees on the winner
    model32 = make_model(vocab_size=5, d_model=16, seed=4, scale=3.0, dropout=0.0)
    best32 = beam_search(model32, src, SearchConfig(beam_size=32, alpha=alpha, max_len_a=1, max_len_b=1))
    assert [b[0].tokens for b in best32] == [b[0].tokens for b in beams]


def eos_likelier(model, rows, monkeypatch, boost=1.5):
    """Raise the </s> logit of `model` by `boost` (a random model rarely ends an output, so nothing
    would stop early) and append the rows of every decoder call to `rows`."""
    decode = model.decode

    def decode_(tgt_in, *args, **kwargs):
        rows.append(len(tgt_in))
        logits = decode(tgt_in, *args, **kwargs)
        logits.data[..., EOS] += boost
        return logits
    monkeypatch.setattr(model, "decode", decode_)


@pytest.mark.parametrize("nbest", [1, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_early_stopping_loses_nothing(alpha, nbest, monkeypatch):
    """Stopping a sentence once no alive prefix can enter its nbest best finished hypotheses returns
    what searching on to the maximum length would: the list returned is final. With nbest = 1 < k the
    search stops sooner, on fewer decoded rows, and its best is the same. (That the bound needs the
    largest lp still reachable, not the next length's, shows on the hand-made model below: on these
    random ones a longer, better hypothesis after such a stop does not occur.)"""
    model = make_model(vocab_size=8, seed=5, dropout=0.0)
    src = random_sources(np.random.default_rng(5), 8, 8, hi=4)
    rows, stopped, done = [], [], search._done
    eos_likelier(model, rows, monkeypatch)

    def counting(finished, active, best_alive, t, max_len, alpha_, n, exact):
        d = done(finished, active, best_alive, t, max_len, alpha_, n, exact)
        stopped.append(int((d & (t < max_len[active]) & np.isfinite(best_alive)).sum()))  # by the bound
        return d
    monkeypatch.setattr(search, "_done", counting)
    run = lambda n: beam_search(model, src, SearchConfig(beam_size=3, alpha=alpha, max_len_a=2, max_len_b=6, nbest=n))
    early, early_rows = run(nbest), sum(rows)
    assert sum(stopped) >= 4, "few sentences stopped early by the bound: the test would prove little"
    if nbest < 3:
        rows.clear()
        run(3)
        assert early_rows < sum(rows), "the n-best criterion stopped no sentence sooner than the k-best one"

    monkeypatch.setattr(search, "_done", lambda finished, active, best_alive, t, max_len, *rest:
                        (t >= max_len[active]) | ~np.isfinite(best_alive))    # never early
    full = [hs[:nbest] for hs in run(3)]
    assert [[h.tokens for h in hs] for hs in early] == [[h.tokens for h in hs] for hs in full]
    # sentences leave the batch at other steps: the others' later steps run in other batch shapes
    np.testing.assert_allclose([h.score for hs in early for h in hs], [h.score for hs in full for h in hs], rtol=0,
                               atol=score_tol(model, *(h for hs in early for h in hs)))


class TableModel:
    """A stand-in for Transformer with the interface search.py uses (config, inference_mode, encode,
    init_cache, decode) whose next-token log-probabilities are a hand-written function of the output
    prefix (without <s>): `next_probs(prefix) -> {token: probability}`, tokens not listed get
    probability 0 (log p = -inf). The source is ignored."""

    class Cache:
        def __init__(self):
            self.rows = None

        @property
        def length(self):
            return 0 if self.rows is None else len(self.rows[0])

        def reorder(self, index, memory_rows=None, shared=None):
            if self.rows is not None:  # as KVCache: reordering an empty cache changes nothing
                self.rows = [list(self.rows[i]) for i in backend.to_numpy(index)]

    def __init__(self, next_probs, vocab_size=6):
        self.config = TransformerConfig.tiny(vocab_size=vocab_size, d_model=8, n_heads=2, max_len=64)
        self.next_probs, self.training, self.calls = next_probs, True, 0

    @contextlib.contextmanager
    def inference_mode(self):
        before, self.training = self.training, False
        try:
            yield self
        finally:
            self.training = before

    def encode(self, src, src_mask=None):
        return mt.tensor(np.zeros((src.shape[0], src.shape[1], 1)))

    def init_cache(self, capacity=0):
        return TableModel.Cache()

    def decode(self, tgt_in, memory, src_mask=None, tgt_mask=None, cache=None):
        self.calls += 1
        tgt = backend.to_numpy(tgt_in).tolist()
        if cache is not None:
            cache.rows = tgt if cache.rows is None else [r + t for r, t in zip(cache.rows, tgt)]
            tgt = cache.rows
        logits = np.full((len(tgt), 1, self.config.vocab_size), -np.inf)
        for r, prefix in enumerate(tgt):
            for token, p in self.next_probs(tuple(prefix[1:])).items():   # prefix without <s>
                logits[r, 0, token] = np.log(p)
        return mt.tensor(logits)


def longer_is_better(prefix):
    """</s> at once has p = 0.5; otherwise word 3 leads to a likely </s> after four words."""
    if not prefix:
        return {EOS: 0.5, 3: 0.3, 4: 0.2}
    if len(prefix) < 4:
        return {3: 0.97, 4: 0.02, EOS: 0.01}
    return {EOS: 0.9, 3: 0.05, 4: 0.05}


def test_early_stopping_bound_uses_the_largest_reachable_length_penalty():
    """With alpha = 2, "3 3 3 3 </s>" (log p = -1.40, lp(5) = 2.78, score -0.50) beats "</s>" (score
    -0.69), found first. After step 0, the alive "3" has log p -1.20: -1.20 / lp(2) = -0.88 would
    (wrongly) stop the search; -1.20 / lp(9) = -0.22 (outputs of up to 8 words) keeps it going."""
    model = TableModel(longer_is_better)
    cfg = SearchConfig(beam_size=1, alpha=2.0, max_len_a=0, max_len_b=8)
    best = beam_search(model, [[3]], cfg)[0][0]
    assert best.tokens == [3, 3, 3, 3]
    assert best.score == pytest.approx(np.log(0.3 * 0.97 ** 3 * 0.9) / length_penalty(5, 2.0))
    assert greedy_search(model, [[3]], cfg)[0].tokens == []                          # greedy stops at once
    assert beam_search(model, [[3]], replace(cfg, alpha=0.0))[0][0].tokens == []
    # and without a cache (the stand-in recomputes from the whole prefix) the same
    assert beam_search(model, [[3]], cfg, use_cache=False)[0][0].tokens == [3, 3, 3, 3]


def test_fast_stop_judges_a_prefix_as_if_it_ended_next():
    """stop="fast" divides an alive prefix's log p by the next length's lp: on longer_is_better it stops
    after step 0 (-1.20 / lp(2) = -0.88 < -0.69) and returns "</s>", which the exact bound would not."""
    model = TableModel(longer_is_better)
    best = beam_search(model, [[3]], SearchConfig(beam_size=1, alpha=2.0, max_len_a=0, max_len_b=8, stop="fast"))[0][0]
    assert best.tokens == [] and best.score == pytest.approx(np.log(0.5))
    assert model.calls == 1                                               # done after one decoder step


def likely_eos(prefix):
    """</s> at once has p = 0.9; after that, words 3 and 4 go on with 0.05 each, then </s> for sure."""
    return {EOS: 0.9, 3: 0.05, 4: 0.05} if not prefix else {EOS: 1.0}


def test_a_sentence_stops_once_its_best_is_final_with_fewer_than_k_finished():
    """With nbest = 1, "</s>" (log p -0.11) is final after step 0: the alive "3" and "4" (log p -3.0)
    can end no better than -3.0 (alpha 0). Waiting for k = 2 finished hypotheses takes a second step."""
    model = TableModel(likely_eos)
    cfg = SearchConfig(beam_size=2, alpha=0.0, max_len_a=0, max_len_b=8)
    best = beam_search(model, [[3]], cfg)
    assert model.calls == 1 and [h.tokens for h in best[0]] == [[]]
    model.calls = 0
    both = beam_search(model, [[3]], replace(cfg, nbest=2))
    assert model.calls == 2 and [h.tokens for h in both[0]] == [[], [3]]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_fast_stop_takes_no_more_steps_and_equals_exact_without_length_penalty(alpha, monkeypatch):
    """The fast bound is never looser than the exact one, so with nbest = k it never decodes longer (here,
    with alpha > 0, shorter); with alpha = 0 (lp = 1 at every length) the two bounds are one and the
    outputs must be identical."""
    model = make_model(vocab_size=8, seed=5, dropout=0.0)
    src = random_sources(np.random.default_rng(7), 12, 8, hi=5)
    rows = []
    eos_likelier(model, rows, monkeypatch)
    out = {}
    cfg = SearchConfig(beam_size=3, alpha=alpha, max_len_a=2, max_len_b=6, nbest=3)
    for stop in STOPS:
        rows.clear()
        out[stop] = beam_search(model, src, replace(cfg, stop=stop)), sum(rows)
    assert out["fast"][1] < out["exact"][1] if alpha > 0 else out["fast"][1] == out["exact"][1]
    rows.clear()                                # the fast stop waits for k finished, whatever nbest asks
    assert [hs[0].tokens for hs in beam_search(model, src, replace(cfg, nbest=1, stop="fast"))] == \
        [hs[0].tokens for hs in out["fast"][0]] and sum(rows) == out["fast"][1]
    if alpha == 0.0:
        assert [[h.tokens for h in hs] for hs in out["fast"][0]] == [[h.tokens for h in hs] for hs in out["exact"][0]]
    with pytest.raises(ValueError, match="SearchConfig: stop must be one of 'exact', 'fast', not 'soon'"):
        replace(cfg, stop="soon")


def greedy_trap(prefix):
    """Greedy takes 3 (0.5) and then meets a flat 0.3; 4 (0.4) leads to a sure 5: 0.4 * 0.9 > 0.5 * 0.3."""
    table = {(): {3: 0.5, 4: 0.4, EOS: 0.1}, (3,): {3: 0.3, 4: 0.3, 5: 0.3, EOS: 0.1},
             (4,): {5: 0.9, EOS: 0.1}}
    return table.get(prefix, {EOS: 1.0})


def test_beam_escapes_the_greedy_trap():
    model = TableModel(greedy_trap)
    greedy = greedy_search(model, [[3]])[0]
    beam = beam_search(model, [[3]], SearchConfig(beam_size=2, alpha=0.0, nbest=2))[0]
    assert greedy.tokens[:2] == [3, 3] and greedy.log_prob == pytest.approx(np.log(0.5 * 0.3 * 1.0))
    assert beam[0].tokens == [4, 5] and beam[0].log_prob == pytest.approx(np.log(0.4 * 0.9 * 1.0))
    assert plain.greedy_search(model, [3], 50)[0] == greedy.tokens                # and the plain forms
    assert [h[0] for h in plain.beam_search(model, [3], 2, 0.0, 50, 2)] == [h.tokens for h in beam]
    assert model.training                                                 # mode restored on the stand-in too


# -------------------------------------------------------------------- batches, EOS, lengths
def test_a_batch_equals_one_sentence_at_a_time(xp_backend):
    model = make_model(seed=6, scale=3.0)
    src = random_sources(np.random.default_rng(6), 6, 23, hi=9)
    cfg = SearchConfig(beam_size=4, alpha=0.6, max_len_b=7, nbest=2)
    for run in (lambda s: [[h] for h in greedy_search(model, s, cfg)], lambda s: beam_search(model, s, cfg)):
        batch = run(src)
        alone = [run([x])[0] for x in src]
        assert [[h.tokens for h in hs] for hs in batch] == [[h.tokens for h in hs] for hs in alone]
        np.testing.assert_allclose([h.score for hs in batch for h in hs], [h.score for hs in alone for h in hs],
                                   rtol=0, atol=score_tol(model, *(h for hs in batch for h in hs)))


def eos_model(sign):
    """A model whose final LayerNorm outputs sign * 10 * E[</s>] at every position: with the tied
    output projection, </s> then has by far the largest logit (sign = +1) or the smallest (-1)."""
    model = make_model(seed=7)
    e = model.src_embed.weight.data
    e[EOS] *= 4.0
    last = model.decoder.layers[-1].norm_3
    last.gamma.data[...] = 0.0
    last.beta.data[...] = sign * e[EOS]
    return model


def test_a_model_that_emits_eos_first_gives_empty_translations():
    model = eos_model(+1)
    src = random_sources(np.random.default_rng(8), 3, 23)
    for hyps in [[h] for h in greedy_search(model, src)] + beam_search(model, src, SearchConfig(nbest=2)):
        assert hyps[0].tokens == []
        # log p(</s>) = -log(a sum of V exponentials, the largest exp(0) = 1), about -4e-4: float32 rounds
        # it to within V eps; the logits' own error enters only times 1 - p(</s>), about 4e-4
        assert hyps[0].log_prob == pytest.approx(sequence_log_prob(model, [3], []),
                                                 abs=f32_tol(model.config.vocab_size))  # the same everywhere
    assert translate_lines(model, WordTokenizer(), ["a b c", "d"]) == ["", ""]


def test_outputs_stop_at_the_maximum_length_with_eos_forced():
    model = eos_model(-1)                                                 # </s> is never chosen freely
    src = [[5], [5, 6, 7], [8, 9]]
    for a, b in ((1, 2), (2, 0), (0, 3)):
        want = [a * len(x) + b for x in src]
        cfg = SearchConfig(beam_size=3, alpha=0.6, max_len_a=a, max_len_b=b)
        assert [len(h.tokens) for h in greedy_search(model, src, cfg)] == want
        for hyps in beam_search(model, src, replace(cfg, nbest=3)):
            assert all(len(h.tokens) <= a * 1 + b + 2 * a for h in hyps)
        assert [len(hs[0].tokens) for hs in beam_search(model, src, cfg)] == want
        g = greedy_search(model, src, cfg)
        for x, h in zip(src, g):   # the forced </s> keeps its own (tiny) log-probability
            assert h.log_prob == pytest.approx(sequence_log_prob(model, x, h.tokens), abs=score_tol(model, h))


def test_return_attention_gives_the_cross_attention_of_the_best():
    model = make_model(seed=9, scale=3.0)
    src = random_sources(np.random.default_rng(9), 3, 23)
    for x, hyps in zip(src, beam_search(model, src, SearchConfig(max_len_b=5, nbest=2), return_attention=True)):
        a = hyps[0].attention
        assert a.shape == (2, 2, len(hyps[0].tokens) + 1, len(x) + 1)    # (layers, H, |Y|, |x| + 1)
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=f32_tol(len(x) + 1))   # softmax over |x| + 1 keys
        assert hyps[1].attention is None


def test_a_nan_or_infinite_logit_makes_its_whole_log_softmax_row_nan(xp_backend):
    """What search's NaN check reads (log p of </s> alone) rests on this, on both backends (the
    fused kernel on the GPU): a NaN or +inf logit anywhere in a row makes every entry NaN; -inf
    logits leave the row finite elsewhere."""
    x = np.zeros((4, 300), dtype=np.float32)
    x[0, 7], x[1, 299], x[2, 0], x[3, 5] = np.nan, np.inf, np.nan, -np.inf
    with np.errstate(invalid="ignore"):                      # inf - inf, said by NumPy
        logp = backend.to_numpy(search.log_softmax_array(backend.asarray(x)))
    assert np.isnan(logp[:3]).all()
    assert np.isfinite(np.delete(logp[3], 5)).all() and logp[3, 5] == -np.inf


@pytest.mark.parametrize("find", [greedy_search, beam_search])
def test_nan_log_probabilities_are_refused_naming_the_source(xp_backend, find):
    """A model whose numbers are NaN for one source (its token's embedding row) cannot rank
    anything: one sentence naming the search, the position and that source, not an IndexError
    deep in the top-k or an empty translation."""
    mt.seed(0)
    model = Transformer(TransformerConfig.tiny(vocab_size=23, d_model=16, n_heads=2, d_ff=32,
                                               max_len=64, share_embeddings=False))
    model.src_embed.weight.data[9] = np.nan          # the source side's alone
    with pytest.raises(ValueError, match=rf"^{find.__name__}: .* NaN at output position 0 of "
                                         r"src\[1\]: .*not finite"):
        find(model, [[3, 4], [5, 9, 6], [7]])
    model.src_embed.weight.data[:] = np.nan
    with pytest.raises(ValueError, match=r"src\[0\]"):
        find(model, [[3, 4]])
