"""Why does eq. (3) at full scale stall on Multi30k? Train the same model under several
learning-rate settings for a few hundred updates and record, every update, the loss, the learning
rate, the update's size relative to the weights, and the gradient norm of every layer (embedding,
each encoder and decoder layer): the measurements behind docs/experiments.md.

    python examples/warmup_study.py --run paper-w300 --steps 300          # one setting
    python examples/warmup_study.py --run all --steps 300 --out runs/warmup
        # every setting, one after another

Each run writes OUT/<name>.jsonl (one JSON object per update). The settings (all: small preset,
joint BPE 8000, batches of 2,048 tokens, seed 0, dropout 0.1, label smoothing 0.1):
    paper-w300   1.0 x eq. (3), warmup 300           (the recipe that stalled: peak rate 3.6e-3)
    scaled-w300  0.3 x eq. (3), warmup 300           (the first recipe: peak 1.1e-3)
    paper-w4000  1.0 x eq. (3), warmup 4000          (the paper's warmup: peak 9.9e-4, reached late)
    prenorm-w300 1.0 x eq. (3), warmup 300, pre-LN   (Note: not in the paper)
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import minitransformer as mt  # noqa: E402
from minitransformer.text.bpe import BPE  # noqa: E402
from minitransformer.text.corpus import encode_pairs, read_parallel  # noqa: E402
from minitransformer.text.data import BatchIterator  # noqa: E402
from minitransformer.optim import Adam, WarmupSchedule  # noqa: E402
from minitransformer.run.training import step_seed  # noqa: E402
from minitransformer.transformer import Transformer, TransformerConfig  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "multi30k"
RUNS = {
    "paper-w300": dict(lr_scale=1.0, warmup=300, norm_first=False),
    "scaled-w300": dict(lr_scale=0.3, warmup=300, norm_first=False),
    "paper-w4000": dict(lr_scale=1.0, warmup=4000, norm_first=False),
    "prenorm-w300": dict(lr_scale=1.0, warmup=300, norm_first=True),
}


def layer_of(name):
    """The group a parameter's gradient norm is reported under: "embed", "enc.0", "dec.2", ..."""
    parts = name.split(".")
    if parts[0] in ("encoder", "decoder") and parts[1] == "layers":
        return f"{parts[0][:3]}.{parts[2]}"
    return "embed" if "embed" in name else parts[0]


def run(name, settings, pairs, vocab_size, steps, max_tokens, out):
    mt.seed(0)
    model = Transformer(TransformerConfig.small(vocab_size=vocab_size,
                                                norm_first=settings["norm_first"]))
    model.train()
    names = dict(model.named_parameters())
    adam = Adam(model.parameters(), lr=0.0)
    schedule = WarmupSchedule(model.config.d_model, settings["warmup"], settings["lr_scale"])
    batches = BatchIterator(pairs, max_tokens, 0, 1, 2, seed=0)
    log = open(out / f"{name}.jsonl", "w", encoding="utf-8")
    start = time.perf_counter()
    for step in range(1, steps + 1):
        mt.backend.seed(step_seed(0, step))
        b = next(batches)
        loss = model.loss(b.src, b.tgt_in, b.tgt_out, b.src_mask, b.tgt_mask)
        loss.backward()
        norms = {}
        for k, p in names.items():
            norms[layer_of(k)] = norms.get(layer_of(k),
                                           0.0) + float((p.grad.astype(np.float64) ** 2).sum())
        before = {k: p.data.copy() for k, p in names.items()}
        adam.step(schedule(step))
        adam.zero_grad()
        update = math.sqrt(sum(float(((p.data - before[k]).astype(np.float64) ** 2).sum())
                               for k, p in names.items()))
        weight = math.sqrt(sum(float((before[k].astype(np.float64) ** 2).sum()) for k in names))
        record = {"step": step, "loss": float(loss.item()), "lr": schedule(step),
                  "update_ratio": update / weight,
                  "grad_norm": {k: math.sqrt(v) for k, v in norms.items()},
                  "seconds": time.perf_counter() - start}
        log.write(json.dumps(record) + "\n")
        log.flush()
        if step % 25 == 0:
            print(f"{name} step {step}: loss {record['loss']:.3f} lr {record['lr']:.2e} "
                  f"update/weight {record['update_ratio']:.2e} ({record['seconds']:.0f} s)",
                  flush=True)
    log.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default="all", choices=["all", *RUNS],
                   help="which setting (default: all)")
    p.add_argument("--steps", type=int, default=300, help="updates per setting (default: 300)")
    p.add_argument("--max-tokens", type=int, default=2048, help="tokens per batch (default: 2048)")
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--out", type=Path, default=Path("runs/warmup_study"))
    args = p.parse_args(argv)
    for option, value in (("--steps", args.steps), ("--max-tokens", args.max_tokens)):
        if value < 1:
            p.error(f"{option} must be at least 1, got {value}")
    files = [args.data_dir / f"train.{lang}.gz" for lang in ("de", "en")]
    if not all(f.is_file() for f in files):
        p.error(f"Multi30k training files not found in {args.data_dir}")
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out {args.out} is a file, not a directory")
    args.out.mkdir(parents=True, exist_ok=True)
    tok_path = args.out / "tokenizer.json"
    tok = BPE.load(tok_path) if tok_path.exists() else BPE.train(files, 8000)
    tok.save(tok_path)
    pairs, report = encode_pairs(*read_parallel(*files), tok, max_len=256)
    print(f"BPE {tok.vocab_size} ids; {report}", flush=True)
    for name in (RUNS if args.run == "all" else [args.run]):
        run(name, RUNS[name], pairs, tok.vocab_size, args.steps, args.max_tokens, args.out)


if __name__ == "__main__":
    main()
