"""The command line: `python -m minitransformer {demo,train,translate,bleu,average,bpe}`.

The demo subcommand lives in demo.py, bpe in bpe_cli.py; the others here.
Each subcommand maps argparse options onto the library (TrainingConfig, Trainer, search, checkpoint)
and adds nothing of its own. Errors in what the user gave are one sentence on stderr, without a
traceback: exit code 2 for a bad argument or a missing file, 1 when the work itself fails.
Left out on purpose: config files other than TransformerConfig JSON, multi-GPU, serving.
"""
import argparse
import json
import os
import sys

PROG = "python -m minitransformer"
PRESETS = ("tiny", "small", "base", "big")


class UsageError(Exception):
    """A bad argument or input file: exit code 2."""


def _formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _examples(*lines):
    return "examples:\n" + "\n".join(f"  {PROG} {line}" for line in lines)


def _existing(path, what):
    if path is not None and path != "-" and not os.path.isfile(path):
        raise UsageError(f"{what} not found: {path}")
    return path


def _read_input(path):
    """Lines of a file, or of stdin for "-"; only "\n" ends a line (as data.read_lines)."""
    from .data import read_lines
    if path != "-":
        return read_lines(path)
    lines = sys.stdin.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [s[:-1] if s.endswith("\r") else s for s in lines]


def _use_device(name):
    from . import backend
    backend.use(name)  # a RuntimeError with the reason when no GPU is usable


