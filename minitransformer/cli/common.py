"""What every subcommand shares: the program name, the model presets, the usage error, the help
layout with its examples, the checks of input files and output paths (before any work) and the
naming of a failed write, turning a library's SettingError into a UsageError naming the option
(from the error's fields, not its message), and the device switch.

Each subcommand module imports this one and the library, never another subcommand.
Left out on purpose: parsing and dispatch (cli/__init__.py), anything one subcommand alone needs.
"""
import argparse
import contextlib
import functools
import os
import sys

from minitransformer import backend

from minitransformer.run import distributed, host
from minitransformer.run.checkpoint import CheckpointError
from minitransformer.checks import SettingError
from minitransformer.text.fileio import check_creatable, check_name, check_writable_dir
from minitransformer.run.rundir import check_new_run, check_run_path
from minitransformer.run.training import TrainingError

PROG = "python -m minitransformer"
PRESETS = ("tiny", "small", "base", "big")


class UsageError(Exception):
    """A bad argument or input file: exit code 2."""


def run_command(args, report=True):
    """args.func(args), the subcommand parsed into args, -> its exit code, each error as one line
    on stderr: a UsageError 2, the work failing 1, Ctrl-C 130, SIGTERM 143 (cli.main, and each
    rank thread of train). report=False: the code alone, no line (a rank thread but the first,
    whose errors are the first's, found on the same lines of the same corpus). The first Ctrl-C or
    SIGTERM stops the subcommand where it is (a training run saves first); later ones are only
    noted (host.StopSignals), so a second Ctrl-C never cuts the ending short."""
    say = (lambda line: print(line, file=sys.stderr)) if report else (lambda line: None)
    signals = host.StopSignals()
    try:
        signals.catch()
        return args.func(args) or 0
    except UsageError as e:
        say(f"{PROG} {args.command}: error: {e}")
        return 2
    except (CheckpointError, TrainingError, ValueError, OSError, RuntimeError) as e:
        say(f"{PROG} {args.command}: error: {e}")
        return 1
    except MemoryError:
        say(f"{PROG} {args.command}: error: not enough memory for this input")
        return 1
    except KeyboardInterrupt as e:
        signals.stopping = True
        terminated = isinstance(e, host.Terminated)
        say(f"{PROG} {args.command}: {'terminated (SIGTERM)' if terminated else 'interrupted'}")
        return host.exit_code(e)
    finally:
        signals.release()


