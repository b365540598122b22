"""`python -m minitransformer average`: the parameters of several checkpoints averaged into one to
translate with (section 6.1).

Left out on purpose: weighted averages of checkpoints.
"""
import os
import re

from minitransformer.run.checkpoint import average_files
from minitransformer.run.rundir import list_checkpoints
from minitransformer.text.fileio import remove_stale_temporaries

from .common import (UsageError, examples, existing, help_formatter, not_an_input, prints,
                     same_file, writable_file)


def add_parser(subparsers):
    """Register `average` on an argparse subparsers object."""
    average = subparsers.add_parser(
        "average", help="average checkpoints (section 6.1)", formatter_class=help_formatter,
        description="Average the parameters of several checkpoints into one, for translation "
                    "(the paper averages the last 5 checkpoints of a base model, the last 20 of "
                    "a big one). Give files, or a directory with --last N.",
        epilog=examples("average runs/de-en/checkpoint_0019000.npz "
                        "runs/de-en/checkpoint_0020000.npz --output avg.npz",
                        "average runs/de-en --last 5 --output runs/de-en/average.npz"))
    average.add_argument("inputs", nargs="+", help="checkpoint files, or one directory")
    average.add_argument("--last", type=int,
                         help="with a directory: average its last N step checkpoints")
    average.add_argument("--output", required=True, metavar="FILE")
    average.set_defaults(func=run_average)
    return average


@prints
def run_average(args):
    """Average the checkpoints given (or a directory's last --last) into --output; the exit code."""
    if args.last is not None and args.last < 1:
        raise UsageError(f"--last must be at least 1, got {args.last}")
    writable_file(args.output, "--output", stdout=False)
    if re.fullmatch(r"checkpoint_(\d+|best)\.npz", os.path.basename(args.output)):
        raise UsageError(f"--output {args.output} is named like a training run's checkpoint: "
                         "it would replace or pass for one; give another name, such as average.npz")
    paths = args.inputs
    if len(paths) == 1 and os.path.isdir(paths[0]):
        found = list_checkpoints(paths[0])
        if not found:
            raise UsageError(f"no checkpoint_*.npz files in {paths[0]}")
        if args.last is not None and args.last > len(found):
            raise UsageError(f"--last {args.last} asks for more checkpoints than {paths[0]} "
                             f"holds ({len(found)})")
        paths = found[-args.last:] if args.last else found
    elif args.last is not None:
        raise UsageError("--last goes with a directory, not with a list of files")
    for n, path in enumerate(paths):
        existing(path, "checkpoint", seekable=True)
        if any(same_file(p, path) for p in paths[:n]):
            raise UsageError(f"checkpoint {path} is given twice; "
                             "it would weigh twice in the average")
    not_an_input(args.output, "--output", [("the checkpoint to average", p) for p in paths])
    # what a killed average left there
    remove_stale_temporaries(os.path.dirname(os.path.abspath(args.output)))
    average_files(paths, args.output)
    print(f"averaged {len(paths)} checkpoint{'s' * (len(paths) > 1)} into {args.output}: "
          + ", ".join(os.path.basename(p) for p in paths))
    return 0
