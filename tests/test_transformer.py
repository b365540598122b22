"""The Transformer: configuration and presets, parameter counts against the paper, positional
encodings, gradient checks of every layer and of the whole model, causality and padding invariance,
state_dict round trips, and inputs refused. Incremental decoding with the key/value cache:
test_cache.py."""
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.attention import causal_mask, padding_mask
from conftest import f32_tol, transformer_tol, random_ids
from minitransformer.transformer import (Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward,
                                         PositionalEncoding, Transformer, TransformerConfig,
                                         count_parameters, sinusoids)

FAST = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def micro(**overrides):
    """A model small enough to check element by element: D 8, 2 heads, F 16, 1 + 1 layers, V 11."""
    return TransformerConfig.tiny(**{**dict(vocab_size=11, d_model=8, n_heads=2, d_ff=16, n_layers=1,
                                            max_len=32, dropout=0.0), **overrides})


def t64(a, requires_grad=True):
    return mt.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


# -------------------------------------------------------------------- configuration
def test_presets_hold_the_papers_values():
    b = TransformerConfig.base()
    assert (b.d_model, b.d_ff, b.n_heads, b.d_k, b.n_encoder_layers, b.n_decoder_layers) == (512, 2048, 8, 64, 6, 6)
    assert (b.dropout, b.label_smoothing, b.norm_first, b.positional, b.share_embeddings) == (0.1, 0.1, False, "sinusoidal", True)
    assert (b.attention_dropout, b.relu_dropout) == (0.0, 0.0)
    g = TransformerConfig.big()
    assert (g.d_model, g.d_ff, g.n_heads, g.d_k, g.dropout) == (1024, 4096, 16, 64, 0.3)
    s, t = TransformerConfig.small(), TransformerConfig.tiny()
    assert (s.d_model, s.n_encoder_layers, s.n_decoder_layers, s.n_heads, s.d_ff) == (256, 3, 3, 8, 1024)
    assert (t.d_model, t.n_encoder_layers, t.n_decoder_layers, t.n_heads, t.d_ff) == (128, 2, 2, 4, 512)
    c = TransformerConfig.base(vocab_size=1000, n_layers=2, n_decoder_layers=3)
    assert (c.vocab_size, c.n_encoder_layers, c.n_decoder_layers) == (1000, 2, 3)


def test_config_to_and_from_json():
    c = TransformerConfig.small(vocab_size=123, positional="learned", norm_first=True)
    d = json.loads(json.dumps(c.to_dict()))
    assert TransformerConfig.from_dict(d) == c
    with pytest.raises(ValueError, match="unknown keys.*colour"):
        TransformerConfig.from_dict({**d, "colour": "blue"})


@pytest.mark.parametrize("overrides, message", [
    (dict(d_model=100, n_heads=8), "split evenly across heads"),
    (dict(d_model=0), "d_model must be an integer of at least 1"),
    (dict(d_model="512"), "d_model must be an integer"),
    (dict(dropout=None), "dropout must be a finite number"),
    (dict(norm_first="yes"), "norm_first must be true or false"),
    (dict(positional="rotary"), "positional must be"),
    (dict(dropout=1.0), r"dropout must be a finite number in \[0.0, 1.0\)"),
    (dict(bos_id=0), "three different tokens"),
    (dict(vocab_size=2), "outside the vocabulary"),
    (dict(d_model=9, n_heads=3, positional="sinusoidal"), "must be even"),
])
def test_config_validation_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.base(**overrides)


# -------------------------------------------------------------------- parameter counts
def test_parameter_counts_match_the_paper():
    base = count_parameters(TransformerConfig.base(vocab_size=37000))
    big = count_parameters(TransformerConfig.big(vocab_size=37000))
    assert abs(base - 65e6) / 65e6 < 0.03, base
    assert abs(big - 213e6) / 213e6 < 0.03, big
    model = Transformer(TransformerConfig.base(vocab_size=37000))      # the built base model agrees
    assert model.num_parameters() == base


