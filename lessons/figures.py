"""Draw the lessons' figures into lessons/img/, each computed by minitransformer's own code.

    python lessons/figures.py                    # every figure
    python lessons/figures.py 09                 # the figures of lesson 09
    python lessons/figures.py 09_lr_schedule     # one figure
    python lessons/figures.py --list             # the names, with the lesson that shows each
    python lessons/figures.py --out DIR ...      # somewhere else than lessons/img/

One function per figure. Each builds a matplotlib Figure with the object API (no pyplot, so no
global state and no GUI backend) and returns it; FIGURES maps the file name (without .png) to the
function. Seeds are fixed, so a figure redraws the same, except 07_profile, which measures this
machine. The two figures that train a model (09_loss_curve, 10_attention_heads) take most of the
time: all of them took 65 s on the project's 2-core CPU, with other work running beside it.
"""
import argparse
import inspect
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

LESSONS = Path(__file__).resolve().parent
ROOT = LESSONS.parent
IMG = LESSONS / "img"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import minitransformer as mt  # noqa: E402
import minitransformer.functional as F  # noqa: E402
from minitransformer.attention import causal_mask, padding_mask  # noqa: E402
# noqa: E402  (the demo task: numbers in digits -> words)
from minitransformer.text import demo_task
from minitransformer.text.fileio import atomic_write  # noqa: E402

DPI = 100
BLUE, ORANGE, GREEN, GREY = "#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f"


