"""Draw curves.png of a Multi30k recipe run: training loss and validation BLEU against minutes of
training (the "seconds" of each log.jsonl record; needs matplotlib).

    python results/multi30k-cpu/plot.py                                        # this folder, test 41.93
    python results/multi30k-cpu/plot.py results/multi30k-cpu-6000-ls01 41.66   # label smoothing 0.1
    python results/multi30k-cpu/plot.py results/multi30k-cpu-3600-d03 40.08    # the 3,600-update run

This folder's run trained to update 3,600 on ONE CPU thread beside another run (87.5 min), then resumed
to 6,000 on 2 threads alone (42.9 min, of which about 2 min paused for a benchmark; docs/experiments.md)."""
import json
import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
TEST_BLEU = float(sys.argv[2]) if len(sys.argv) > 2 else 41.93  # the run's test_2016_flickr score
records, offset, last = [], 0.0, 0.0     # a resumed run starts its clock at 0: continue the previous one
for line in open(HERE / "log.jsonl", encoding="utf-8"):
    r = json.loads(line)
    if r.get("event") == "start":
        offset = last
    elif "seconds" in r:
        last = r["seconds"] = r["seconds"] + offset
    records.append(r)
train = np.array([(r["seconds"] / 60, r["loss"]) for r in records if "loss" in r and "bleu" not in r])
valid = np.array([(r["seconds"] / 60, r["bleu"]) for r in records if "bleu" in r])
k = 50
fig = Figure(figsize=(10, 4))
loss_ax, bleu_ax = fig.subplots(1, 2)
loss_ax.plot(train[k - 1:, 0], np.convolve(train[:, 1], np.ones(k) / k, mode="valid"))
model = next(r["model"] for r in records if r.get("event") == "start")
loss_ax.set(xlabel="minutes of training", ylabel=f"training loss (label-smoothed, mean of {k} updates)",
            title=f"dropout {model['dropout']}, label smoothing {model['label_smoothing']}, {records[-1]['step']:,} updates")
bleu_ax.plot(valid[:, 0], valid[:, 1], "o-", label="validation, greedy, 300 sentences")
bleu_ax.axhline(TEST_BLEU, color="tab:red", ls="--", label=f"test_2016_flickr, last 5 averaged, beam 4, alpha 1: {TEST_BLEU}")
bleu_ax.set(xlabel="minutes of training", ylabel="sacreBLEU", ylim=(0, 45), title="BLEU against training time")
bleu_ax.legend(fontsize=8, loc="lower right")
for ax in (loss_ax, bleu_ax):
    ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=90)
