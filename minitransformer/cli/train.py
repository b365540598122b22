"""`python -m minitransformer train`: train a Transformer on a parallel corpus from files.

Checks every option first (the training settings, the model config, --max-len against the model's
positions, the files, --out), reads the corpus, then leaves the rest to
pipeline.prepare_training and the Trainer: the tokenizer (given, or learned and saved as
OUT/tokenizer.json), the model from a preset or a JSON file of TransformerConfig fields,
checkpoints and log.jsonl in --out, --resume.
Data parallel: on a CPU, rank threads of this process by default (distributed.default_ranks: a
core each), `--ranks 1` for one; or with no other flag under `mpiexec -n 2 python -m minitransformer
train ...` (processes; lesson 12).
Left out on purpose: config files other than TransformerConfig JSON.
"""
import argparse
import contextlib
import dataclasses
import json
import os

from minitransformer.run import distributed, host
from minitransformer.text.bpe import BOS_ID, BPE, EOS_ID, MAX_VOCAB, MIN_VOCAB, PAD_ID
from minitransformer.checks import SettingError
from minitransformer.config import SearchConfig
from minitransformer.text.corpus import read_parallel
from minitransformer.run.pipeline import TOKENIZER_FILE, prepare_training
from minitransformer.run.rundir import list_checkpoints, owning
from minitransformer.run.training import TrainingConfig
from minitransformer.transformer import TransformerConfig

from .common import (
    PRESETS,
    UsageError,
    examples,
    existing,
    help_formatter,
    no_earlier_run,
    report_stop,
    option_error,
    run_command,
    prints,
    use_device,
    writable_dir,
)

DEFAULT_MAX_LEN = 256
# the lines of --help's examples after those of examples(): data parallel
MORE_EXAMPLES = (
    "\n  python -m minitransformer train ... --ranks 1"
    "   # one rank (default on a CPU: a rank thread per core, up to 2)"
    "\n  mpiexec -n 2 -genv OMP_NUM_THREADS 1 python -m minitransformer train ..."
    "   # 2 ranks as processes")