def new_figure(width, height, cols=1, rows=1, **kwargs):
    """A Figure and its axes, without pyplot (the package's viz.py does the same)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **kwargs)
    return fig, axes.ravel()


# ==================================================================== 03: gradcheck
def gradcheck_eps():
    """Error of the central difference against eps, in float32 and float64: round-off
    against truncation."""
    eps_grid = np.logspace(-1, -12, 45)
    x0 = 0.5
    exact = 1 - np.tanh(x0) ** 2

    def tanh_error(eps, dtype):
        x, e = dtype(x0), dtype(eps)
        return abs(float((np.tanh(x + e) - np.tanh(x - e)) / (2 * e)) - exact)

    # a package op: the softmax of mt.functional, reduced with a fixed random projection as
    # gradcheck does, analytic (backward) against the central difference along one direction
    rng = np.random.default_rng(0)
    z0, r, d = rng.standard_normal(8), rng.standard_normal(8), rng.standard_normal(8)
    d /= np.linalg.norm(d)

    def softmax_error(eps, dtype):
        def L(z):
            return float(
                (F.softmax(mt.tensor(z.astype(dtype))) * mt.tensor(r.astype(dtype))).sum().item())
        z = mt.tensor(z0.astype(np.float64), requires_grad=True)
        (F.softmax(z) * mt.tensor(r)).sum().backward()
        analytic = float(z.grad @ d)
        numeric = (L(z0 + eps * d) - L(z0 - eps * d)) / (2 * eps)
        return abs(numeric - analytic)

    default = inspect.signature(mt.gradcheck).parameters["eps"].default
    fig, (ax,) = new_figure(8.6, 3.8)
    # the labels of the vertical lines sit, horizontal,
    # in the empty band below every curve (< 1e-13)
    for dtype, color, y, side in ((np.float32, ORANGE, 1e-14, "right"),
                                  (np.float64, BLUE, 1e-16, "left")):
        name = dtype.__name__
        ax.loglog(eps_grid, [max(tanh_error(e, dtype), 1e-17) for e in eps_grid], "o-", ms=3,
                  color=color, label=f"tanh'(0.5), {name}")
        ax.loglog(eps_grid, [max(softmax_error(e, dtype), 1e-17) for e in eps_grid], "s--", ms=3,
                  color=color, alpha=0.6, label=f"F.softmax, projected, {name}")
        u = np.finfo(dtype).eps                     # the optimum of eps^2 + u / eps is near u^(1/3)
        ax.axvline(u ** (1 / 3), color=color, lw=0.8, ls=":")
        ax.text(u ** (1 / 3) * (1.25 if side == "left" else 1 / 1.25), y, f"$u^{{1/3}}$, {name}",
                fontsize=8, color=color, ha=side, va="center")
    ax.axvline(default, color="k", lw=1.2)
    ax.text(default / 1.25, 1e-16, f"mt.gradcheck's default eps = {default:g}", fontsize=8,
            ha="right", va="center")
    ax.set_xlabel("eps (step of the central difference)")
    ax.set_ylabel("|numeric - analytic|")
    ax.set_ylim(1e-17, 3)
    ax.set_title("Central differences: truncation ($\\sim\\epsilon^2$) against round-off ($\\sim "
                 "u/\\epsilon$)", fontsize=10)
    # beside the axes, clear of the curves
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


# ==================================================================== 06: attention
def softmax_saturation():
    """Unscaled q.k scores saturate the softmax as d_k grows; dividing by sqrt(d_k) does not."""
    rng = np.random.default_rng(0)
    n, n_keys = 1000, 32

    def stats(s):
        p = F.softmax(mt.tensor(s)).numpy()
        return p.max(axis=1), np.exp(-(p * np.log(p + 1e-30)).sum(axis=1))

    dims = [1, 4, 16, 64, 256, 1024]
    effective = {"unscaled": [], "scaled by $1/\\sqrt{d_k}$": []}
    largest = {}
    for d_k in dims:
        q = rng.standard_normal((n, d_k))
        k = rng.standard_normal((n, n_keys, d_k))
        s = np.einsum("nd,nkd->nk", q, k)
        for (name, values), scores in zip(effective.items(), (s, s / math.sqrt(d_k))):
            top, eff = stats(scores)
            values.append(eff.mean())
            if d_k == 64:
                largest[name] = top
    fig, (a, b) = new_figure(9, 3.4, cols=2)
    bins = np.linspace(0, 1, 41)
    for (name, top), color in zip(largest.items(), (ORANGE, BLUE)):
        a.hist(top, bins=bins, color=color, alpha=0.7, label=name)
    a.set_xlabel("largest softmax weight of a query (32 keys)")
    a.set_ylabel("queries")
    a.set_title("$d_k = 64$: unscaled, most queries pick one key", fontsize=10)
    a.legend(fontsize=8)
    for (name, values), color in zip(effective.items(), (ORANGE, BLUE)):
        b.semilogx(dims, values, "o-", color=color, label=name)
    b.axhline(n_keys, color=GREY, lw=0.8, ls=":")
    b.set_xticks(dims, labels=[str(d) for d in dims])
    b.set_xlabel("$d_k$")
    b.set_ylabel("keys attended, exp(entropy)")
    b.set_ylim(0, n_keys + 2)
    b.set_title("Effective number of keys, at initialisation", fontsize=10)
    b.legend(fontsize=8)
    return fig


def masks():
    """The padding mask, the causal mask, and the two combined for each sentence of a batch."""
    ids = np.array([[5, 8, 3, 0], [7, 0, 0, 0]])
    pm = mt.to_numpy(padding_mask(ids))              # (2, 1, 1, 4)
    cm = mt.to_numpy(causal_mask(4))                 # (1, 1, 4, 4)
    both = cm & pm                                   # (2, 1, 4, 4)
    from matplotlib.colors import ListedColormap
    cmap = ListedColormap(["#eeeeee", BLUE])
    panels = [(pm[:, 0, 0], "padding_mask(ids)\n(B, 1, 1, S): rows are sentences", "key",
               "sentence"),
              (cm[0, 0], "causal_mask(4)\n(1, 1, T, T)", "key", "query"),
              (both[0, 0], "causal & padding,\nsentence 1 (5 8 3 <pad>)", "key", "query"),
              (both[1, 0], "causal & padding,\nsentence 2 (7 <pad> <pad> <pad>)", "key", "query")]
    fig, axes = new_figure(11.6, 3.9, cols=4)            # room enough for every title and key label
    for ax, (m, title, xlabel, ylabel) in zip(axes, panels):
        ax.imshow(m, cmap=cmap, vmin=0, vmax=1)
        for (i, j), v in np.ndenumerate(m):
            ax.text(j, i, "T" if v else "F", ha="center", va="center", fontsize=9,
                    color="white" if v else "black")
        ax.set_xticks(range(m.shape[1]))
        ax.set_yticks(range(m.shape[0]))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
    fig.suptitle("Masks, True = may attend (blue); a False score is set to $-10^9$ before the "
                 "softmax", fontsize=10)
    return fig


# ==================================================================== 07: the transformer
def positional_encoding():
    """The sinusoid table of section 3.5, and PE(pos) . PE(pos + k), which depends on k only."""
    from minitransformer.transformer import sinusoids
    pe = sinusoids(100, 128)                         # (positions, D)
    fig, (a, b) = new_figure(10, 3.6, cols=2, width_ratios=[1.6, 1])
    im = a.imshow(pe, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    a.set_xlabel("dimension (2i: sin, 2i+1: cos)")
    a.set_ylabel("position")
    a.set_title("sinusoids(100, 128): fast waves on the left, slow on the right", fontsize=10)
    fig.colorbar(im, ax=a, shrink=0.8, label="PE[pos, dimension]")
    ks = np.arange(0, 60)
    # the three curves coincide: a wide pale line,
    # markers on it, and a thin dashed line through both
    styles = ((0, dict(color=BLUE, lw=5, alpha=0.35)),
              (20, dict(color=ORANGE, ls="none", marker="o", ms=4, markevery=3)),
              (40, dict(color=GREEN, lw=1, ls="--")))
    for pos, style in styles:
        b.plot(ks, [pe[pos] @ pe[pos + k] for k in ks], label=f"pos = {pos}", **style)
    b.set_xlabel("offset k")
    b.set_ylabel("PE(pos) . PE(pos + k)")
    b.set_title("The dot product depends on k only", fontsize=10)
    b.legend(fontsize=8, title="three curves, on top\nof each other", title_fontsize=8)
    return fig


def profile():
    """Time per op of one training step of the tiny preset, from mt.profile():
    forward and backward."""
    from minitransformer.optim import Adam
    mt.use("cpu")
    mt.seed(0)
    rng = np.random.default_rng(0)
    cfg = mt.TransformerConfig.tiny(vocab_size=400, dropout=0.1)
    model = mt.Transformer(cfg)
    opt = Adam(model.parameters())
    B, S, T = 16, 20, 24
    src = rng.integers(3, 400, (B, S))
    tgt_in = np.concatenate([np.ones((B, 1), int), rng.integers(3, 400, (B, T - 1))], 1)
    tgt_out = np.concatenate([tgt_in[:, 1:], np.full((B, 1), 2)], 1)

    def step():
        loss = model.loss(src, tgt_in, tgt_out)
        model.zero_grad()
        loss.backward()
        opt.step()
    step()                                           # warm up: first-call costs out of the picture
    n = 3
    with mt.profile() as prof:
        for _ in range(n):
            step()
    totals = sorted(prof.totals().items(), key=lambda kv: -sum(kv[1]))
    top, rest = totals[:10], totals[10:]
    if rest:
        top.append((f"{len(rest)} other ops", tuple(sum(v[i] for _, v in rest) for i in (0, 1))))
    names = [name for name, _ in top][::-1]
    fwd = np.array([v[0] for _, v in top][::-1]) * 1e3 / n
    bwd = np.array([v[1] for _, v in top][::-1]) * 1e3 / n
    traced = sum(sum(v) for v in prof.totals().values()) * 1e3 / n
    fig, (ax,) = new_figure(7.5, 4.2)
    ax.barh(names, fwd, color=BLUE, label="forward")
    ax.barh(names, bwd, left=fwd, color=ORANGE, label="backward")
    for i, total in enumerate(fwd + bwd):
        ax.text(total, i, f" {total:.1f} ms ({total / traced:.0%})", va="center", fontsize=7)
    ax.set_xlim(0, (fwd + bwd).max() * 1.25)
    ax.set_xlabel("ms per training step (mean of 3)")
    ax.set_title(f"mt.profile() of one step, tiny preset (D 128, 2 + 2 layers), B {B}, S {S}, T "
                 f"{T}, V 400, CPU\nops traced: {traced:.0f} ms of {prof.wall * 1e3 / n:.0f} ms "
                 f"wall per step (the rest: the engine, Adam)", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.tick_params(axis="y", labelsize=8)
    return fig


# ==================================================================== 08: BPE
def bpe_corpus():
    """The generated corpus of lesson 08: Zipf-distributed words built from syllables."""
    rng = random.Random(0)
    syllables = ["ka", "te", "ri", "mo", "sun", "de", "la", "ber", "ein", "ge", "ung", "sch", "ö",
                 "ß"]
    lexicon = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(1500)]
    zipf = [1 / rank for rank in range(1, len(lexicon) + 1)]
    return [" ".join(rng.choices(lexicon, weights=zipf, k=12)) for _ in range(3000)]


def bpe_merges():
    """Per merge: how often the merged pair occurred, and how long the corpus is in tokens."""
    from minitransformer.text.bpe import BPE, MIN_VOCAB
    from minitransformer.text.bpe_learn import merge
    lines = bpe_corpus()
    tok = BPE.train(lines, vocab_size=MIN_VOCAB + 400, min_frequency=2)
    words = tok.count_words(lines)
    corpus = {w: [b + tok.offset for b in w.encode("utf-8")] for w in words}
    n_bytes = sum(len(ids) * c for ids, c in ((corpus[w], words[w]) for w in words))
    counts, lengths = [], []
    for k, pair in enumerate(tok.merges):            # replay the merges, counting each pair first
        new_id = tok.offset + 256 + k
        count = 0
        for w, ids in corpus.items():
            pairs = Counter(zip(ids, ids[1:]))
            if pair in pairs:
                count += pairs[pair] * words[w]
                corpus[w] = merge(ids, pair, new_id)
        counts.append(count)
        lengths.append(sum(len(ids) * words[w] for w, ids in corpus.items()))
    fig, (a, b) = new_figure(10, 3.6, cols=2)
    ranks = np.arange(1, len(counts) + 1)
    a.loglog(ranks, counts, color=BLUE)
    for k in (0, 1, 4, 19, 99, 299):
        if k < len(counts):
            a.annotate(repr(tok.id_to_token(tok.offset + 256 + k)), (ranks[k], counts[k]),
                       fontsize=8, xytext=(4, 4), textcoords="offset points")
    a.set_xlim(0.7, len(counts) * 3)  # room for the labels above the first merge and after the last
    a.set_ylim(min(counts) / 1.5, max(counts) * 3)
    a.set_xlabel("merge number")
    a.set_ylabel("occurrences of the merged pair")
    a.set_title(f"{len(counts)} merges on lesson 08's corpus: each is rarer than the last",
                fontsize=10)
    b.plot(np.concatenate([[0], ranks]), np.array([n_bytes] + lengths) / n_bytes, color=ORANGE)
    b.set_xlabel("merges learned")
    b.set_ylabel("corpus length / length in bytes")
    b.set_ylim(0, 1.05)
    b.set_title("Tokens per byte: fast gains first, then diminishing", fontsize=10)
    return fig


# ==================================================================== 09: training
def lr_schedule():
    """Eq. (3) for three configurations: the paper's base and big models, and
    the demo's settings."""
    from minitransformer.text.demo_task import DEMO
    from minitransformer.optim import WarmupSchedule
    configs = [("base: d_model 512, warmup 4000", WarmupSchedule(512, 4000), BLUE),
               ("big: d_model 1024, warmup 4000", WarmupSchedule(1024, 4000), ORANGE),
               (f"demo: d_model 128, warmup {DEMO['warmup_steps']}, scale {DEMO['lr_scale']}",
                WarmupSchedule(128, DEMO["warmup_steps"], DEMO["lr_scale"]), GREEN)]
    steps = np.unique(np.logspace(0, 5, 400).astype(int))
    fig, (a, b) = new_figure(10, 3.6, cols=2)
    for name, sched, color in configs:
        rates = [sched(s) for s in steps]
        a.plot(steps, rates, color=color, label=name)
        a.plot(sched.warmup_steps, sched.peak, "o", color=color, ms=4)
        b.loglog(steps, rates, color=color, label=name)
    a.set_xlim(0, 20000)
    a.set_xlabel("step")
    a.set_ylabel("learning rate")
    a.set_title("Warmup, then $1/\\sqrt{step}$ (dots: the peaks)", fontsize=10)
    a.legend(fontsize=7)
    b.set_xlabel("step (log)")
    b.set_ylabel("learning rate (log)")
    b.set_title("On log axes: slope +1, then -1/2", fontsize=10)
    return fig


