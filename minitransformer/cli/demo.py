"""`python -m minitransformer demo`: the offline end-to-end run, from nothing to a trained
translator, on the task of demo_task.py: numbers in digits -> the same numbers in English words
("3 4 1 7 , 1 2" -> "three thousand four hundred seventeen , twelve").

The demo generates the task, learns a BPE tokenizer on it, trains the tiny preset on the CPU in
minutes, then translates held-out lines and prints exact-match accuracy and sacreBLEU.
Left out on purpose: any download; any setting a user must choose.
"""
import dataclasses
import tempfile
import time

from minitransformer.checks import SettingError
from minitransformer.run import distributed, host
from minitransformer.text.demo_task import DEMO, QUICK, make_splits
from minitransformer.run.metrics import corpus_bleu, exact_match
from minitransformer.run.pipeline import TOKENIZER_FILE, prepare_training
from minitransformer.run.translation import translate_lines, use_best_weights
from minitransformer.run.training import TrainingConfig
from minitransformer.transformer import TransformerConfig

from .common import (PROG, UsageError, examples, help_formatter, no_earlier_run, prints,
                     report_stop, use_device, writable_dir)



def add_parser(subparsers):
    """Register `demo` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "demo", help="offline end-to-end run: generate data, learn BPE, train, translate",
        formatter_class=help_formatter,
        epilog=examples("demo", "demo --steps 800 --seed 1 --out runs/demo", "demo --quick"),
        description="Fully offline: generate a small translation task (numbers in digits -> "
                    "English words, e.g. '3 4 1 , 7' -> 'three hundred forty one , seven'), "
                    "learn a BPE tokenizer on it, train the tiny Transformer on the CPU, then "
                    "translate held-out examples and print exact-match accuracy and sacreBLEU.")
    p.add_argument("--steps", type=int, default=None,
                   help="training updates (default: %d; --quick: %d)"
                        % (DEMO["steps"], QUICK["steps"]))
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the data, the weights and the batches (default: 0)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where to write the tokenizer, checkpoints and "
                        "log.jsonl (default: a new temporary directory)")
    p.add_argument("--quick", action="store_true",
                   help="a very short run (seconds) that checks the "
                        "pipeline, not the accuracy; the test suite runs it")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="default: cpu")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_demo)
    return p


@prints
def run_demo(args):
    """Generate the task, train on it, translate held-out lines, print the scores; the exit code."""
    settings = QUICK if args.quick else DEMO
    steps = settings["steps"] if args.steps is None else args.steps
    try:  # 10**400 would overflow later (a float, a checkpoint's JSON): refused first
        host.check_exact("demo", **{"--steps": steps, "--seed": args.seed})
    except SettingError as e:
        raise UsageError(e.message) from None
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    if args.seed < 0:
        raise UsageError(f"--seed must be at least 0, got {args.seed}")
    if args.out is not None:
        writable_dir(args.out, "--out")
        # the demo learns its own tokenizer, saved there
        no_earlier_run(args.out, "--out", tokenizer=TOKENIZER_FILE)
    training_config = TrainingConfig(steps=steps, max_tokens=settings["max_tokens"],
                                     warmup_steps=settings["warmup_steps"],
                                     lr_scale=settings["lr_scale"],
                                     eval_every=settings["eval_every"], save_every=0, keep=1,
                                     seed=args.seed, eval_sentences=100,
                                     progress=not args.no_progress)
    use_device(args.device)
    out = args.out or tempfile.mkdtemp(prefix="minitransformer-demo-")
    start = time.perf_counter()

    train, valid, test = make_splits(settings["n_train"], settings["n_test"], settings["n_test"],
                                     seed=args.seed, max_numbers=settings["max_numbers"],
                                     max_digits=settings["max_digits"])
    print(f"task: {len(train[0]):,} training pairs, e.g. {train[0][0]!r} -> {train[1][0]!r}")
    overrides = settings["overrides"]
    listed = ", ".join(f"{k}={v}" for k, v in overrides.items())
    shrunk = f" shrunk ({listed})" if overrides else ""
    print(f"settings: tiny preset{shrunk}; training {steps} steps on the {args.device} "
          f"(Note: dropout {settings['dropout']}, warmup {settings['warmup_steps']}, "
          f"{settings['lr_scale']} x eq. (3): tuned for this task)")

    def model_config(vocab_size):
        return TransformerConfig.tiny(vocab_size=vocab_size, dropout=settings["dropout"],
                                      **overrides)
    # on a CPU as rank threads, a core each (distributed.default_ranks), each a share of the tokens
    ranks = 1 if args.device == "gpu" else distributed.default_ranks()
    share = dataclasses.replace(training_config,
                                max_tokens=training_config.max_tokens // ranks)
    trained = []                                 # the first rank's (trainer, tokenizer, summary)

    def train_rank():
        trainer, tokenizer = prepare_training(*train, model_config, share, out,
                                              vocab_size=settings["vocab_size"], valid=valid)
        summary = trainer.train()
        if distributed.world().is_main:
            trained.append((trainer, tokenizer, summary))
        return 0
    code = train_rank() if ranks == 1 else distributed.run_threads(train_rank, (), ranks)
    if not trained:                              # a rank failed: its message is printed
        return code or 1
    trainer, tokenizer, summary = trained[0]
    if summary["stopped"] != "done":
        return report_stop("demo", summary)
    chosen = use_best_weights(trainer.model, out) or summary["checkpoint"]

    # greedy, as validated
    hypotheses = translate_lines(trainer.model, tokenizer, test[0], training_config.search)
    bleu, signature = corpus_bleu(hypotheses, [test[1]])
    print("\nheld-out examples (never seen in training):")
    for source, reference, hypothesis in list(zip(test[0], test[1], hypotheses))[:5]:
        print(f"  source:     {source}\n  reference:  {reference}\n"
              f"  hypothesis: {hypothesis}  [{'ok' if hypothesis == reference else 'WRONG'}]\n")
    first_loss = trainer.losses[min(trainer.losses)]
    print(f"training loss: {first_loss:.3f} -> {summary['last_loss']:.3f} "
          f"in {summary['steps_run']} steps ({summary['seconds']:.0f} s)")
    print("\n".join(loss_curve([trainer.losses[s] for s in sorted(trainer.losses)])) + "\n")
    accuracy = 100 * exact_match(hypotheses, test[1])
    print(f"exact match on {len(hypotheses)} held-out lines: {accuracy:.1f}%")
    print(f"BLEU = {bleu:.2f}  ({signature})")
    print(f"total time {time.perf_counter() - start:.0f} s; checkpoint: {chosen}")
    print(f"translate with it:  echo '1 2 , 3 4 5' | {PROG} translate --checkpoint {chosen}")
    return 0


def loss_curve(losses, width=60, height=8):
    """The training loss as a text chart, one column per stretch of steps (their mean loss).

    loss_curve([4.0, 2.0, 1.0], width=3, height=2)
        -> ["  4.00 |#  ", "  1.00 |###", "        step 1 .. 3"]
    """
    n = len(losses)
    parts = (losses[i * n // width:(i + 1) * n // width] for i in range(width))
    columns = [sum(part) / len(part) for part in parts if part]
    top = max(columns)
    bottom = min(columns)
    levels = [round((c - bottom) / (top - bottom) * (height - 1)) if top > bottom else 0
              for c in columns]
    rows = []
    for row in range(height - 1, -1, -1):
        label = "       |"
        if row == height - 1:
            label = f"{top:6.2f} |"
        elif row == 0:
            label = f"{bottom:6.2f} |"
        rows.append(label + "".join("#" if level >= row else " " for level in levels))
    return rows + [f"        step 1 .. {len(losses)}"]