@pytest.mark.parametrize("overrides", [
    {}, dict(positional="learned"), dict(share_embeddings=False), dict(norm_first=True),
    dict(n_encoder_layers=1, n_decoder_layers=3, positional="learned", share_embeddings=False, norm_first=True),
])
def test_count_parameters_equals_the_built_model(overrides):
    for cfg in (TransformerConfig.tiny(vocab_size=500, **overrides), TransformerConfig.small(vocab_size=300, **overrides)):
        model = Transformer(cfg)
        assert model.num_parameters() == count_parameters(cfg)
        assert sum(a.size for a in model.state_dict().values()) == count_parameters(cfg)


# -------------------------------------------------------------------- positional encodings
def test_sinusoids_known_values():
    pe = sinusoids(3, 4)
    np.testing.assert_allclose(pe[0], [0, 1, 0, 1])
    np.testing.assert_allclose(pe[2], [math.sin(2), math.cos(2), math.sin(2 / 100), math.cos(2 / 100)])


def test_positional_encoding_of_pos_plus_k_is_a_rotation_of_pos():
    D, k = 16, 7
    pe = sinusoids(200, D)
    freq = 10000.0 ** (-np.arange(0, D, 2) / D)
    M = np.zeros((D, D))
    for i, w in enumerate(freq):  # [sin(a+b), cos(a+b)] = [[cos b, sin b], [-sin b, cos b]] [sin a, cos a]
        c, s = math.cos(k * w), math.sin(k * w)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    np.testing.assert_allclose(pe[:-k] @ M.T, pe[k:], atol=1e-10)
    # and M is what a least-squares fit of PE(pos+k) on PE(pos) finds: the map is linear, one for all pos
    fit = np.linalg.lstsq(pe[:-k], pe[k:], rcond=None)[0].T
    np.testing.assert_allclose(fit @ pe[:-k].T, pe[k:].T, atol=1e-8)


def test_positional_encoding_module_offset_and_limits(xp_backend):
    pos = PositionalEncoding(8, max_len=10)
    x = mt.tensor(np.zeros((2, 3, 8), np.float32))
    # 0 + the float64 table rounded once to float32
    np.testing.assert_allclose(pos(x, offset=4).numpy()[1], sinusoids(10, 8)[4:7], rtol=f32_tol(1), atol=0)
    assert pos(x).dtype == np.float32 and pos.num_parameters() == 0
    with pytest.raises(ValueError, match="max_len"):
        pos(x, offset=8)
    learned = PositionalEncoding(8, max_len=10, learned=True)
    assert learned.num_parameters() == 80
    assert mt.gradcheck(lambda x, table: learned(x, offset=2), t64(np.ones((2, 3, 8))), learned.table)


# -------------------------------------------------------------------- layers: gradient checks
@FAST
@given(data=st.data())
def test_feed_forward_known_answer_and_gradcheck(xp_backend, data):
    B, T = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    ffn = FeedForward(6, 10)
    for p in ffn.parameters():
        p.data = p.data.astype(np.float64)
    x = t64(np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal((B, T, 6)))
    W1, b1, W2, b2 = (p.numpy() for p in ffn.parameters())
    np.testing.assert_allclose(ffn(x).numpy(), np.maximum(0, x.numpy() @ W1 + b1) @ W2 + b2, rtol=1e-12)
    assert mt.gradcheck(lambda x, *params: ffn(x), x, *ffn.parameters())


def draw_masks(data, rng, B, S, T):
    """A source padding mask (some rows all padding) and a causal target mask with padding."""
    src_len = rng.integers(0, S + 1, size=B) if data.draw(st.booleans()) else np.full(B, S)
    tgt_len = rng.integers(1, T + 1, size=B)
    src_mask = padding_mask(random_ids(rng, B, S, 9, src_len))
    tgt_mask = causal_mask(T) & padding_mask(random_ids(rng, B, T, 9, tgt_len))
    return src_mask, tgt_mask


