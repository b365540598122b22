"""Draw results/multi30k-cpu-2400/curves.png: training loss and validation BLEU of the recipe run against
minutes (needs matplotlib). This run's log predates the "seconds" field of the Trainer's records, so
minutes come from step_times.txt (the step count polled every 15 s from update 912 on, and the training
start at 09:23:40), interpolated linearly: good to about a minute."""
import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

HERE = Path(__file__).resolve().parent
START = 1795425820  # training start, seconds since the epoch (09:23:40 UTC)

polled = np.loadtxt(HERE / "step_times.txt")                        # (n, 2): epoch seconds, steps done
known_steps = np.concatenate([[0], polled[:, 1]])
known_minutes = np.concatenate([[0], (polled[:, 0] - START) / 60])
keep = np.concatenate([[True], np.diff(known_steps) > 0])           # one time per step count
minutes = lambda steps: np.interp(steps, known_steps[keep], known_minutes[keep])

records = [json.loads(line) for line in open(HERE / "log.jsonl", encoding="utf-8")]
train = [(r["step"], r["loss"]) for r in records if "loss" in r and "bleu" not in r]
valid = [(r["step"], r["bleu"]) for r in records if "bleu" in r]
steps, loss = np.array(train).T
k = 50
fig = Figure(figsize=(10, 4))
loss_ax, bleu_ax = fig.subplots(1, 2)
loss_ax.plot(minutes(steps[k - 1:]), np.convolve(loss, np.ones(k) / k, mode="valid"))
loss_ax.set(xlabel="minutes", ylabel=f"training loss (label-smoothed, mean of {k} updates)",
            title="small preset, pre-LN, 1.0 x eq. (3), 2 CPU threads")
vs, vb = np.array(valid).T
bleu_ax.plot(minutes(vs), vb, "o-", label="validation, greedy, 300 sentences")
bleu_ax.axhline(38.19, color="tab:red", ls="--", label="test_2016_flickr, last 5 averaged, beam 4: 38.19")
bleu_ax.set(xlabel="minutes", ylabel="sacreBLEU", ylim=(0, 45), title="BLEU against training time")
bleu_ax.legend(fontsize=8, loc="lower right")
for ax in (loss_ax, bleu_ax):
    ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=90)
