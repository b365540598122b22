"""`python -m minitransformer translate`: translate lines of text with a checkpoint.

Checks every option before loading the model, reads and checks every line (one too long for the
model's positions is named) before decoding, and writes only a complete result. Reads one
sentence a line (a file, or stdin), translates in batches by beam or greedy search, writes one
line per sentence (or i<TAB>text lines for --nbest > 1), and with --attention draws the
encoder-decoder attention of the first line's translation.
Left out on purpose: streaming (the input is read whole), serving, ensembles of checkpoints.
"""
import sys

from minitransformer import viz
from minitransformer.run.translation import load_model
from minitransformer.checks import FileError, check_int
from minitransformer.config import STOPS, SearchConfig
from minitransformer.text.fileio import atomic_write, read_lines
from minitransformer.search import beam_search
from minitransformer.run.translation import translate_lines

from .common import (
    UsageError,
    examples,
    existing,
    help_formatter,
    not_an_input,
    option_error,
    prints,
    use_device,
    writable_file,
    writing,
)


def add_parser(subparsers):
    """Register `translate` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "translate", help="translate lines from stdin (or a file) with a checkpoint",
        formatter_class=help_formatter,
        description="Translate one sentence per line, in batches, with a checkpoint's model and "
                    "tokenizer (embedded in the checkpoint, or --tokenizer). Beam search with the "
                    "paper's settings: --beam 4 --alpha 0.6 --max-len-b 50.",
        epilog=examples("translate --checkpoint runs/demo/checkpoint_0001000.npz < input.txt",
                        "translate --checkpoint avg.npz --beam 4 --alpha 0.6 --input test.de "
                        "--output hyp.en",
                        "translate --checkpoint avg.npz --beam 5 --nbest 3"
                        "   # i<TAB>text lines, best first",
                        "translate --checkpoint avg.npz --input test.de --stop fast"
                        "   # stops sentences sooner",
                        "translate --checkpoint avg.npz --input test.de --attention attn.png"))
    p.add_argument("--checkpoint", required=True, metavar="FILE")
    p.add_argument("--tokenizer", metavar="FILE",
                   help="a BPE JSON file (default: the checkpoint's own)")
    p.add_argument("--input", default="-", metavar="FILE", help="default: stdin")
    p.add_argument("--output", default="-", metavar="FILE", help="default: stdout")
    p.add_argument("--beam", type=int, default=4, help="beam size; 1 is greedy search (default: 4)")
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty (default: 0.6)")
    p.add_argument("--nbest", type=int, default=1, help="hypotheses per line (default: 1)")
    p.add_argument("--max-len-a", type=float, default=1.0,
                   help="max output length = a * input length + b (default a: 1)")
    p.add_argument("--max-len-b", type=int, default=50, help="(default b: 50)")
    p.add_argument("--stop", choices=STOPS, default="exact",
                   help="when beam search calls a sentence done: exact (no alive prefix can enter "
                        "its --nbest best finished hypotheses at any length still open) or fast "
                        "(ending at the next length, as Hugging Face's default: 15-35%% less time "
                        "on Multi30k; it can miss a longer, better hypothesis) (default: exact)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it is drawn on stderr only when stderr is a terminal)")
    p.add_argument("--attention", metavar="PNG",
                   help="also draw the encoder-decoder attention of the first line's "
                        "translation, every head of the last layer "
                        "(needs matplotlib: pip install -e .[plot])")
    p.set_defaults(func=run_translate)
    return p


# SearchConfig's fields and translate_lines' batch_size -> the options that set them
OPTIONS = {"beam_size": "--beam", "nbest": "--nbest", "alpha": "--alpha",
           "max_len_a": "--max-len-a", "max_len_b": "--max-len-b", "batch_size": "--batch-size",
           "stop": "--stop"}


@prints
def run_translate(args):
    """Check the options, load the checkpoint, read and check every line, translate, then write the
    whole result at once (--output atomically: an existing file is replaced only by a complete
    result, never truncated by a failure); the exit code."""
    # a zip archive: its directory is at the end
    existing(args.checkpoint, "--checkpoint file", seekable=True)
    existing(args.tokenizer, "--tokenizer file", seekable=True)  # as train's: a file, never a pipe
    existing(args.input, "--input file")
    try:
        search = SearchConfig(beam_size=args.beam, alpha=args.alpha, max_len_a=args.max_len_a,
                              max_len_b=args.max_len_b, nbest=args.nbest, stop=args.stop)
        check_int("translate", "batch_size", args.batch_size, 1)
    except ValueError as e:
        raise option_error(e, OPTIONS) from None
    inputs = [("the --input file", args.input), ("the --checkpoint file", args.checkpoint),
              ("the --tokenizer file", args.tokenizer)]
    not_an_input(writable_file(args.output, "--output"), "--output", inputs)
    not_an_input(writable_file(args.attention, "--attention"), "--attention",
                 inputs + [("the --output file", args.output)])
    if args.attention:
        try:
            viz.check_path(args.attention, "--attention")
        except ValueError as e:
            raise UsageError(str(e)) from None
        except ImportError as e:  # no matplotlib: said before any work
            raise RuntimeError(f"--attention: {e}") from None
    use_device(args.device)
    model, tokenizer, _ = load_model(args.checkpoint, args.tokenizer)
    lines = read_lines(args.input)  # stdin is read once the checkpoint is known to be good
    if args.attention and not lines:
        name = "stdin" if args.input == "-" else args.input
        raise ValueError(f"--attention: {name} holds no line to draw")
    try:
        translations = translate_lines(model, tokenizer, lines, search, batch_size=args.batch_size,
                                       progress=not args.no_progress and sys.stderr.isatty())
    except FileError as e:  # a line too long for the model's positions, found before any decoding
        raise e.in_file(args.input) from None
    if search.nbest > 1:
        translations = [f"{i}\t{text}" for i, hypotheses in enumerate(translations)
                        for text in hypotheses]
    text = "".join(line + "\n" for line in translations)
    if args.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with writing("--output", args.output):
            atomic_write(args.output, lambda f: f.write(text), mode="w")
    if args.attention and lines:
        draw_attention(model, tokenizer, lines[0], search, args.attention)
    return 0


def draw_attention(model, tokenizer, line, search, path):
    """The cross-attention of the line's best translation (viz.collect_attention), saved to path."""
    ids = tokenizer.encode(line)
    best = beam_search(model, [ids], search)[0][0]
    try:
        viz.plot_sentence_attention(model, tokenizer, ids, best.tokens, path)
    except ImportError as e:
        raise RuntimeError(str(e)) from None
    print(f"attention map of line 1 saved to {path}", file=sys.stderr)