def add_parser(subparsers):
    """Register `train` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "train", help="train a Transformer on a parallel corpus", formatter_class=help_formatter,
        description="Train a Transformer on a parallel corpus (one sentence a line, .gz accepted), "
                    "evaluating validation loss and sacreBLEU, writing checkpoints and log.jsonl.",
        epilog=examples(
            "train --config small --train-src train.de --train-tgt train.en \\\n"
            "      --valid-src val.de --valid-tgt val.en --vocab-size 8000 --out runs/de-en "
            "--steps 20000",
            "train --config my_config.json ... --tokenizer bpe.json --max-tokens 4096 --accum 6",
            "train ... --out runs/de-en --resume auto"
            "      # continue the latest checkpoint in --out")
        + MORE_EXAMPLES)
    p.add_argument("--config", default="small",
                   help="a preset (tiny, small, base, big) or a JSON file of "
                        "TransformerConfig fields (default: small)")
    p.add_argument("--train-src", required=True, metavar="FILE")
    p.add_argument("--train-tgt", required=True, metavar="FILE")
    p.add_argument("--valid-src", metavar="FILE")
    p.add_argument("--valid-tgt", metavar="FILE")
    p.add_argument("--tokenizer", metavar="FILE", help="a BPE JSON file (see the bpe subcommand)")
    p.add_argument("--vocab-size", type=int, metavar="N",
                   help="learn a joint BPE of N ids on the training "
                        "files instead (saved as OUT/tokenizer.json)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--resume", metavar="CKPT",
                   help="a checkpoint to continue from, or 'auto' for the latest in --out")
    p.add_argument("--max-tokens", type=int, default=4096,
                   help="tokens per batch and side (default: 4096)")
    p.add_argument("--accum", type=int, default=1, help="batches per update (default: 1)")
    p.add_argument("--ranks", type=int, default=None,
                   help="ranks that train together as threads of this process, a core each, "
                        "--max-tokens split among them (data parallel, lesson 12; default on a "
                        "CPU: %d here, one per core up to 2; on a GPU or under mpiexec: 1, the "
                        "processes are the ranks)" % distributed.default_ranks())
    p.add_argument("--steps", type=int, help="training updates")
    p.add_argument("--epochs", type=float, help="passes over the data (instead of --steps)")
    p.add_argument("--warmup", type=int, default=4000,
                   help="warmup steps of eq. (3) (default: 4000)")
    p.add_argument("--lr-scale", type=float, default=1.0, help="factor on eq. (3) (default: 1)")
    p.add_argument("--clip-norm", type=float,
                   help="clip the gradient norm (off by default, as in the paper)")
    p.add_argument("--max-len", type=int,
                   help="drop training pairs longer than N tokens (default: 256, or the "
                        "model's max_len - 1 if less)")
    p.add_argument("--eval-every", type=int, default=1000,
                   help="steps between evaluations (default: 1000)")
    p.add_argument("--eval-sentences", type=int,
                   help="translate only the first N validation sentences")
    p.add_argument("--save-every", type=int, default=1000,
                   help="steps between checkpoints (default: 1000)")
    p.add_argument("--keep", type=int, default=5, help="step checkpoints to keep (default: 5)")
    p.add_argument("--beam", type=int, default=1,
                   help="beam size for the validation BLEU (default: 1, greedy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="with --device gpu: each batch shape's update recorded "
                        "once as a CUDA graph, then replayed (faster; needs --accum 1, "
                        "no --clip-norm; lesson 11)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_train)
    return p


# TrainingConfig's and SearchConfig's fields -> the options that set them
OPTIONS = {"max_tokens": "--max-tokens", "accum": "--accum", "steps": "--steps",
           "epochs": "--epochs", "warmup_steps": "--warmup", "lr_scale": "--lr-scale",
           "clip_norm": "--clip-norm", "eval_every": "--eval-every", "save_every": "--save-every",
           "keep": "--keep", "seed": "--seed", "beam_size": "--beam",
           "eval_sentences": "--eval-sentences", "cuda_graphs": "--cuda-graphs"}


def model_config(spec, vocab_size):
    """The TransformerConfig of a preset name or a JSON file ({"preset": "tiny", "d_model": 64,
    ...}); a UsageError naming the file and the field for a bad one."""
    if spec in PRESETS:
        return getattr(TransformerConfig, spec)(vocab_size=vocab_size)
    existing(spec, "config file", seekable=True)  # read again once the tokenizer is known
    try:
        with open(spec, encoding="utf-8") as f:
            fields = json.load(f)
    except ValueError as e:  # invalid JSON, or not UTF-8
        raise UsageError(f"config file {spec} is not valid JSON ({e})") from None
    if not isinstance(fields, dict):
        raise UsageError(f"config file {spec} must hold a JSON object of TransformerConfig fields")
    preset = fields.pop("preset", "base")  # TransformerConfig's own defaults are the base model's
    if preset not in PRESETS:
        raise UsageError(f"config file {spec}: preset must be one of {', '.join(PRESETS)}, "
                         f"got {preset!r}")
    if "vocab_size" in fields:
        raise UsageError(f"config file {spec} sets vocab_size, but the tokenizer decides it "
                         "(--tokenizer or --vocab-size): remove it from the file")
    known = {f.name for f in dataclasses.fields(TransformerConfig)} | {"n_layers"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise UsageError(f"config file {spec}: unknown fields {', '.join(unknown)} "
                         "(TransformerConfig's fields, n_layers for both stacks, and preset "
                         "are known)")
    try:
        config = getattr(TransformerConfig, preset)(vocab_size=vocab_size, **fields)
    except SettingError as e:
        raise UsageError(f"config file {spec}: {e.message}") from None
    ids = (config.pad_id, config.bos_id, config.eos_id)
    if ids != (PAD_ID, BOS_ID, EOS_ID):
        raise UsageError(f"config file {spec}: pad_id, bos_id, eos_id must be the tokenizer's "
                         f"{PAD_ID}, {BOS_ID}, {EOS_ID}, got {', '.join(map(str, ids))}")
    return config


# every integer option: none may pass 2**53 - 1 (a float, a checkpoint's JSON), checked first
INTEGERS = ("vocab_size", "max_tokens", "accum", "ranks", "steps", "warmup", "max_len",
            "eval_every", "eval_sentences", "save_every", "keep", "beam", "seed")


def training_config_of(args):
    """The TrainingConfig of the options; a UsageError naming the option of a bad value."""
    try:
        return TrainingConfig(max_tokens=args.max_tokens, accum=args.accum, steps=args.steps,
                              epochs=args.epochs, warmup_steps=args.warmup,
                              lr_scale=args.lr_scale, clip_norm=args.clip_norm,
                              eval_every=args.eval_every, save_every=args.save_every,
                              keep=args.keep, seed=args.seed,
                              search=SearchConfig(beam_size=args.beam),
                              eval_sentences=args.eval_sentences, cuda_graphs=args.cuda_graphs,
                              progress=not args.no_progress)
    except ValueError as e:
        raise option_error(e, OPTIONS) from None


def check_args(args):
    """Every option, before any work: (TrainingConfig, --max-len), or a UsageError naming the
    first bad one."""
    try:  # 10**400 would overflow later (a float, int64, JSON): refused before anything else
        host.check_exact("train", **{f"--{name.replace('_', '-')}": getattr(args, name)
                                     for name in INTEGERS})
    except SettingError as e:
        raise UsageError(e.message) from None
    for name in ("train_src", "train_tgt", "valid_src", "valid_tgt"):
        existing(getattr(args, name), f"--{name.replace('_', '-')} file")
    # read here for its size, and again by the run
    existing(args.tokenizer, "--tokenizer file", seekable=True)
    if (args.valid_src is None) != (args.valid_tgt is None):
        raise UsageError("give both --valid-src and --valid-tgt, or neither")
    if (args.tokenizer is None) == (args.vocab_size is None):
        raise UsageError("give either --tokenizer FILE or --vocab-size N (to learn one)")
    if args.vocab_size is not None and not MIN_VOCAB <= args.vocab_size <= MAX_VOCAB:
        raise UsageError(f"--vocab-size must be between {MIN_VOCAB} (<pad> <s> </s> and the 256 "
                         f"bytes) and {MAX_VOCAB:,}, got {args.vocab_size:,}")
    if (args.steps is None) == (args.epochs is None):
        raise UsageError("give either --steps or --epochs")
    if args.eval_sentences is not None and args.valid_src is None:
        raise UsageError("--eval-sentences needs validation files (--valid-src and --valid-tgt)")
    if args.config not in PRESETS and not args.config.endswith(".json"):
        raise UsageError(f"--config must be one of {', '.join(PRESETS)} or a .json file, "
                         f"got {args.config!r}")
    if args.resume and args.resume != "auto":
        existing(args.resume, "--resume checkpoint", seekable=True)
    if args.cuda_graphs and args.device != "gpu":
        raise UsageError("--cuda-graphs replays CUDA graphs: give --device gpu")
    training_config = training_config_of(args)
    if args.ranks is None:  # a CPU run trains as rank threads, unless the ranks are processes
        alone = args.device == "gpu" or distributed.world().size > 1
        args.ranks = 1 if alone else min(distributed.default_ranks(), max(1, args.max_tokens))
    if args.ranks < 1:
        raise UsageError(f"--ranks must be an integer of at least 1, got {args.ranks}")
    if args.ranks > 1 and (args.device == "gpu" or distributed.world().size > 1):
        raise UsageError(f"--ranks {args.ranks} starts threads that share the CPU's cores: for "
                         "GPUs, or under mpiexec, leave it out and start one process per rank "
                         "(lesson 12)")
    if args.max_tokens // args.ranks < 1:
        raise UsageError(f"--max-tokens {args.max_tokens} cannot be split among "
                         f"--ranks {args.ranks}")
    most = distributed.max_rank_threads()
    if args.ranks > most:
        raise UsageError(f"--ranks must be at most {most} (2 rank threads per CPU core here: more "
                         f"would only wait for a core, each holding its own activations), "
                         f"got {args.ranks:,}")
    # the real vocabulary: a model too big for it is refused now, before run.lock or --out exists;
    # a damaged tokenizer file is named now too (exit 1), before the corpus is read
    config = model_config(args.config, args.vocab_size or BPE.load(args.tokenizer).vocab_size)
    longest = config.max_len - 1
    max_len = min(DEFAULT_MAX_LEN, longest) if args.max_len is None else args.max_len
    if not 1 <= max_len <= longest:
        raise UsageError(f"--max-len must be between 1 and {longest} (the model's max_len "
                         f"{config.max_len} holds <s> or </s> too), got {max_len}")
    writable_dir(args.out, "--out")
    return training_config, max_len


@prints
def run_train(args):
    """Check the options, read the corpus, prepare and run the training; the exit code (130 when
    interrupted by Ctrl-C, 143 when terminated by SIGTERM, a checkpoint saved in both cases).
    Everything that can be refused is refused here, once, before any rank thread starts."""
    training_config, max_len = check_args(args)
    # one run writes in --out (rank 0 for all): a live run there is named at once, before
    # anything is read
    with owning(args.out) if distributed.world().is_main else contextlib.nullcontext():
        # a fresh run (--resume auto too, where no step checkpoint is left) touches no earlier
        # run's files: its log.jsonl, best copy or tokenizer.json
        latest = list_checkpoints(args.out)[-1:] if args.resume == "auto" else []
        for path in latest:  # a FIFO planted there: named now, before any work
            existing(path, "--resume auto: the latest checkpoint", seekable=True)
        fresh = args.resume is None or (args.resume == "auto" and not latest)
        if fresh and distributed.world().is_main:
            no_earlier_run(args.out, "--out", "continue that run (--resume auto), or "
                           if args.resume is None else "--resume auto finds none of its step "
                           "checkpoints to continue; put them back, ",
                           None if args.tokenizer else TOKENIZER_FILE)
        use_device(args.device)
        corpus = read_parallel(args.train_src, args.train_tgt)
        valid = read_parallel(args.valid_src, args.valid_tgt) if args.valid_src else None
        check_fits(args, training_config, len(corpus[0]))
        if args.ranks == 1:
            return train_rank(args, training_config, max_len, corpus, valid)
        # the ranks as threads of this process, each a share of every update's tokens
        share = dataclasses.replace(training_config,
                                    max_tokens=training_config.max_tokens // args.ranks)
        return distributed.run_threads(train_thread, (args, share, max_len, corpus, valid),
                                       args.ranks)


def check_fits(args, training_config, pairs):
    """Before any work on the corpus: an update's batches (planned at once) and the updates of
    --epochs are bounded by its `pairs` (an epoch has at most one batch a pair); the Trainer
    checks the batches themselves (host.check_plan), once the pairs are encoded."""
    if 0 < pairs < training_config.accum:  # none: the pipeline says so
        raise UsageError(f"--accum {training_config.accum:,} asks for more batches per update "
                         f"than the {pairs:,} training pairs can make (an update plans its "
                         f"batches at once, each of one pair at least): give at most {pairs:,}")
    if args.epochs is not None and args.epochs * pairs > host.MAX_EXACT:
        raise UsageError(f"--epochs {args.epochs:g} over {pairs:,} pairs could make more than "
                         f"{host.MAX_EXACT:,} updates (2**53 - 1, the most a step count holds "
                         "exactly); give fewer")


def train_thread(args, training_config, max_len, corpus, valid):
    """train_rank in a rank thread, its errors turned into exit codes; the first rank says them."""
    run = lambda _: train_rank(args, training_config, max_len, corpus, valid)  # noqa: E731
    rank_args = argparse.Namespace(**{**vars(args), "func": run})
    return run_command(rank_args, report=distributed.world().is_main)


def train_rank(args, training_config, max_len, corpus, valid):
    """One rank's training (of one, or of rank threads) while this process owns --out."""
    train_src, train_tgt = corpus
    try:
        trainer, _ = prepare_training(train_src, train_tgt,
                                      lambda vocab_size: model_config(args.config, vocab_size),
                                      training_config, args.out, tokenizer=args.tokenizer,
                                      vocab_size=args.vocab_size,
                                      valid=valid, max_len=max_len, resume=args.resume,
                                      train_names=(args.train_src, args.train_tgt),
                                      valid_names=(args.valid_src, args.valid_tgt))
    except SettingError as e:  # the Trainer's bounds of --accum, --epochs (host.check_plan)
        if e.owner != "Trainer":
            raise
        learned = os.path.join(args.out, TOKENIZER_FILE)
        kept = (f" ({learned}, learned now, is kept: --tokenizer {learned} uses it again)"
                if args.vocab_size is not None and args.resume is None else "")
        raise UsageError(option_error(e, OPTIONS).args[0] + kept) from None
    del train_src, train_tgt  # the Trainer holds the encoded pairs
    summary = trainer.train()
    if summary["stopped"] != "done":
        return report_stop("train", summary, " (continue with --resume auto)")
    if distributed.world().is_main:
        best = ""
        if summary["best_bleu"] is not None:
            best = f"best BLEU {summary['best_bleu']:.2f}; "
        print(f"done at step {summary['step']} ({summary['seconds']:.0f} s); "
              f"{best}checkpoint: {summary['checkpoint']}")
    return 0
