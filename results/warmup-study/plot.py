"""Draw results/warmup-study/curves.png from the four logs of examples/warmup_study.py (needs matplotlib)."""
import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

HERE = Path(__file__).resolve().parent
RUNS = {"paper-w300": "post-LN, 1.0 x eq. (3), warmup 300", "scaled-w300": "post-LN, 0.3 x eq. (3), warmup 300",
        "paper-w4000": "post-LN, 1.0 x eq. (3), warmup 4000", "prenorm-w300": "pre-LN, 1.0 x eq. (3), warmup 300"}


def smooth(values, k=25):
    return np.arange(k, len(values) + 1), np.convolve(values, np.ones(k) / k, mode="valid")


fig = Figure(figsize=(11, 4))
loss_ax, grad_ax = fig.subplots(1, 2)
for name, label in RUNS.items():
    records = [json.loads(line) for line in open(HERE / f"{name}.jsonl", encoding="utf-8")]
    loss_ax.plot(*smooth([r["loss"] for r in records]), label=label)
    encoder = [np.mean([v for k, v in r["grad_norm"].items() if k.startswith("enc")]) for r in records]
    grad_ax.plot(*smooth(encoder), label=label)
loss_ax.set(xlabel="update", ylabel="training loss (label-smoothed, mean of 25)",
            title="Multi30k, small preset, 2,048-token batches")
grad_ax.set(xlabel="update", ylabel="gradient norm per encoder layer (mean of 25)", yscale="log",
            title="gradients reaching the encoder")
loss_ax.legend(fontsize=8)
for ax in (loss_ax, grad_ax):
    ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=90)