def label_smoothing():
    """The smoothed target q = (1 - eps) onehot + eps / V, read off
    cross_entropy's gradient p - q."""
    V, y, eps = 10, 3, 0.1
    z = mt.tensor(np.zeros((1, V)), requires_grad=True)      # uniform p, so q = p - gradient
    F.cross_entropy(z, np.array([y]), label_smoothing=eps).backward()
    q = np.full(V, 1 / V) - z.grad[0]
    z0 = mt.tensor(np.zeros((1, V)), requires_grad=True)
    F.cross_entropy(z0, np.array([y])).backward()
    onehot = np.full(V, 1 / V) - z0.grad[0]
    fig, (ax,) = new_figure(6.4, 3.4)
    x = np.arange(V)
    ax.bar(x - 0.2, onehot, width=0.4, color=GREY, label="one-hot target (eps = 0)")
    ax.bar(x + 0.2, q, width=0.4, color=BLUE, label=f"smoothed target q (eps = {eps})")
    ax.annotate(f"1 - eps + eps/V = {q[y]:.2f}", (y + 0.2, q[y]), xytext=(25, -10),
                textcoords="offset points", fontsize=8, arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.annotate(f"eps/V = {q[0]:.2f}", (0.2, q[0]), xytext=(5, 30), textcoords="offset points",
                fontsize=8, arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.set_xticks(x)
    ax.set_xlabel(f"token id (V = {V}; the right token is {y})")
    ax.set_ylabel("target probability")
    ax.set_title("Label smoothing: q read off cross_entropy's gradient $p - q$ at uniform $p$",
                 fontsize=10)
    ax.legend(fontsize=8)
    return fig


def train_demo_run(out_dir):
    """A short real run of the Trainer on the demo task (numbers in
    digits -> words); its log.jsonl."""
    from minitransformer.text.bpe import BPE
    from minitransformer.text.corpus import encode_pairs
    from minitransformer.run.training import Trainer, TrainingConfig
    mt.use("cpu")
    (train_src, train_tgt), (valid_src, valid_tgt), _ = demo_task.make_splits(
        4000, 100, 0, seed=0, max_numbers=2, max_digits=3)
    tok = BPE.train(train_src + train_tgt, 400)
    pairs, _ = encode_pairs(train_src, train_tgt, tok)
    mt.seed(0)
    model = mt.Transformer(mt.TransformerConfig.tiny(vocab_size=tok.vocab_size, d_model=32,
                                                     d_ff=128, n_heads=4, n_layers=1, dropout=0.0))
    training_config = TrainingConfig(steps=LOSS_CURVE_STEPS, max_tokens=500, warmup_steps=100,
                                     lr_scale=0.5, eval_every=50, save_every=0, keep=1,
                                     eval_sentences=40, progress=False)
    Trainer(model, tok, pairs, (valid_src, valid_tgt), training_config, out_dir,
            log=lambda *a: None).train()
    return Path(out_dir) / "log.jsonl"


LOSS_CURVE_STEPS = 400


def loss_curve():
    """Training and validation loss, and BLEU, from the log.jsonl of a short real run."""
    with tempfile.TemporaryDirectory(prefix="figures-09-") as tmp:
        records = [json.loads(line) for line in train_demo_run(tmp).read_text().splitlines()]
    start = next(r for r in records if r.get("event") == "start")
    train = [r for r in records if "loss" in r and "event" not in r]
    valid = [r for r in records if "valid_loss" in r]
    steps = np.array([r["step"] for r in train])
    loss = np.array([r["loss"] for r in train])
    smooth = np.convolve(loss, np.ones(10) / 10, mode="valid")
    fig, (a, b) = new_figure(10, 3.6, cols=2)
    a.plot(steps, loss, color=BLUE, alpha=0.3, lw=0.8,
           label="training loss (label-smoothed), every step")
    a.plot(steps[9:], smooth, color=BLUE, label="its mean over 10 steps")
    a.plot([r["step"] for r in valid], [r["valid_loss"] for r in valid], "o-", color=ORANGE,
           label="validation loss (no smoothing)")
    a.set_ylim(0, None)
    a.set_xlabel("step")
    a.set_ylabel("loss per target token")
    m = start["model"]
    a.set_title(f"log.jsonl of a Trainer run: D {m['d_model']}, {m['n_heads']} heads, "
                f"{m['n_encoder_layers']} + {m['n_decoder_layers']} layers", fontsize=10)
    a.legend(fontsize=7)
    b.plot([r["step"] for r in valid], [r["bleu"] for r in valid], "o-", color=GREEN, label="BLEU")
    b.plot([r["step"] for r in valid], [100 * r["exact_match"] for r in valid], "s--", color=GREY,
           label="exact match, %")
    b.set_xlabel("step")
    b.set_ylabel("BLEU; exact match, %")
    b.set_ylim(0, 100)
    b.set_title("Greedy translations of 40 validation lines", fontsize=10)
    # below: clear of any run
    b.legend(fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    lr = b.twinx()
    lr.plot(steps, [r["lr"] for r in train], color=BLUE, lw=0.8, alpha=0.5)
    lr.set_ylabel("learning rate (thin line)", fontsize=8, color=BLUE)
    lr.tick_params(labelsize=7, colors=BLUE)
    return fig


# ==================================================================== 10: decoding
@lru_cache(maxsize=1)
def reversal_model():
    """Lesson 10's task, with 4 heads: a tiny model trained for a few seconds to
    reverse sequences."""
    from minitransformer.text.data import Batch
    from minitransformer.optim import Adam
    mt.use("cpu")
    mt.seed(0)
    rng = np.random.default_rng(1)

    def pairs(n):
        xs = [rng.integers(3, 11, size=rng.integers(3, 8)).tolist() for _ in range(n)]
        return [(x, x[::-1]) for x in xs]
    model = mt.Transformer(mt.TransformerConfig.tiny(vocab_size=11, d_model=32, n_heads=4, d_ff=64,
                                                     n_layers=1, dropout=0.0, label_smoothing=0.0,
                                                     max_len=32))
    opt = Adam(model.parameters(), lr=5e-3)
    for _ in range(300):
        b = Batch(pairs(32), 0, 1, 2)
        loss = model.loss(b.src, b.tgt_in, b.tgt_out)
        model.zero_grad()
        loss.backward()
        opt.step()
    return model


def attention_heads():
    """viz.plot_attention: the encoder-decoder attention of a trained model, one panel per head."""
    from minitransformer.search import beam_search
    from minitransformer.viz import collect_attention, plot_attention
    model = reversal_model()
    x = [3, 4, 5, 6, 7, 8, 9]
    y = beam_search(model, [x])[0][0].tokens
    attn = collect_attention(model, x, y)
    return plot_attention(attn["cross"][-1], [str(t) for t in x] + ["</s>"],
                          [str(t) for t in y] + ["</s>"],
                          title=f"encoder-decoder attention of a model trained to reverse: {x} -> "
                                f"{y}")


# ==================================================================== 12: data parallelism
def ring_states(n_ranks):
    """The ring allreduce of lesson 12, followed chunk by chunk: after each of its 2(N - 1) steps,
    which ranks' contributions each rank's copy of each chunk holds, and the (sender, chunk) of each
    message. Returns [(phase, step, holds, sent)], holds[r][c] a frozenset of
    ranks; the start first."""
    N = n_ranks
    holds = [[frozenset([r]) for _ in range(N)] for r in range(N)]
    states = [("start", 0, holds, [])]
    for phase, first in (("reduce-scatter", 0), ("all-gather", 1)):
        for s in range(N - 1):
            sent = [(r, (r + first - s) % N) for r in range(N)]   # rank r sends this chunk to r + 1
            new = [row[:] for row in holds]
            for r, c in sent:
                new[(r + 1) % N][c] = (holds[(r + 1) % N][c] | holds[r][c]
                                       if phase == "reduce-scatter" else holds[r][c])
            holds = new
            states.append((phase, s + 1, holds, sent))
    return states


def ring_allreduce():
    """The ring allreduce over 4 ranks: reduce-scatter, then all-gather, chunk by
    chunk; bytes per rank."""
    from matplotlib.patches import FancyArrowPatch, Rectangle
    N = 4
    states = ring_states(N)
    colors = [BLUE, ORANGE, GREEN, "#9467bd"]
    fig, axes = new_figure(12, 6.4, cols=4, rows=2)
    where = [(0.0, 1.0), (1.0, 0.0), (0.0, -1.0), (-1.0, 0.0)]       # rank r on a circle, clockwise
    cell = 0.19
    for ax, (phase, step, holds, sent) in zip(axes, states):
        for r, (x, y) in enumerate(where):
            for c in range(N):
                k = len(holds[r][c])
                left = x - N * cell / 2 + c * cell
                ax.add_patch(Rectangle((left, y - cell / 2), cell, cell, facecolor=colors[c],
                                       alpha=0.15 + 0.85 * k / N, edgecolor="k",
                                       lw=2.0 if k == N else 0.5))
                ax.text(left + cell / 2, y, str(k), ha="center", va="center", fontsize=7,
                        color="white" if k == N else "k")
            ax.text(x, y + 0.2 if y >= 0 else y - 0.2, f"rank {r}", ha="center", va="center",
                    fontsize=8)
        for r, c in sent:
            (x0, y0), (x1, y1) = where[r], where[(r + 1) % N]
            ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), connectionstyle="arc3,rad=-0.25",
                                         arrowstyle="-|>", mutation_scale=10, shrinkA=26,
                                         shrinkB=26, color=colors[c], lw=1.6))
            mx, my = (x0 + x1) / 2, (y0 + y1) / 2
            ax.text(mx * 0.62, my * 0.62, f"chunk {c}", ha="center", va="center", fontsize=7,
                    color=colors[c])
        title = "start: rank r holds its own gradient" if phase == "start" else (f"{phase}, step "
                                                                                 f"{step} of "
                                                                                 f"{N - 1}")
        ax.set_title(title, fontsize=9)
        ax.set_xlim(-1.6, 1.6)
        ax.set_ylim(-1.45, 1.45)
        ax.set_aspect("equal")
        ax.axis("off")
    assert all(len(h) == N for row in states[-1][2] for h in row)   # every rank holds the whole sum
    b = axes[-1]
    ns = np.arange(2, 17)
    b.plot(ns, 2 * (ns - 1) / ns, "o-", ms=3, color=BLUE, label="ring: every rank sends $2(N-1)/N$")
    b.plot(ns, ns - 1, "s--", ms=3, color=ORANGE,
           label="all to rank 0 and back:\nrank 0 sends $N-1$")
    b.axhline(2, color=GREY, lw=0.8, ls=":")
    b.set_yscale("log")
    b.set_xlabel("ranks N")
    b.set_ylabel("bytes sent / bytes of the gradient")
    b.set_title("What the busiest rank sends", fontsize=9)
    b.legend(fontsize=7)
    fig.suptitle("Ring allreduce over 4 ranks: the numbers count the ranks summed into each chunk "
                 "(thick: all 4)", fontsize=10)
    return fig