def help_formatter(prog):
    """argparse's formatter for every parser here: descriptions and examples kept as written."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def examples(*lines):
    """An epilog of command lines:
    examples("bleu hyp ref") -> "examples:\\n  python -m minitransformer bleu hyp ref"."""
    return "examples:\n" + "\n".join(f"  {PROG} {line}" for line in lines)


def existing(path, what, seekable=False):
    """path itself when it is None, "-" (stdin), a file, or (unless it must be `seekable`: read
    twice, or a zip archive) a pipe such as a FIFO or a shell's <(...); else a UsageError naming
    `what`."""
    if path is None or path == "-" or os.path.isfile(path):
        return path
    if os.path.isdir(path):
        raise UsageError(f"{what} {path} is a directory, not a file")
    if not os.path.exists(path):
        raise UsageError(f"{what} not found: {path}")
    if seekable:
        raise UsageError(f"{what} {path} is a pipe or a device, not a file: it must be a file "
                         "that can be read more than once (save it to a file first)")
    return path


def writable_file(path, option, stdout=True):
    """path itself when it is None, "-" (stdout, where `stdout` allows it) or a file that can be
    written (its directory existing or creatable, and writable); a UsageError naming `option`
    otherwise. Creates nothing."""
    if path == "-" and not stdout:
        raise UsageError(f"{option} takes a file name, not stdout ('-')")
    if path is None or path == "-":
        return path
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a directory; give a file name")
    _usage(check_name, path, option)
    # replaced by a plain file, not written into
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(f"{option} {path} is not a regular file (a device or a pipe); "
                         "give a file name")
    if os.path.isfile(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{option} {path} is read-only; "
                         "make it writable or give another file name")
    _usage(check_creatable, os.path.dirname(os.path.normpath(path)), f"{option} {path}")
    return path


def same_file(a, b):
    """True when the paths a and b name one file (through a link, ./, a hard link); never for
    None or '-'."""
    if a in (None, "-") or b in (None, "-"):
        return False
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def not_an_input(path, option, inputs):
    """path itself unless it is one of `inputs` that writing it would destroy, (what, path) pairs
    such as ("the --input file", "in.txt"); then a UsageError naming `option` and the input."""
    for what, other in inputs:
        if same_file(path, other):
            raise UsageError(f"{option} {path} is also {what} {other}; writing it would destroy "
                             "that file: give another file name")
    return path


def writable_dir(path, option):
    """path itself when it is a writable directory or one that can be created; a UsageError naming
    `option` otherwise (a file, a directory without write permission, a path too long to hold a
    run's files). Creates nothing."""
    _usage(check_run_path, path, option)
    _usage(check_writable_dir, path, option)
    return path


def no_earlier_run(path, option, hint="", tokenizer=None):
    """path itself when it holds no file of an earlier run (rundir.check_new_run: a step
    checkpoint, checkpoint_best.npz, log.jsonl, and the tokenizer file `tokenizer` when the run
    learns one); a UsageError naming `option` otherwise, before a new run mixes its files with
    them or replaces them."""
    _usage(check_new_run, path, option, hint, tokenizer)
    return path


def _usage(check, *args):
    """Run a library check of a path, its ValueError (which names the option) as a UsageError."""
    try:
        check(*args)
    except ValueError as e:
        raise UsageError(str(e)) from None


@contextlib.contextmanager
def writing(option, path):
    """Name the option and the file, not atomic_write's temporary, when writing `path` fails
    (a full disk)."""
    try:
        yield
    except OSError as e:
        raise OSError(f"{option} {path} cannot be written: {e.strerror or e}") from None


def option_error(error, options):
    """A UsageError from a library SettingError, naming the option of its setting ({"lr_scale":
    "--lr-scale"}: "--lr-scale must be ...", without the owner); any other ValueError as it is."""
    return UsageError(error.renamed(options) if isinstance(error, SettingError) else str(error))


def prints(run):
    """run_<name> writing stdout in UTF-8 whatever the locale (text in is UTF-8, so text out is,
    as with --output and sacreBLEU), and returning 141 without a word when stdout's reader has
    gone away (`| head -1`): what `cat` does, killed by SIGPIPE (128 + 13), so
    `set -o pipefail` still sees it."""
    @functools.wraps(run)
    def run_printing(args):
        if hasattr(sys.stdout, "reconfigure"):  # not on a StringIO that a caller put there
            sys.stdout.reconfigure(encoding="utf-8", errors="surrogateescape")
        try:
            code = run(args)
            sys.stdout.flush()
            return code
        except BrokenPipeError:
            # the flush at exit: nowhere, no word
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
    return run_printing


def use_device(name):
    """Run everything after this on "cpu" or "gpu"; a RuntimeError naming --device and the reason
    when no GPU is usable."""
    try:
        backend.use(name)
    except RuntimeError as e:
        raise RuntimeError(f"--device {name}: {e}".replace("use('cpu')", "--device cpu")) from None


def report_stop(command, summary, hint=""):
    """The exit code of a training run that did not finish, after one line on stderr saying why and
    where the checkpoint is: 130 for Ctrl-C ("interrupted"), 143 for SIGTERM ("terminated")."""
    signal_name = "SIGTERM" if summary["stopped"] == "terminated" else "Ctrl-C"
    # data parallel: every rank stopped at the same step; one says so
    if distributed.world().is_main:
        print(f"{PROG} {command}: {summary['stopped']} ({signal_name}) at step {summary['step']}; "
              f"checkpoint saved: {summary['checkpoint']}{hint}", file=sys.stderr)
    return 143 if summary["stopped"] == "terminated" else 130