@FAST
@given(data=st.data(), norm_first=st.booleans(), dropout=st.booleans())
def test_encoder_and_decoder_layers_gradcheck(xp_backend, data, norm_first, dropout):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    B, S, T = (data.draw(st.integers(1, 3)) for _ in range(3))
    cfg = micro(norm_first=norm_first, dropout=0.2 if dropout else 0.0,
                attention_dropout=0.1 if dropout else 0.0, relu_dropout=0.1 if dropout else 0.0)
    src_mask, tgt_mask = draw_masks(data, rng, B, S, T)
    x, y = t64(rng.standard_normal((B, S, 8))), t64(rng.standard_normal((B, T, 8)))
    enc, dec = EncoderLayer(cfg), DecoderLayer(cfg)

    def f_enc(x, *params):
        mt.seed(5)  # the same dropout masks at every evaluation
        return enc(x, src_mask)

    def f_dec(y, x, *params):
        mt.seed(5)
        return dec(y, x, src_mask, tgt_mask)
    assert mt.gradcheck(f_enc, x, *enc.parameters(), mode="directional")
    assert mt.gradcheck(f_dec, y, x, *dec.parameters(), mode="directional")
    out = dec(y, enc(x, src_mask), src_mask, tgt_mask)
    assert np.isfinite(out.numpy()).all()


def test_layers_gradcheck_elementwise(xp_backend):
    """One element-by-element check of both layer types and stacks (directional checks can miss a
    wrong element whose error cancels along a random direction)."""
    rng = np.random.default_rng(0)
    cfg = micro(n_layers=2, d_ff=8)
    src_mask, tgt_mask = padding_mask(np.array([[4, 4, 0], [0, 0, 0]])), causal_mask(2)
    x, y = t64(rng.standard_normal((2, 3, 8))), t64(rng.standard_normal((2, 2, 8)))
    enc, dec = Encoder(cfg), Decoder(cfg)
    assert mt.gradcheck(lambda x, *p: enc(x, src_mask), x, *enc.layers[0].parameters(), mode="elementwise")
    assert mt.gradcheck(lambda y, x, *p: dec(y, x, src_mask, tgt_mask), y, x, *dec.layers[1].parameters(),
                        mode="elementwise")


@FAST
@given(data=st.data(), variant=st.booleans())
def test_full_transformer_gradcheck(xp_backend, data, variant):
    """End to end: ids -> embeddings -> encoder -> decoder -> tied projection -> smoothed loss, on drawn
    shapes and paddings (a source of padding only included); variant: pre-LN, learned, untied."""
    overrides = dict(norm_first=True, positional="learned", share_embeddings=False) if variant else {}
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    B, S, T = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    model = Transformer(micro(n_layers=2, **overrides))
    src = random_ids(rng, B, S, 11, lengths=rng.integers(0, S + 1, size=B))
    tgt = random_ids(rng, B, T, 11, lengths=rng.integers(1, T + 1, size=B), first=1)
    tgt_out = random_ids(rng, B, T, 11, lengths=(tgt != 0).sum(1))
    assert mt.gradcheck(lambda *p: model.loss(src, tgt, tgt_out), *model.parameters(), mode="directional",
                        n_directions=3)
    assert mt.gradcheck(lambda *p: model(src, tgt), *model.parameters(), mode="directional")
    assert np.isfinite(model(src, tgt).numpy()).all()


def test_full_transformer_gradcheck_elementwise(xp_backend):
    """Every parameter element of a micro model (1 + 1 layers, D 4), through the smoothed loss."""
    model = Transformer(micro(d_model=4, d_ff=6, vocab_size=7))
    src, tgt, tgt_out = np.array([[3, 4, 5], [6, 0, 0]]), np.array([[1, 3, 4], [1, 5, 0]]), np.array([[3, 4, 2], [5, 2, 0]])
    assert mt.gradcheck(lambda *p: model.loss(src, tgt, tgt_out), *model.parameters(), mode="elementwise")


