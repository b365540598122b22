"""`python -m minitransformer ...`: the command line of minitransformer/cli/."""
import sys

from .cli import entry

sys.exit(entry())
