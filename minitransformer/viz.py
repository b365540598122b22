"""Attention maps: draw all heads of a layer in a grid, like the appendix figures of the paper
(encoder self-attention, decoder self-attention, encoder-decoder attention), and collect_attention,
the weights they show, from one forward pass with the recording switch of MultiHeadAttention on.

Drawing needs matplotlib, an optional extra (`pip install matplotlib`,
or `pip install -e .[plot]`), imported when a drawing function is called. Left out on purpose:
interactive views, attention rollout and other attribution methods.
"""
import math
import os

import numpy as np

from . import backend
from .text.data import encode_sources
from .text.fileio import atomic_write, check_creatable

MISSING_MATPLOTLIB = ("drawing attention maps needs matplotlib, an optional extra: "
                      "pip install matplotlib  (or, in a checkout, pip install -e .[plot])")


def collect_attention(model, src_ids, tgt_ids):
    """The attention weights of every layer for one sentence pair, from one teacher-forced pass.

    src_ids: source ids WITHOUT </s> (appended, as in search.py); tgt_ids: output ids without <s>
    and </s> (a translation's Hypothesis.tokens). With S = len(src_ids) + 1, T = len(tgt_ids) + 1,
    returns NumPy arrays: "encoder" (n_layers, H, S, S), "decoder" (n_layers, H, T, T), "cross"
    (n_layers, H, T, S), and the ids on their axes: "src" (x </s>), "tgt_in" (<s> y, the decoder's
    queries and its self-attention keys) and "tgt_out" (y </s>: query i predicts tgt_out[i]).
    """
    c = model.config
    src, _ = encode_sources([src_ids], c.pad_id, c.eos_id)                 # (1, S)
    tgt_in = np.array([[c.bos_id] + [int(i) for i in tgt_ids]], dtype=np.int64)  # (1, T)
    groups = {"encoder": [layer.self_attn for layer in model.encoder.layers],
              "decoder": [layer.self_attn for layer in model.decoder.layers],
              "cross": [layer.cross_attn for layer in model.decoder.layers]}
    modules = [m for group in groups.values() for m in group]
    for m in modules:
        m.recorded = []                                                # the recording switch: on
    try:
        with model.inference_mode():
            model(backend.asarray(src), backend.asarray(tgt_in))
        weights = {}
        for name, group in groups.items():                             # (n_layers, H, Tq, Tk)
            weights[name] = np.stack([backend.to_numpy(m.recorded[0][0]) for m in group])
    finally:
        for m in modules:
            m.recorded = None                                          # ... and off
    return {**weights, "src": src[0].tolist(), "tgt_in": tgt_in[0].tolist(),
            "tgt_out": tgt_in[0, 1:].tolist() + [c.eos_id]}


def token_labels(tokenizer, ids):
    """Axis labels for ids: the token texts (tokenizer.id_to_token, else decode([id]))."""
    name = getattr(tokenizer, "id_to_token", None) or (lambda i: tokenizer.decode([i]))
    return [name(int(i)) for i in ids]


