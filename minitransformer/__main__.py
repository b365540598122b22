"""`python -m minitransformer ...`: the command line of minitransformer/cli/."""
import sys

from .cli import main

sys.exit(main())
