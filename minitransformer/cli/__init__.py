"""The command line: `python -m minitransformer {demo,bpe,train,translate,bleu,average}`.

build_parser() gathers every subcommand's parser (one module each, over common.py); main()
parses, runs one subcommand and maps its errors to exit codes: what the user gave is wrong
(UsageError) -> 2, the work itself fails -> 1, Ctrl-C -> 130, each as one line on stderr without a
traceback (a training run stopped by Ctrl-C or SIGTERM saves a checkpoint and returns 130 or 143
itself). Left out on purpose: config files other than TransformerConfig JSON, serving. Data
parallel: `train --ranks N` (threads of one process), or under mpiexec (distributed.py).
"""
import argparse
import signal
import threading

from minitransformer.run.distributed import run_main
from minitransformer.run.training import Terminated

from . import average, bleu, bpe, demo, train, translate
from .common import PROG, examples, help_formatter, run_command

# in the order of --help
SUBCOMMANDS = (demo, bpe, train, translate, bleu, average)


def build_parser():
    """The argparse parser of every subcommand; each sets `func`, its run_<name>(args)."""
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=help_formatter,
        description="minitransformer: the Transformer of 'Attention Is All You Need' "
                    "from scratch on NumPy/CuPy.",
        epilog=examples("demo", "bpe --input train.de train.en --vocab-size 8000 --output bpe.json",
                        "train --help", "translate --checkpoint ck.npz < in.txt",
                        "bleu hyp.txt ref.txt"))
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    parser.commands = subparsers.choices                # name -> that subcommand's parser
    return parser


def main(argv=None):
    """Parse argv (default: sys.argv[1:]) and run one subcommand; returns the exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the subcommand, with its usage line
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    # SIGTERM acts as Ctrl-C from the start (learning a BPE, reading a corpus), not only once
    # training has begun
    main_thread = threading.current_thread() is threading.main_thread()
    catch = main_thread and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    previous = signal.signal(signal.SIGTERM, _terminate) if catch else None
    try:
        return run_command(args)
    finally:
        if catch:
            signal.signal(signal.SIGTERM, previous)


def _terminate(signum, frame):
    raise Terminated()


def entry():
    """`python -m minitransformer` and the `minitransformer` script: main() as one rank of the world
    (distributed.run_main: under mpiexec, a rank that fails ends every rank)."""
    return run_main(main)