def _figure():
    """A matplotlib Figure class, without pyplot (no GUI backend, no global state)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(MISSING_MATPLOTLIB) from None
    return Figure


def check_path(path, name="path"):
    """Before drawing: the format of the file to save, its extension. Refused (ValueError naming
    `name`) when matplotlib writes no such format (without an extension it would add .png: the
    picture would not be where it is said to be), or when the path is a directory or lies under
    a file."""
    _figure()                                                  # matplotlib is there, or say so
    from matplotlib.backend_bases import FigureCanvasBase
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file name, got {type(path).__name__} "
                        "(the Figure returned has savefig)")
    path = os.fspath(path)
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    if os.path.isdir(path):
        raise ValueError(f"{name} {path} is a directory; give a file name such as attention.png")
    ext = os.path.splitext(path)[1][1:].lower()
    if ext not in formats:
        raise ValueError(f"{name} {path} must end in a format matplotlib writes: "
                         f"{', '.join('.' + f for f in formats)}")
    check_creatable(os.path.dirname(path), f"{name} {path}")  # atomic_write creates the rest
    return ext


def plot_attention(weights, src_tokens, tgt_tokens, path=None, title=None):
    """Draw attention weights (H, T, S), one panel per head in a grid (or (T, S), one panel), rows
    labelled by tgt_tokens (the queries), columns by src_tokens (the keys). Returns the matplotlib
    Figure (a notebook shows it inline); saves it too when `path` is given (.png, .pdf, .svg:
    atomically, a missing directory created). Each panel is scaled from 0 to its own largest
    weight (its colour bar); axes labelled key and query.
    """
    Figure = _figure()
    w = np.asarray(backend.to_numpy(weights), dtype=np.float64)
    shape = tuple(w.shape)                                             # as given, for the messages
    w = w[None] if w.ndim == 2 else w                                  # (H, T, S)
    if w.ndim != 3 or w.shape[1:] != (len(tgt_tokens), len(src_tokens)):
        raise ValueError(f"attention weights of shape {shape} do not match {len(tgt_tokens)} query "
                         f"tokens by {len(src_tokens)} key tokens: expected (H, T, S) or (T, S)")
    if 0 in w.shape:
        raise ValueError(f"attention weights of shape {shape} are empty: there is nothing to draw")
    ext = None if path is None else check_path(path)
    H = w.shape[0]
    cols = min(H, 4)
    rows = math.ceil(H / cols)
    T, S = w.shape[1:]
    cell = 0.28                                                        # inches per token
    width = cols * (S * cell + 1.2)
    height = rows * (T * cell + 1.2) + (0.5 if title else 0)
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(rows, cols, squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.axis("off")
            continue
        image = ax.imshow(w[h], cmap="viridis", vmin=0.0, vmax=max(w[h].max(), 1e-9),
                          aspect="auto")
        ax.set_xticks(range(S), labels=src_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(T), labels=tgt_tokens, fontsize=7)
        ax.set_xlabel("source token (key)", fontsize=8)
        ax.set_ylabel("output token (query)" if h % cols == 0 else "", fontsize=8)
        bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03)      # each panel its own scale
        bar.ax.tick_params(labelsize=7)
        if h % cols == cols - 1 or h == H - 1:
            bar.set_label("attention weight", fontsize=8)
        if H > 1:
            ax.set_title(f"head {h + 1}", fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:                                               # whole or not at all
        atomic_write(path, lambda f: fig.savefig(f, format=ext, dpi=120))
    return fig


def plot_sentence_attention(model, tokenizer, src_ids, tgt_ids, path=None, kind="cross", layer=-1):
    """collect_attention, then plot_attention of one layer: kind "cross" (rows: the output tokens
    y </s>, columns: the source x </s>), "encoder" (x </s> by x </s>) or "decoder" (<s> y by <s> y).
    Returns the Figure, saved to `path` when one is given."""
    axes = {"cross": ("tgt_out", "src"), "encoder": ("src", "src"),
            "decoder": ("tgt_in", "tgt_in")}
    if kind not in axes:
        raise ValueError(f"kind must be one of {sorted(axes)}, got {kind!r}")
    stack = "encoder" if kind == "encoder" else "decoder"
    n = getattr(model.config, f"n_{stack}_layers")
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -n <= layer < n:
        raise ValueError(f"layer must be an integer in [{-n}, {n}) "
                         f"(the model has {n} {stack} layers), got {layer!r}")
    if path is not None:
        check_path(path)
    attn = collect_attention(model, src_ids, tgt_ids)
    rows, cols = (token_labels(tokenizer, attn[a]) for a in axes[kind])
    n_layers = attn[kind].shape[0]
    name = {"cross": "encoder-decoder attention", "encoder": "encoder self-attention",
            "decoder": "decoder self-attention"}[kind]
    title = f"{name}, layer {layer % n_layers + 1} of {n_layers}"
    return plot_attention(attn[kind][layer], cols, rows, path, title=title)
