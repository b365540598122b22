"""`python -m minitransformer bpe`: learn a byte-level BPE tokenizer from text files, save it as
JSON, and report the time taken and the compression on the input.

Every option (files, vocabulary size, special tokens, --output) is checked before any reading.
Left out on purpose: encoding corpora to ids (data.py does that when training), other tokenizers.
"""
import os
import time
from pathlib import Path

from minitransformer.text.bpe import BPE, MAX_VOCAB
from minitransformer.checks import SettingError
from minitransformer.text.fileio import read_lines, remove_stale_temporaries

from .common import (UsageError, examples, existing, help_formatter, not_an_input, prints,
                     writable_file, writing)

NOTE = """
The files are learned from together (one joint vocabulary for source and target). The ids are
<pad>=0, <s>=1, </s>=2, then any --special-tokens, then the 256 bytes, then one id per merge."""


def add_parser(subparsers):
    """Register `bpe` on an argparse subparsers object: add_parser(parser.add_subparsers())."""
    p = subparsers.add_parser(
        "bpe", help="learn a byte-level BPE tokenizer from text files",
        formatter_class=help_formatter,
        description="Learn a byte-level BPE tokenizer from UTF-8 text files (one sentence a line, "
                    ".gz accepted), save it as one JSON file, and print the time taken and the "
                    "compression (tokens per whitespace-separated word) on the input.",
        epilog=examples("bpe --input train.de.gz train.en.gz --vocab-size 10000 --output tok.json")
        + "\n" + NOTE)
    p.add_argument("--input", nargs="+", action="extend", required=True, metavar="FILE",
                   help="training text files, plain or .gz "
                        "(--input given twice: the files of both)")
    p.add_argument("--vocab-size", type=int, required=True, metavar="N",
                   help="ids in all: special tokens + 256 bytes + merges (e.g. 10000)")
    p.add_argument("--output", required=True, metavar="FILE",
                   help="the tokenizer file to write (JSON)")
    p.add_argument("--min-frequency", type=int, default=2, metavar="N",
                   help="stop when the best pair occurs fewer than N times (default: 2)")
    p.add_argument("--special-tokens", nargs="*", action="extend", default=[], metavar="TOKEN",
                   help="extra special tokens, never split, after <pad> <s> </s> (e.g. <mask>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_bpe)
    return p


@prints
def run_bpe(args):
    """Check every option, learn, save, report; the exit code."""
    for path in args.input:
        if path == "-":
            raise UsageError("--input takes files, not stdin ('-'): they are read twice "
                             "(learning, then the report)")
        # missing, a directory, a pipe: a UsageError (exit 2)
        existing(path, "--input file", seekable=True)
    try:
        # repeated or empty special tokens are refused here
        smallest = BPE((), args.special_tokens).vocab_size
    except SettingError as e:
        raise UsageError(f"--special-tokens: {e.message}") from None
    if not smallest <= args.vocab_size <= MAX_VOCAB:
        raise UsageError(f"--vocab-size must be between {smallest} (the special tokens and the "
                         f"256 bytes) and {MAX_VOCAB:,}, got {args.vocab_size:,}")
    if args.min_frequency < 1:
        raise UsageError(f"--min-frequency must be at least 1, got {args.min_frequency}")
    output = writable_file(args.output, "--output", stdout=False)
    not_an_input(output, "--output", [("the --input file", p) for p in args.input])
    # what a killed bpe left there
    remove_stale_temporaries(os.path.dirname(os.path.abspath(args.output)))
    start = time.perf_counter()
    tokenizer = BPE.train([Path(f) for f in args.input], args.vocab_size, args.min_frequency,
                          args.special_tokens, progress=not args.quiet)
    seconds = time.perf_counter() - start
    with writing("--output", args.output):
        tokenizer.save(args.output)
    n_tokens = n_words = n_bytes = 0
    for path in args.input:
        for line in read_lines(path):  # without "\r\n", as learning and training read them
            n_tokens += len(tokenizer.encode(line, special=False))
            n_words += len(line.split())
            n_bytes += len(line.encode("utf-8"))
    print(f"learned {len(tokenizer.merges)} merges (vocab size {tokenizer.vocab_size}) from "
          f"{len(args.input)} file(s) in {seconds:.2f} s; wrote {args.output}")
    if tokenizer.vocab_size < args.vocab_size:  # learning stops when no pair is frequent enough
        print(f"note: {tokenizer.vocab_size:,} of the {args.vocab_size:,} ids asked for: "
              f"no pair occurs {args.min_frequency} or more times after the last merge "
              f"(--min-frequency {args.min_frequency})")
    print(f"compression on the input: {n_tokens:,} tokens for {n_words:,} words = "
          f"{n_tokens / max(n_words, 1):.3f} tokens per word "
          f"({n_bytes / max(n_tokens, 1):.2f} bytes per token)")
    return 0
