"""`python -m minitransformer ...`: the command line of minitransformer/cli/. Ctrl-C while the
modules load, or after the subcommand has ended, exits 130 with one line, never a traceback; a
signal once the process is ending (host.StopSignals, never released here) changes nothing."""
import signal
import sys

from .run.host import StopSignals, exit_code, stopped_while_loading

# Python's own Ctrl-C handler (not an ignored SIGINT), or host.quiet_loading's
LOADING = signal.getsignal(signal.SIGINT) in (signal.default_int_handler, stopped_while_loading)
try:
    if LOADING:
        signal.signal(signal.SIGINT, stopped_while_loading)
    from .cli import entry
    if LOADING:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    SIGNALS = StopSignals().catch()
    code = entry()
    SIGNALS.stopping = True
except KeyboardInterrupt as e:
    code = exit_code(e)
    print(f"python -m minitransformer: {'interrupted' if code == 130 else 'terminated (SIGTERM)'}",
          file=sys.stderr)
sys.exit(code)
