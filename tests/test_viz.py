"""Attention maps: the collected weights (viz.collect_attention, which beam search calls too) against
the attention modules called directly, their shapes and masks, the model left untouched, the drawing
(when matplotlib is installed) and the clear error when it is not."""
import sys

import numpy as np
import pytest

from minitransformer import backend, search, viz
from minitransformer.attention import causal_mask, padding_mask
from minitransformer.config import SearchConfig

from conftest import f32_tol, transformer_tol
from test_search import WordTokenizer, make_model

SRC, TGT = [3, 4, 5, 6], [7, 8, 9]


class NamedTokenizer(WordTokenizer):
    def id_to_token(self, i):
        return {0: "<pad>", 1: "<s>", 2: "</s>"}.get(i) or self.words[i - 3]


def test_collected_shapes_masks_and_sums():
    model = make_model(dropout=0.3)
    a = viz.collect_attention(model, SRC, TGT)
    S, T = len(SRC) + 1, len(TGT) + 1
    assert a["encoder"].shape == (2, 2, S, S) and a["decoder"].shape == (2, 2, T, T)
    assert a["cross"].shape == (2, 2, T, S)
    assert a["src"] == SRC + [2] and a["tgt_in"] == [1] + TGT and a["tgt_out"] == TGT + [2]
    for w in a["encoder"], a["decoder"], a["cross"]:
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=f32_tol(w.shape[-1]))  # softmax over that many keys
    assert np.all(a["decoder"][..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)  # causal
    assert model.training                                                  # mode restored
    assert not any("forward" in m.__dict__ for m in model.modules())       # no patch left behind


def test_collected_weights_equal_the_first_layers_called_directly(xp_backend):
    model = make_model(seed=1, scale=2.0)
    a = viz.collect_attention(model, SRC, TGT)
    src = backend.asarray(np.array([SRC + [2]]))
    tgt = backend.asarray(np.array([[1] + TGT]))
    with model.inference_mode():
        x = model._embed(src, model.src_embed, model.src_pos)               # (1, S, D)
        _, p = model.encoder.layers[0].self_attn(x, mask=padding_mask(src), return_weights=True)
        y = model._embed(tgt, model.tgt_embed, model.tgt_pos)
        _, q = model.decoder.layers[0].self_attn(y, mask=causal_mask(len(TGT) + 1), return_weights=True)
    # the same layer on the same inputs (bit for bit today, but inside a whole forward pass whose
    # masks and calls may change): the whole network's float32 tolerance bounds one layer's
    np.testing.assert_allclose(a["encoder"][0], backend.to_numpy(p)[0], atol=transformer_tol(model))
    np.testing.assert_allclose(a["decoder"][0], backend.to_numpy(q)[0], atol=transformer_tol(model))


def test_beam_search_attention_is_the_collected_cross_attention():
    model = make_model(seed=2, scale=3.0)
    best = search.beam_search(model, [SRC], SearchConfig(max_len_b=5), return_attention=True)[0][0]
    # beam_search calls this very function on the same model and ids: bit for bit
    np.testing.assert_array_equal(best.attention, viz.collect_attention(model, SRC, best.tokens)["cross"])


def test_token_labels_use_id_to_token_or_decode():
    assert viz.token_labels(NamedTokenizer(), [3, 2]) == ["a", "</s>"]
    assert viz.token_labels(WordTokenizer(), [3, 4]) == ["a", "b"]


def test_missing_matplotlib_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)                   # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install matplotlib.*pip install -e \.\[plot\]"):
        viz.plot_attention(np.eye(2), ["a", "b"], ["c", "d"], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_drawing_writes_images(tmp_path):
    pytest.importorskip("matplotlib")
    model = make_model(seed=3)
    tok = NamedTokenizer()
    for kind in ("cross", "encoder", "decoder"):
        fig = viz.plot_sentence_attention(model, tok, SRC, TGT, tmp_path / f"{kind}.png", kind=kind, layer=0)
        panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert len(panels) == 2 and len(fig.axes) == 4                     # a panel per head, each its colour bar
        assert all(ax.get_xlabel() == "source token (key)" for ax in panels)
        assert (tmp_path / f"{kind}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    single = viz.plot_attention(np.full((2, 3), 1 / 3), ["x", "y", "z"], ["u", "v"], tmp_path / "one.svg", title="t")
    assert (tmp_path / "one.svg").read_text().lstrip().startswith("<?xml")
    assert [t.get_text() for t in single.axes[0].get_xticklabels()] == ["x", "y", "z"]
    with pytest.raises(ValueError, match="do not match"):
        viz.plot_attention(np.ones((2, 3, 4)), ["a"] * 3, ["b"] * 3, tmp_path / "bad.png")
    with pytest.raises(ValueError, match="kind must be one of"):
        viz.plot_sentence_attention(model, tok, SRC, TGT, tmp_path / "bad.png", kind="self")


def test_drawing_without_a_path_returns_the_figure_and_writes_nothing(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    monkeypatch.chdir(tmp_path)
    fig = viz.plot_attention(np.random.default_rng(0).dirichlet(np.ones(4), size=(3, 2)), list("abcd"), ["u", "v"])
    panels = [ax for ax in fig.axes if ax.axison and ax.get_label() != "<colorbar>"]
    assert isinstance(fig, Figure) and len(panels) == 3                   # 3 heads in a 3-wide grid
    fig = viz.plot_sentence_attention(make_model(seed=3), NamedTokenizer(), SRC, TGT, kind="decoder")
    assert isinstance(fig, Figure) and fig.axes[0].get_title() == "head 1"
    assert list(tmp_path.iterdir()) == []                                  # nothing saved anywhere


def test_bad_paths_shapes_and_layers_are_refused_before_drawing(tmp_path):
    pytest.importorskip("matplotlib")
    w, src, tgt = np.full((2, 3), 1 / 3), ["x", "y", "z"], ["u", "v"]
    for path, message in ((tmp_path / "a.xyz", r"a\.xyz must end in a format matplotlib writes: .*\.png"),
                          (tmp_path / "attn", r"attn must end in a format"),          # matplotlib would add .png
                          (tmp_path, "is a directory; give a file name"),             # was written beside it
                          (tmp_path / "f.txt" / "a.png", r"f\.txt is a file, not a directory")):
        (tmp_path / "f.txt").write_text("x")
        with pytest.raises(ValueError, match=message):
            viz.plot_attention(w, src, tgt, path)
    with pytest.raises(ValueError, match=r"shape \(0, 3\) are empty"):
        viz.plot_attention(np.ones((0, 3)), src, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    viz.plot_attention(w, src, tgt, tmp_path / "new" / "a.png")                 # a missing directory is made
    assert (tmp_path / "new" / "a.png").read_bytes()[:4] == b"\x89PNG"
    model = make_model(seed=3)
    for layer in (2, -3, "1", 0.0, True):
        with pytest.raises(ValueError, match=r"layer must be an integer in \[-2, 2\) \(the model has 2 decoder"):
            viz.plot_sentence_attention(model, NamedTokenizer(), SRC, TGT, layer=layer)
