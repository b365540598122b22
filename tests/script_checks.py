"""What every runnable script (examples/ in tests/test_scripts.py, benchmarks/ in
benchmarks/tests/test_drivers.py) must do, checked alike, as a user runs it, in a subprocess from the
repository's root: --help with its defaults, and a bad option refused before any work in one line
naming it (exit 2, no traceback, nothing written)."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(script, args):
    """The finished subprocess of `python script args` in the repository's root."""
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def check_help(script):
    done = run(script, ["--help"])
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "--" in done.stdout


def check_bad_option(script, args, message, tmp_path):
    """args ("{tmp}" standing for tmp_path) refused with one error line matching `message`."""
    done = run(script, [a.replace("{tmp}", str(tmp_path)) for a in args])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith(f"{Path(script).name}: error: "), done.stderr
    # argparse's usage first
    assert all(line.startswith(("usage:", " ")) for line in lines[:-1]), done.stderr
    assert re.search(message, lines[-1]), lines[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing is written"
