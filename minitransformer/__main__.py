"""`python -m minitransformer ...`: the command line of minitransformer/cli/. Ctrl-C or SIGTERM
while the modules load, or after the subcommand has ended, exits 130 or 143 with one line, never a
traceback; a signal once the process is ending (host.StopSignals, never released here, then
ignored) changes nothing."""
import signal
import sys

from .run.host import DEFAULTS, StopSignals, exit_code, stopped_while_loading

try:
    for stop, default in DEFAULTS.items():  # Python's own handler (not an ignored signal)
        if signal.getsignal(stop) in (default, stopped_while_loading):
            signal.signal(stop, stopped_while_loading)  # the package's own loading: quiet_loading
    from .cli import entry
    SIGNALS = StopSignals().catch()
    code = entry()
    SIGNALS.stopping = True
except KeyboardInterrupt as e:
    code = exit_code(e)
    print(f"python -m minitransformer: {'interrupted' if code == 130 else 'terminated (SIGTERM)'}",
          file=sys.stderr)
# ending with `code`: a late signal changes nothing (Python's shutdown would put back the defaults,
# which end the process by the signal; an ignored signal it leaves ignored)
for stop in DEFAULTS:
    signal.signal(stop, signal.SIG_IGN)
sys.exit(code)