# ---------------------------------------------------------------- train
def add_train(sub):
    p = sub.add_parser("train", help="train a Transformer on a parallel corpus", formatter_class=_formatter,
                       description="Train a Transformer on a parallel corpus (one sentence a line, .gz accepted), "
                                   "evaluating validation loss and sacreBLEU, writing checkpoints and log.jsonl.",
                       epilog=_examples(
                           "train --config small --train-src train.de --train-tgt train.en \\\n"
                           "      --valid-src val.de --valid-tgt val.en --vocab-size 8000 --out runs/de-en --steps 20000",
                           "train --config my_config.json ... --tokenizer bpe.json --max-tokens 4096 --accum 6",
                           "train ... --out runs/de-en --resume auto      # continue the latest checkpoint in --out"))
    p.add_argument("--config", default="small", help="a preset (tiny, small, base, big) or a JSON file of "
                   "TransformerConfig fields (default: small)")
    p.add_argument("--train-src", required=True, metavar="FILE")
    p.add_argument("--train-tgt", required=True, metavar="FILE")
    p.add_argument("--valid-src", metavar="FILE")
    p.add_argument("--valid-tgt", metavar="FILE")
    p.add_argument("--tokenizer", metavar="FILE", help="a BPE JSON file (see the bpe subcommand)")
    p.add_argument("--vocab-size", type=int, metavar="N", help="learn a joint BPE of N ids on the training "
                   "files instead (saved as OUT/tokenizer.json)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--resume", metavar="CKPT", help="a checkpoint to continue from, or 'auto' for the latest in --out")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch and side (default: 4096)")
    p.add_argument("--accum", type=int, default=1, help="batches per update (default: 1)")
    p.add_argument("--steps", type=int, help="training updates")
    p.add_argument("--epochs", type=float, help="passes over the data (instead of --steps)")
    p.add_argument("--warmup", type=int, default=4000, help="warmup steps of eq. (3) (default: 4000)")
    p.add_argument("--lr-scale", type=float, default=1.0, help="factor on eq. (3) (default: 1)")
    p.add_argument("--clip-norm", type=float, help="clip the gradient norm (off by default, as in the paper)")
    p.add_argument("--max-len", type=int, default=256, help="drop training pairs longer than N tokens (default: 256)")
    p.add_argument("--eval-every", type=int, default=1000, help="steps between evaluations (default: 1000)")
    p.add_argument("--eval-sentences", type=int, help="translate only the first N validation sentences")
    p.add_argument("--save-every", type=int, default=1000, help="steps between checkpoints (default: 1000)")
    p.add_argument("--keep", type=int, default=5, help="step checkpoints to keep (default: 5)")
    p.add_argument("--beam", type=int, default=1, help="beam size for the validation BLEU (default: 1, greedy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_train)


def _model_config(spec, vocab_size):
    from .transformer import TransformerConfig
    if spec in PRESETS:
        return getattr(TransformerConfig, spec)(vocab_size=vocab_size)
    _existing(spec, "config file")
    try:
        with open(spec, encoding="utf-8") as f:
            d = json.load(f)
    except ValueError as e:
        raise UsageError(f"config file {spec} is not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise UsageError(f"config file {spec} must hold a JSON object of TransformerConfig fields")
    preset = d.pop("preset", None)
    try:
        if preset is not None:
            return getattr(TransformerConfig, preset)(**{"vocab_size": vocab_size, **d})
        return TransformerConfig.from_dict({"vocab_size": vocab_size, **d})
    except (ValueError, TypeError, AttributeError) as e:
        raise UsageError(f"config file {spec}: {e}") from None


def run_train(args):
    from . import backend
    from .bpe import BPE
    from .data import encode_pairs, read_parallel
    from .training import Trainer, TrainingConfig, list_checkpoints
    from .transformer import Transformer
    for name in ("train_src", "train_tgt", "valid_src", "valid_tgt", "tokenizer"):
        _existing(getattr(args, name), f"--{name.replace('_', '-')} file")
    if (args.valid_src is None) != (args.valid_tgt is None):
        raise UsageError("give both --valid-src and --valid-tgt, or neither")
    if (args.tokenizer is None) == (args.vocab_size is None):
        raise UsageError("give either --tokenizer FILE or --vocab-size N (to learn one)")
    if (args.steps is None) == (args.epochs is None):
        raise UsageError("give either --steps or --epochs")
    if args.config not in PRESETS and not args.config.endswith(".json"):
        raise UsageError(f"--config must be one of {', '.join(PRESETS)} or a .json file, got {args.config!r}")
    _use_device(args.device)
    os.makedirs(args.out, exist_ok=True)
    src, tgt = read_parallel(args.train_src, args.train_tgt)
    learned = os.path.join(args.out, "tokenizer.json")
    if args.tokenizer:
        tok, tok_path = BPE.load(args.tokenizer), args.tokenizer
    elif args.resume and os.path.exists(learned):  # the tokenizer learned by the run being resumed
        tok, tok_path = BPE.load(learned), learned
        print(f"resuming: using the tokenizer learned before, {learned}")
    else:
        tok_path = learned
        print(f"learning a joint BPE of {args.vocab_size} ids on the training files ...")
        tok = BPE.train(src + tgt, args.vocab_size)
        tok.save(tok_path)
    cfg = _model_config(args.config, tok.vocab_size)
    pairs, report = encode_pairs(src, tgt, tok, max_len=args.max_len)
    del src, tgt
    print(f"training data: {report}")
    valid = read_parallel(args.valid_src, args.valid_tgt) if args.valid_src else None
    try:
        tc = TrainingConfig(max_tokens=args.max_tokens, accum=args.accum, steps=args.steps, epochs=args.epochs,
                            warmup_steps=args.warmup, lr_scale=args.lr_scale, clip_norm=args.clip_norm,
                            eval_every=args.eval_every, save_every=args.save_every, keep=args.keep,
                            seed=args.seed, beam_size=args.beam, eval_sentences=args.eval_sentences,
                            progress=not args.no_progress)
    except ValueError as e:
        raise UsageError(str(e)) from None
    backend.seed(args.seed)
    model = Transformer(cfg)
    print(f"model: {model.num_parameters():,} parameters; {tc.max_tokens * tc.accum:,} tokens per update")
    trainer = Trainer(model, tok, pairs, valid, tc, args.out, tokenizer_path=tok_path)
    if args.resume:
        resume = args.resume
        if resume == "auto":
            found = list_checkpoints(args.out)
            resume = found[-1] if found else None
            if resume is None:
                print(f"--resume auto: no checkpoint in {args.out} yet; starting afresh")
        else:
            _existing(resume, "--resume checkpoint")
        if resume:
            trainer.resume(resume)
    summary = trainer.train()
    print(f"{summary['stopped']} at step {summary['step']} ({summary['seconds']:.0f} s); "
          f"best BLEU {summary['best_bleu']}; checkpoint: {summary['checkpoint']}")
    return 130 if summary["stopped"] == "interrupted" else 0


# ---------------------------------------------------------------- translate
def add_translate(sub):
    p = sub.add_parser("translate", help="translate lines from stdin (or a file) with a checkpoint",
                       formatter_class=_formatter,
                       description="Translate one sentence per line, in batches, with a checkpoint's model and "
                                   "tokenizer (embedded in the checkpoint, or --tokenizer). Beam search with the "
                                   "paper's settings: --beam 4 --alpha 0.6 --max-len-b 50.",
                       epilog=_examples("translate --checkpoint runs/demo/checkpoint_0001000.npz < input.txt",
                                        "translate --checkpoint avg.npz --beam 4 --alpha 0.6 --input test.de --output hyp.en",
                                        "translate --checkpoint avg.npz --beam 5 --nbest 3   # i<TAB>text lines, best first",
                                        "translate --checkpoint avg.npz --input test.de --attention attn.png"))
    p.add_argument("--checkpoint", required=True, metavar="FILE")
    p.add_argument("--tokenizer", metavar="FILE", help="a BPE JSON file (default: the checkpoint's own)")
    p.add_argument("--input", default="-", metavar="FILE", help="default: stdin")
    p.add_argument("--output", default="-", metavar="FILE", help="default: stdout")
    p.add_argument("--beam", type=int, default=4, help="beam size; 1 is greedy search (default: 4)")
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty (default: 0.6)")
    p.add_argument("--nbest", type=int, default=1, help="hypotheses per line (default: 1)")
    p.add_argument("--max-len-a", type=float, default=1.0, help="max output length = a * input length + b (default a: 1)")
    p.add_argument("--max-len-b", type=int, default=50, help="(default b: 50)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--attention", metavar="PNG", help="also draw the encoder-decoder attention of the first line's "
                   "translation, every head of the last layer (needs matplotlib: pip install -e .[plot])")
    p.set_defaults(func=run_translate)


def run_translate(args):
    from .checkpoint import load_model
    from .search import translate_lines
    _existing(args.checkpoint, "--checkpoint file")
    _existing(args.tokenizer, "--tokenizer file")
    _existing(args.input, "--input file")
    if args.beam < 1 or args.nbest < 1 or args.nbest > args.beam:
        raise UsageError(f"need 1 <= --nbest <= --beam, got --beam {args.beam} --nbest {args.nbest}")
    _use_device(args.device)
    model, tok, _ = load_model(args.checkpoint, args.tokenizer)
    lines = _read_input(args.input)
    out = translate_lines(model, tok, lines, beam_size=args.beam, alpha=args.alpha, nbest=args.nbest,
                    max_len_a=args.max_len_a, max_len_b=args.max_len_b, batch_size=args.batch_size)
    if args.nbest > 1:
        text = [f"{i}\t{h}" for i, hyps in enumerate(out) for h in hyps]
    else:
        text = out
    if args.output == "-":
        sys.stdout.write("".join(t + "\n" for t in text))
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in text))
    if args.attention and lines:
        _draw_attention(model, tok, lines[0], args)
    return 0


