"""The classic first end-to-end check: learn to copy random token sequences.

    python examples/copy_task.py            # about a minute on a laptop CPU
    python examples/copy_task.py --steps 300 --device gpu

Sources are random sequences of symbols 3..V-1 (ids 0, 1, 2 are <pad>, <s>, </s>); the target is the
source itself. A model that copies must learn to attend to the source position that matches its
output position, the simplest alignment there is. Prints the training loss and the exact-match
accuracy of greedy decoding on fresh sequences; the exit code is 1 below 90% exact copies.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import minitransformer as mt  # noqa: E402
from minitransformer.text.bpe import MAX_VOCAB  # noqa: E402
from minitransformer.checks import SettingError  # noqa: E402
from minitransformer.config import SearchConfig  # noqa: E402
from minitransformer.search import greedy_search  # noqa: E402
from minitransformer.run.training import Trainer, TrainingConfig  # noqa: E402
from minitransformer.transformer import Transformer, TransformerConfig  # noqa: E402


def random_sequences(n, vocab_size, max_len, seed):
    """n lists of 1..max_len symbols drawn from 3..vocab_size-1."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=n)
    return [rng.integers(3, vocab_size, size=k).tolist() for k in lengths]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=500, help="updates (default: 500)")
    p.add_argument("--vocab-size", type=int, default=13,
                   help="3 special ids + 10 symbols (default: 13)")
    p.add_argument("--max-len", type=int, default=8,
                   help="longest sequence, in symbols (default: 8)")
    p.add_argument("--seed", type=int, default=0, help="data, weights and batch order (default: 0)")
    p.add_argument("--lr-scale", type=float, default=0.3, help="factor on eq. (3) (default: 0.3)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="default: cpu")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    # every option before any work: one sentence naming it
    if not 4 <= args.vocab_size <= MAX_VOCAB:
        p.error(f"--vocab-size must be between 4 (<pad> <s> </s> and one symbol) and "
                f"{MAX_VOCAB:,}, got {args.vocab_size:,}")
    try:
        # the tiny preset, smaller still; Note: no dropout
        # and a short warmup suit this noise-free task
        cfg = TransformerConfig.tiny(vocab_size=args.vocab_size, d_model=64, d_ff=256, dropout=0.0)
        training_config = TrainingConfig(steps=args.steps, max_tokens=1000, warmup_steps=100,
                                         lr_scale=args.lr_scale, eval_every=0, save_every=0,
                                         seed=args.seed, progress=not args.no_progress)
    except SettingError as e:
        p.error(e.renamed({"steps": "--steps", "lr_scale": "--lr-scale", "seed": "--seed"}))
    if not 1 <= args.max_len <= cfg.max_len - 1:
        p.error(f"--max-len must be between 1 and {cfg.max_len - 1} (the model's {cfg.max_len} "
                f"positions hold </s> too), got {args.max_len}")
    try:
        mt.use(args.device)
    except RuntimeError as e:
        raise SystemExit(f"{p.prog}: error: --device {args.device}: {e}") from None
    start = time.perf_counter()

    train = random_sequences(20000, args.vocab_size, args.max_len, args.seed)
    test = random_sequences(200, args.vocab_size, args.max_len, args.seed + 1)
    pairs = [(s, s) for s in train]
    mt.seed(args.seed)
    model = Transformer(cfg)
    summary = Trainer(model, None, pairs, None, training_config).train()
    if summary["stopped"] != "done":  # Ctrl-C (130) or SIGTERM (143): no decoding
        return 143 if summary["stopped"] == "terminated" else 130
    losses = summary["last_loss"]

    hyps = greedy_search(model, test, SearchConfig(max_len_a=1, max_len_b=5))
    correct = sum(h.tokens == s for h, s in zip(hyps, test))
    for s, h in list(zip(test, hyps))[:3]:
        print(f"  source {s}\n  output {h.tokens}")
    print(f"final training loss {losses:.3f}; exact copies: {correct}/{len(test)} = "
          f"{100 * correct / len(test):.1f}% in {time.perf_counter() - start:.0f} s")
    if correct / len(test) < 0.9:  # the check fails: exit code 1, and why
        print(f"{p.prog}: fewer than 90% exact copies: the model did not learn to copy (more "
              f"--steps?)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