# -------------------------------------------------------------------- the model's behaviour
def test_forward_shapes_dtype_and_loss(xp_backend):
    rng = np.random.default_rng(2)
    model = Transformer(TransformerConfig.tiny(vocab_size=40))
    src, tgt = random_ids(rng, 3, 6, 40, [6, 4, 1]), random_ids(rng, 3, 5, 40, [5, 5, 2], first=1)
    tgt_out = random_ids(rng, 3, 5, 40, [5, 5, 2])
    loss, n = model.loss(src, tgt, tgt_out, return_count=True)
    assert n == 12 and loss.dtype == np.float32
    loss.backward()
    assert all(p.grad is not None and p.grad.dtype == np.float32 for p in model.parameters())
    model.eval()
    logits = model(src, tgt)
    assert logits.shape == (3, 5, 40) and logits.dtype == np.float32
    np.testing.assert_array_equal(model(src, tgt).numpy(), logits.numpy())  # eval: no dropout
    expected = F.cross_entropy(logits, tgt_out, ignore_index=0, label_smoothing=0.1)
    # the smoothed loss sums V terms per token and averages 12 tokens: relative to its size
    np.testing.assert_allclose(model.loss(src, tgt, tgt_out).item(), expected.item(), rtol=f32_tol(40 + 12))


def test_tied_embedding_is_one_matrix_used_three_times(xp_backend):
    model = Transformer(micro())
    assert model.tgt_embed is model.src_embed and model.out_proj is None
    names = [n for n, _ in model.named_parameters()]
    assert names.count("src_embed.weight") == 1 and not any("tgt_embed" in n for n in names)
    h = mt.tensor(np.random.default_rng(3).standard_normal((2, 3, 8)).astype(np.float32))
    E = model.src_embed.weight.numpy()
    # two float32 matmuls of inner size 8 (other BLAS calls): 8 eps |h| |e| (Cauchy-Schwarz)
    dot = np.linalg.norm(h.numpy(), axis=-1).max() * np.linalg.norm(E, axis=-1).max()
    np.testing.assert_allclose(model.project(h).numpy(), h.numpy() @ E.T, rtol=0, atol=f32_tol(8, dot))
    # embeddings are scaled by sqrt(d_model) before the positions are added (dropout is 0 here)
    x = model._embed(np.array([[4, 5]]), model.src_embed, model.src_pos).numpy()
    np.testing.assert_allclose(x[0], E[[4, 5]] * math.sqrt(8) + sinusoids(2, 8), rtol=0,
                               atol=f32_tol(2, np.abs(E).max() * math.sqrt(8) + 1))  # a product and a sum
    untied = Transformer(micro(share_embeddings=False))
    assert untied.tgt_embed is not untied.src_embed and untied.out_proj is not None


def test_causality_future_target_tokens_do_not_change_earlier_logits(xp_backend):
    rng = np.random.default_rng(4)
    model = Transformer(TransformerConfig.tiny(vocab_size=30, dropout=0.0)).eval()
    src, tgt = random_ids(rng, 2, 6, 30, [6, 3]), random_ids(rng, 2, 7, 30, first=1)
    with mt.no_grad():
        before = model(src, tgt).numpy()
        for t in range(6):
            changed = tgt.copy()
            changed[:, t + 1:] = rng.integers(3, 30, size=(2, 6 - t))
            after = model(src, changed).numpy()
            np.testing.assert_allclose(after[:, :t + 1], before[:, :t + 1], atol=transformer_tol(model))
            assert not np.allclose(after[:, t + 1:], before[:, t + 1:])