def _draw_attention(model, tok, line, args):
    """The cross-attention of the first line's best translation, saved to args.attention."""
    from . import viz
    from .search import beam_search
    ids = tok.encode(line)
    best = beam_search(model, [ids], beam_size=args.beam, alpha=args.alpha,
                       max_len_a=args.max_len_a, max_len_b=args.max_len_b)[0][0]
    try:
        viz.plot_sentence_attention(model, tok, ids, best.tokens, args.attention)
    except ImportError as e:
        raise RuntimeError(str(e)) from None
    print(f"attention map of line 1 saved to {args.attention}", file=sys.stderr)


# ---------------------------------------------------------------- bleu
def add_bleu(sub):
    p = sub.add_parser("bleu", help="sacreBLEU of a hypothesis file against references", formatter_class=_formatter,
                       description="Corpus BLEU with sacreBLEU's defaults (13a tokenization, exp smoothing) of "
                                   "detokenized hypotheses against one or more reference files of equal length; "
                                   "prints the score and sacreBLEU's signature.",
                       epilog=_examples("bleu hyp.en ref.en", "bleu hyp.en ref1.en ref2.en", "bleu - ref.en < hyp.en"))
    p.add_argument("hypotheses", help="hypothesis file, one line per sentence ('-': stdin)")
    p.add_argument("references", nargs="+", help="reference file(s), .gz accepted")
    p.set_defaults(func=run_bleu)