# ==================================================================== the registry
FIGURES = {
    "03_gradcheck_eps": gradcheck_eps,
    "06_softmax_saturation": softmax_saturation,
    "06_masks": masks,
    "07_positional_encoding": positional_encoding,
    "07_profile": profile,
    "08_bpe_merges": bpe_merges,
    "09_lr_schedule": lr_schedule,
    "09_label_smoothing": label_smoothing,
    "09_loss_curve": loss_curve,
    "10_attention_heads": attention_heads,
    "12_ring_allreduce": ring_allreduce,
}


def draw(name, out_dir=IMG):
    """Draw one figure and save it as out_dir/name.png; returns the path."""
    fig = FIGURES[name]()
    # written whole or not at all; no version string: redraws diff cleanly
    path = Path(out_dir) / f"{name}.png"
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=DPI, metadata={"Software": None}))
    return path


def select(names):
    """Figure names from arguments that are names or lesson numbers ("09" or "9")."""
    if not names:
        return list(FIGURES)
    chosen = []
    for arg in names:
        if arg in FIGURES:
            chosen.append(arg)
        elif arg.isdigit():
            found = [n for n in FIGURES if n.startswith(f"{int(arg):02d}_")]
            if not found:
                raise SystemExit(f"lesson {arg} has no figure; lessons with figures: "
                                 f"{sorted({n[:2] for n in FIGURES})}")
            chosen += found
        else:
            raise SystemExit(
                f"no figure named {arg!r}; python lessons/figures.py --list shows them")
    return list(dict.fromkeys(chosen))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="figures.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="figure names or lesson numbers (default: all)")
    parser.add_argument("--out", default=str(IMG), help="output folder (default: lessons/img)")
    parser.add_argument("--list", action="store_true", help="list the figures and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, fn in FIGURES.items():
            print(f"{name:26s} {fn.__doc__.splitlines()[0]}")
        return 0
    try:
        names = select(args.names)
    except SystemExit as e:
        parser.error(str(e))
    # checked before drawing
    there = next(d for d in [Path(args.out), *Path(args.out).parents] if d.exists())
    if not there.is_dir():
        parser.error(f"--out {args.out} cannot be a folder: {there} is a file")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(
            "the figures need matplotlib: pip install -e .[plot]  (or .[lessons])") from None
    start = time.perf_counter()
    for name in names:
        t = time.perf_counter()
        path = draw(name, args.out)
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
              f"{path.stat().st_size / 1024:.0f} KB, {time.perf_counter() - t:.1f} s")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
