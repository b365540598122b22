"""What every subcommand shares: the program name, the model presets, the usage error, the help
layout with its examples, the check that an input file exists, and the device switch.

Each subcommand module imports this one and the library, never another subcommand.
Left out on purpose: parsing and dispatch (cli/__init__.py), anything one subcommand alone needs.
"""
import argparse
import os

from minitransformer import backend

PROG = "python -m minitransformer"
PRESETS = ("tiny", "small", "base", "big")


class UsageError(Exception):
    """A bad argument or input file: exit code 2."""


def help_formatter(prog):
    """argparse's formatter for every parser here: descriptions and examples kept as written."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def examples(*lines):
    """An epilog of command lines: examples("bleu hyp ref") -> "examples:\\n  python -m minitransformer bleu hyp ref"."""
    return "examples:\n" + "\n".join(f"  {PROG} {line}" for line in lines)


def existing(path, what):
    """path itself when it is None, "-" (stdin) or a file; a UsageError naming `what` otherwise."""
    if path is not None and path != "-" and not os.path.isfile(path):
        raise UsageError(f"{what} not found: {path}")
    return path


def use_device(name):
    """Run everything after this on "cpu" or "gpu"; a RuntimeError with the reason when no GPU is usable."""
    backend.use(name)