def run_bleu(args):
    from .data import read_lines
    from .training import corpus_bleu
    _existing(args.hypotheses, "hypothesis file")
    for r in args.references:
        _existing(r, "reference file")
    hyps = _read_input(args.hypotheses)
    refs = [read_lines(r) for r in args.references]
    for r, lines in zip(args.references, refs):
        if len(lines) != len(hyps):
            raise UsageError(f"reference file {r} has {len(lines)} lines but the hypotheses have {len(hyps)}")
    score, signature = corpus_bleu(hyps, refs)
    print(f"BLEU = {score:.2f}")
    print(f"signature: {signature}")
    return 0


# ---------------------------------------------------------------- average
def add_average(sub):
    p = sub.add_parser("average", help="average checkpoints (section 6.1)", formatter_class=_formatter,
                       description="Average the parameters of several checkpoints into one, for translation "
                                   "(the paper averages the last 5 checkpoints of a base model, the last 20 of "
                                   "a big one). Give files, or a directory with --last N.",
                       epilog=_examples("average runs/de-en/checkpoint_0019000.npz runs/de-en/checkpoint_0020000.npz --output avg.npz",
                                        "average runs/de-en --last 5 --output runs/de-en/average.npz"))
    p.add_argument("inputs", nargs="+", help="checkpoint files, or one directory")
    p.add_argument("--last", type=int, help="with a directory: average its last N step checkpoints")
    p.add_argument("--output", required=True, metavar="FILE")
    p.set_defaults(func=run_average)


def run_average(args):
    from .checkpoint import average_files
    from .training import list_checkpoints
    paths = args.inputs
    if len(paths) == 1 and os.path.isdir(paths[0]):
        found = list_checkpoints(paths[0])
        if not found:
            raise UsageError(f"no checkpoint_*.npz files in {paths[0]}")
        paths = found[-args.last:] if args.last else found
    elif args.last:
        raise UsageError("--last goes with a directory, not with a list of files")
    for p in paths:
        _existing(p, "checkpoint")
    average_files(paths, args.output)
    print(f"averaged {len(paths)} checkpoints into {args.output}: " + ", ".join(os.path.basename(p) for p in paths))
    return 0


# ---------------------------------------------------------------- entry point
def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_formatter,
        description="minitransformer: the Transformer of 'Attention Is All You Need' from scratch on NumPy/CuPy.",
        epilog=_examples("demo", "bpe --input train.de train.en --vocab-size 8000 --output bpe.json",
                         "train --help", "translate --checkpoint ck.npz < in.txt", "bleu hyp.txt ref.txt"))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from .demo import add_demo  # its own module: the offline end-to-end run
    add_demo(sub)
    try:  # the bpe subcommand lives beside the tokenizer; the CLI works without it
        from . import bpe_cli
        bpe_cli.add_parser(sub)
    except ImportError:
        pass
    add_train(sub)
    add_translate(sub)
    add_bleu(sub)
    add_average(sub)
    return parser


def main(argv=None):
    """Parse argv and run one subcommand; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from .checkpoint import CheckpointError
    from .training import TrainingError
    try:
        return args.func(args) or 0
    except UsageError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (CheckpointError, TrainingError, ValueError, OSError, RuntimeError) as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