def test_padding_source_pad_tokens_do_not_change_any_output(xp_backend):
    rng = np.random.default_rng(5)
    model = Transformer(TransformerConfig.tiny(vocab_size=30)).eval()
    src, tgt = random_ids(rng, 2, 7, 30, [4, 7]), random_ids(rng, 2, 5, 30, first=1)
    with mt.no_grad():
        memory = model.encode(src).numpy()
        before = model(src, tgt).numpy()
        # what sits under the mask changes nothing: replace the pads by real tokens, keep the mask
        other = src.copy()
        other[0, 4:] = [9, 8, 7]
        mask = padding_mask(src)
        np.testing.assert_allclose(model(other, tgt, src_mask=mask).numpy(), before, atol=transformer_tol(model))
        np.testing.assert_allclose(model.encode(other, mask).numpy()[0, :4], memory[0, :4], atol=transformer_tol(model))
        # a source of padding only gives finite logits, never NaN
        empty = np.zeros_like(src)
        assert np.isfinite(model(empty, tgt).numpy()).all()


def test_state_dict_round_trip_and_mis_shaped_load(xp_backend):
    rng = np.random.default_rng(6)
    cfg = micro(n_layers=2)
    src, tgt = random_ids(rng, 2, 4, 11), random_ids(rng, 2, 3, 11, first=1)
    mt.seed(1)
    a = Transformer(cfg).eval()
    mt.seed(2)
    b = Transformer(cfg).eval()
    assert not np.allclose(a(src, tgt).numpy(), b(src, tgt).numpy())
    state = a.state_dict()
    assert "src_embed.weight" in state and "decoder.layers.1.cross_attn.w_kv.weight" in state
    b.load_state_dict(state)
    np.testing.assert_array_equal(a(src, tgt).numpy(), b(src, tgt).numpy())
    wrong = Transformer(micro(n_layers=2, d_ff=12))
    with pytest.raises(ValueError, match=r"mis-shaped: encoder\.layers\.0\.ffn\.w_1\.weight: expected \(8, 12\), got \(8, 16\)"):
        wrong.load_state_dict(state)


# -------------------------------------------------------------------- inputs refused
def test_sources_and_targets_of_different_batches_or_shapes_are_refused():
    """A target batch of 1 beside a source batch of 2 used to broadcast silently into logits (2, T, V)."""
    model = Transformer(micro())
    src, tgt = np.array([[3, 4, 2], [5, 2, 0]]), np.array([[1, 6, 7], [1, 8, 0]])
    with pytest.raises(ValueError, match="src has 2 sentences but tgt_in has 1"):
        model(src, tgt[:1])
    with pytest.raises(ValueError, match="tgt_in has 1 sentences but the memory has 2"):
        model.decode(tgt[:1], model.encode(src))
    with pytest.raises(ValueError, match=r"tgt_out has shape \(2, 2\) but tgt_in has \(2, 3\)"):
        model.loss(src, tgt, tgt[:, 1:])
    with pytest.raises(ValueError, match="at least one position"):
        model(np.zeros((2, 0), np.int64), tgt)
    with pytest.raises(ValueError, match="embedding: id -1 is out of range for 11 embeddings"):
        model(src - 1, tgt)


def test_out_of_range_ids_from_the_host_are_refused_before_they_travel(xp_backend):
    """Host ids (lists, NumPy) are range-checked before the model moves them to its device: on a GPU an
    id out of range would index out of bounds there, unchecked (checking device ids would sync). On the
    CPU the embedding and cross_entropy check them (cross_entropy names itself), on the GPU the model."""
    model = Transformer(micro())
    src, tgt = np.array([[3, 4, 2], [5, 2, 0]]), np.array([[1, 6, 7], [1, 8, 0]])
    with pytest.raises(ValueError, match="embedding: id 11 is out of range for 11 embeddings"):
        model.encode(np.where(src == 5, 11, src))
    with pytest.raises(ValueError, match="embedding: id -2 is out of range for 11 embeddings"):
        model(src, [[1, 6, 7], [1, -2, 0]])
    with pytest.raises(ValueError, match=r"(tgt_out:|cross_entropy: target) id 40 is out of range for 11 classes"):
        model.loss(src, tgt, np.where(tgt == 7, 40, tgt))
    assert model.loss(src, tgt, np.array([[6, 7, 2], [8, 2, 0]])).shape == ()
